#include <doctest/doctest.h>

#include "common/error.hpp"
#include "launcher/host_resources.hpp"
#include "launcher/option_values.hpp"

using namespace ddprun::launcher;
using ddprun::UsageError;

TEST_CASE("integers are parsed strictly") {
  int v = 0;
  CHECK(parse_int_strict("42", v));
  CHECK(v == 42);
  CHECK(parse_int_strict("-3", v));
  CHECK_FALSE(parse_int_strict("4x", v));
  CHECK_FALSE(parse_int_strict("", v));
  CHECK_FALSE(parse_int_strict(" 4", v));
  CHECK_FALSE(parse_int_strict("99999999999", v));
}

TEST_CASE("lists split on every separator, empty items kept") {
  CHECK(split_on("a,b,,c", ',') == std::vector<std::string>{"a", "b", "", "c"});
  CHECK(split_on("", ',') == std::vector<std::string>{""});
}

TEST_CASE("--nnodes takes N or MIN:MAX with MIN == MAX") {
  CHECK(parse_nnodes("1").min == 1);
  CHECK(parse_nnodes("1").max == 1);
  CHECK_FALSE(parse_nnodes("2:2").elastic());
  CHECK(parse_nnodes("2:2").max == 2);
  CHECK(parse_nnodes("1:3").min == 1);
  CHECK(parse_nnodes("1:3").max == 3);
  CHECK(parse_nnodes("1:3").elastic());
  CHECK_THROWS_AS(parse_nnodes("0"), UsageError);
  CHECK_THROWS_AS(parse_nnodes("1:2000000"), UsageError);
  CHECK_THROWS_AS(parse_nnodes("2:1"), UsageError);
  CHECK_THROWS_AS(parse_nnodes("x"), UsageError);
}

TEST_CASE("durations are seconds with fractions, bounded") {
  CHECK(parse_duration("--t", "30").count() == 30000);
  CHECK(parse_duration("--t", "0.25").count() == 250);
  CHECK(parse_duration("--t", "0").count() == 0);
  CHECK_THROWS_AS(parse_duration("--t", "-1"), UsageError);
  CHECK_THROWS_AS(parse_duration("--t", "nan"), UsageError);
  CHECK_THROWS_AS(parse_duration("--t", "5s"), UsageError);
}

TEST_CASE("--redirects/--tee follow torchrun: one mask or a per-local-rank map") {
  auto all = parse_std_streams("-r", "3", 4);
  CHECK(all.mask_for(0) == 3);
  CHECK(all.mask_for(3) == 3);
  auto map = parse_std_streams("-r", "0:1,2:2", 4);
  CHECK(map.mask_for(0) == 1);
  CHECK(map.mask_for(1) == 0);
  CHECK(map.mask_for(2) == 2);
  CHECK_THROWS_AS(parse_std_streams("-r", "4", 4), UsageError);
  CHECK_THROWS_AS(parse_std_streams("-r", "5:1", 4), UsageError);
  CHECK_THROWS_AS(parse_std_streams("-r", "0:1,0:2", 4), UsageError);
  CHECK_THROWS_AS(parse_std_streams("-r", "a:b", 4), UsageError);
}

TEST_CASE("rank lists are checked against the local world size") {
  CHECK(parse_rank_list("-f", "", 2).empty());
  CHECK(parse_rank_list("-f", "0,1", 2) == std::vector<int>{0, 1});
  CHECK_THROWS_AS(parse_rank_list("-f", "2", 2), UsageError);
  CHECK_THROWS_AS(parse_rank_list("-f", "0,,1", 2), UsageError);
}

TEST_CASE("names that become directories are restricted") {
  CHECK(valid_name("job-1.a_b"));
  CHECK_FALSE(valid_name(""));
  CHECK_FALSE(valid_name(".."));
  CHECK_FALSE(valid_name("a/b"));
  CHECK(valid_host("node-1.cluster"));
  CHECK(valid_host("::1"));
  CHECK_FALSE(valid_host("a b"));
}

TEST_CASE("visible GPUs follow CUDA_VISIBLE_DEVICES as the CUDA runtime reads it") {
  CHECK(visible_gpu_count("0,1,2", true) == 3);
  CHECK(visible_gpu_count("", true) == 0);
  CHECK(visible_gpu_count("-1", true) == 0);
  CHECK(visible_gpu_count("0,x,2", true) == 1);
  CHECK(visible_gpu_count("GPU-1234,MIG-abcd", true) == 2);
  CHECK(usable_cpu_count() >= 1);
}
