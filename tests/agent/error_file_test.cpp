#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "agent/error_file.hpp"

using ddprun::agent::read_error_file;

namespace {
std::string write_temp(const std::string& text) {
  char name[] = "/tmp/ddprun_error_file_testXXXXXX";
  const int fd = mkstemp(name);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(name) << text;
  return name;
}
}  // namespace

TEST_CASE("torchelastic's error file format gives message, call stack and time") {
  const auto path = write_temp(
      R"({"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": "train.py:12", "timestamp": "1700000000"}}})");
  const auto e = read_error_file(path);
  std::remove(path.c_str());
  CHECK(e.present);
  CHECK(e.message == "ValueError: bad batch");
  CHECK(e.where == "train.py:12");
  CHECK(e.timestamp == "1700000000");
}

TEST_CASE("a plain string message and a non-JSON file are both shown") {
  const auto a = write_temp(R"({"message": "plain"})");
  CHECK(read_error_file(a).message == "plain");
  std::remove(a.c_str());
  const auto b = write_temp("not json at all");
  CHECK(read_error_file(b).message == "not json at all");
  std::remove(b.c_str());
}

TEST_CASE("a missing or empty error file is absent") {
  CHECK_FALSE(read_error_file("/nonexistent/error.json").present);
  const auto p = write_temp("");
  CHECK_FALSE(read_error_file(p).present);
  std::remove(p.c_str());
}
