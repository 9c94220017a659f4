// One case per rule of launcher/hostlist.hpp. Every expectation was checked against SLURM 22.05's
// `scontrol show hostnames LIST` (which needs a slurm.conf but no running controller).
#include <doctest/doctest.h>

#include "launcher/hostlist.hpp"

using ddprun::launcher::expand_hostlist;
using ddprun::launcher::HostlistError;
using Hosts = std::vector<std::string>;

TEST_CASE("a plain name is itself; commas and whitespace separate names; empty items are skipped") {
  CHECK(expand_hostlist("solo") == Hosts{"solo"});
  CHECK(expand_hostlist("n1,n2,n1") == Hosts{"n1", "n2", "n1"});  // duplicates kept, in order
  CHECK(expand_hostlist("n1 n2") == Hosts{"n1", "n2"});
  CHECK(expand_hostlist("n1,,n2") == Hosts{"n1", "n2"});
  CHECK(expand_hostlist(",n1") == Hosts{"n1"});
  CHECK(expand_hostlist("n[1-2],") == Hosts{"n1", "n2"});
}

TEST_CASE("a bracket holds numbers and ranges, separated by commas") {
  CHECK(expand_hostlist("n[1,2]") == Hosts{"n1", "n2"});
  CHECK(expand_hostlist("n[1,3-4,07]") == Hosts{"n1", "n3", "n4", "n07"});
  CHECK(expand_hostlist("n[0-0]") == Hosts{"n0"});
  CHECK(expand_hostlist("gpu[07-09,12],cpu1") == Hosts{"gpu07", "gpu08", "gpu09", "gpu12", "cpu1"});
}

TEST_CASE("a range's numbers have the digit count of its low bound") {
  CHECK(expand_hostlist("n[001-003]") == Hosts{"n001", "n002", "n003"});
  CHECK(expand_hostlist("n[08-11]") == Hosts{"n08", "n09", "n10", "n11"});
  CHECK(expand_hostlist("n[8-11]") == Hosts{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[099-101]") == Hosts{"n099", "n100", "n101"});
  CHECK(expand_hostlist("n[01-1]") == Hosts{"n01"});
  CHECK(expand_hostlist("n[1-03]") == Hosts{"n1", "n2", "n3"});
}

TEST_CASE("dashes, dots and underscores are part of names") {
  CHECK(expand_hostlist("rack-1-n[1-2]") == Hosts{"rack-1-n1", "rack-1-n2"});
  CHECK(expand_hostlist("n-[1-2]") == Hosts{"n-1", "n-2"});
  CHECK(expand_hostlist("n.a[1-2],n_a[3]") == Hosts{"n.a1", "n.a2", "n_a3"});
}

TEST_CASE("several bracket groups multiply out: the last varies fastest, then the first, second, ...") {
  CHECK(expand_hostlist("a[1-2]b[3-4]") == Hosts{"a1b3", "a1b4", "a2b3", "a2b4"});
  CHECK(expand_hostlist("a[1-2]-[3-4]") == Hosts{"a1-3", "a1-4", "a2-3", "a2-4"});
  CHECK(expand_hostlist("n[1-2][3]") == Hosts{"n13", "n23"});
  CHECK(expand_hostlist("a[1-2]b[3-4]c[5-6]") ==
        Hosts{"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"});
  CHECK(expand_hostlist("a[1-2]b[3-5]c[6-7]") ==
        Hosts{"a1b3c6", "a1b3c7", "a2b3c6", "a2b3c7", "a1b4c6", "a1b4c7", "a2b4c6", "a2b4c7", "a1b5c6", "a1b5c7",
              "a2b5c6", "a2b5c7"});
  const Hosts four = expand_hostlist("a[1-2]b[3-4]c[5-6]d[7-8]");
  REQUIRE(four.size() == 16);
  CHECK(Hosts(four.begin(), four.begin() + 5) == Hosts{"a1b3c5d7", "a1b3c5d8", "a2b3c5d7", "a2b3c5d8", "a1b4c5d7"});
  CHECK(four[8] == "a1b3c6d7");
  CHECK(expand_hostlist("a[1-2]b[3-4],c[1-2]") == Hosts{"a1b3", "a1b4", "a2b3", "a2b4", "c1", "c2"});
}

TEST_CASE("text between bracket groups is kept, text after the last group is invalid") {
  CHECK(expand_hostlist("n[1-2]xy[3]") == Hosts{"n1xy3", "n2xy3"});
  CHECK_THROWS_AS(expand_hostlist("n[1-2]x"), HostlistError);
  CHECK_THROWS_AS(expand_hostlist("n[1-2]-ib"), HostlistError);
  CHECK_THROWS_AS(expand_hostlist("n[1-2]x,y[3]"), HostlistError);
}

TEST_CASE("a name may be all digits (the caller decides whether it is usable)") {
  CHECK(expand_hostlist("[1-2]") == Hosts{"1", "2"});
}

TEST_CASE("invalid ranges are refused as scontrol refuses them") {
  for (const char* bad : {"n[3-1]", "n[10-1]", "n[]", "n[a-b]", "n[1,,2]", "n[1-3:2]", "n[-2]", "n[1-2-3]",
                          "n\\[1\\]"})
    CHECK_THROWS_AS(expand_hostlist(bad), HostlistError);
}

TEST_CASE("malformed lists that scontrol half-accepts are refused") {
  CHECK_THROWS_AS(expand_hostlist("n[1-3"), HostlistError);   // scontrol prints "n]"
  CHECK_THROWS_AS(expand_hostlist("n[1-2]]"), HostlistError);  // scontrol: invalid
  CHECK_THROWS_AS(expand_hostlist("x1]"), HostlistError);      // scontrol prints "x1]"
  CHECK_THROWS_AS(expand_hostlist("n[1-]"), HostlistError);    // scontrol prints "n1"
  CHECK_THROWS_AS(expand_hostlist(""), HostlistError);
  CHECK_THROWS_AS(expand_hostlist(",,"), HostlistError);
  CHECK_THROWS_AS(expand_hostlist("n[1-999999]"), HostlistError);  // over 65536 hosts
}

TEST_CASE("the error says what is wrong") {
  try {
    expand_hostlist("a[1-2]b[3-4");
    FAIL("no error");
  } catch (const HostlistError& e) {
    CHECK(std::string(e.what()) == "unclosed '[' in 'a[1-2]b[3-4'");
  }
}
