#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "agent/error_file.hpp"
#include "common/supervision/error_file.hpp"

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

TEST_CASE("an error file that is a link is not read: its target stays out of the report") {
  // Issue 33: a worker that made error.json a link put the target's first line in the summary.
  const auto secret = write_temp("root:x:0:0:secret\n");
  const std::string link = secret + ".json";
  REQUIRE(::symlink(secret.c_str(), link.c_str()) == 0);
  const auto e = read_error_file(link);
  std::remove(link.c_str());
  std::remove(secret.c_str());
  CHECK_FALSE(e.present);
  CHECK(e.message.find("secret") == std::string::npos);
}

TEST_CASE("the one reader decodes JSON's escapes and takes torch's other shapes") {
  using ddprun::supervision::parse_error_file;
  // torch's @record: a Python traceback with escaped newlines and quotes, a number for the time, other
  // members (errorTraits) the reader skips.
  const auto e = parse_error_file(
      R"({"message": {"message": "RuntimeError: caf\u00e9 \"x\"", "extraInfo": {"py_callstack": "Traceback:\n  File \"t.py\"", )"
      R"("timestamp": 1700000000}, "errorTraits": {"category": "system_error", "retryability": [1, 2.5, true, null]}}})");
  CHECK(e.message == "RuntimeError: caf\xc3\xa9 \"x\"");
  CHECK(e.where == "Traceback:\n  File \"t.py\"");
  CHECK(e.timestamp == "1700000000");
  CHECK(parse_error_file(R"({"message": "a \ud83d\ude00 b"})").message == "a \xf0\x9f\x98\x80 b");
  CHECK(parse_error_file(R"({"message": {"message": "cut)").message == R"({"message": {"message": "cut)");  // raw
  CHECK(parse_error_file(R"({"message": {"message": "x"}} trailing)").message ==
        R"({"message": {"message": "x"}} trailing)");
  const std::string deep(100, '[');
  CHECK(parse_error_file(deep).message == deep);  // bounded depth: shown raw, never a crash
}

TEST_CASE("a missing or empty error file is absent") {
  CHECK_FALSE(read_error_file("/nonexistent/error.json").present);
  const auto p = write_temp("");
  CHECK_FALSE(read_error_file(p).present);
  std::remove(p.c_str());
}

namespace {
// What traceback.format_exc() gives for an exception raised 7 calls deep.
std::string deep_traceback() {
  std::string s = "Traceback (most recent call last):\n";
  for (int i = 1; i <= 7; ++i)
    s += "  File \"/job/train.py\", line " + std::to_string(10 * i) + ", in f" + std::to_string(i) + "\n    f" +
         std::to_string(i + 1) + "()\n";
  return s + "ValueError: bad batch\n";
}
}  // namespace

TEST_CASE("a traceback keeps its header, its last frames and the exception, and counts the rest") {
  const auto t = ddprun::agent::traceback_tail(deep_traceback(), 3);
  CHECK(t.frames_total == 7);
  CHECK(t.frames_shown == 3);
  REQUIRE(t.lines.size() == 1 + 1 + 3 * 2 + 1);
  CHECK(t.lines[0] == "Traceback (most recent call last):");
  CHECK(t.lines[1] == "  ... 4 earlier frames not shown");
  CHECK(t.lines[2] == "  File \"/job/train.py\", line 50, in f5");
  CHECK(t.lines[7] == "    f8()");
  CHECK(t.lines.back() == "ValueError: bad batch");
}

TEST_CASE("a short traceback is shown whole") {
  const auto t = ddprun::agent::traceback_tail(deep_traceback(), 10);
  CHECK(t.frames_shown == 7);
  CHECK(t.lines.size() == 1 + 7 * 2 + 1);
  CHECK(t.lines[1] == "  File \"/job/train.py\", line 10, in f1");
}

TEST_CASE("of chained exceptions, the last traceback is the one shown") {
  const std::string chained = "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nKeyError: 'x'\n\n"
                              "During handling of the above exception, another exception occurred:\n\n" +
                              deep_traceback();
  const auto t = ddprun::agent::traceback_tail(chained, 2);
  CHECK(t.frames_total == 7);
  CHECK(t.lines[0] == "Traceback (most recent call last):");
  CHECK(t.lines.back() == "ValueError: bad batch");
  for (const auto& line : t.lines) CHECK(line.find("KeyError") == std::string::npos);
}

TEST_CASE("an overlong traceback is cut in lines and in width") {
  const std::string huge = deep_traceback() + std::string(1000, 'x') + "\n" + std::string(100, '\n') + "end\n";
  const auto t = ddprun::agent::traceback_tail(huge, 3, 12);
  CHECK(t.lines.size() == 13);
  CHECK(t.lines.back() == "  ... (cut; the full text is in the error file)");
  for (const auto& line : t.lines) CHECK(line.size() <= 303);
}

TEST_CASE("import errors are recognised by their exception type") {
  CHECK(ddprun::agent::is_import_error("ModuleNotFoundError: No module named 'torch'"));
  CHECK(ddprun::agent::is_import_error("ImportError: cannot import name 'x' from 'y'"));
  CHECK_FALSE(ddprun::agent::is_import_error("ValueError: ImportError in a message"));
}

TEST_CASE("python -m's own 'No module named' lines are import errors of their own kind") {
  using ddprun::agent::is_import_error;
  using ddprun::agent::is_module_lookup_error;
  for (const char* line : {"/usr/bin/python3: No module named mypkg",
                           "/opt/venv/bin/python: Error while finding module specification for 'mypkg.train' "
                           "(ModuleNotFoundError: No module named 'mypkg')"}) {
    CHECK(is_module_lookup_error(line));
    CHECK(is_import_error(line));
  }
  // A package that was found but has no __main__: imported, so no interpreter to blame.
  CHECK_FALSE(is_module_lookup_error("/usr/bin/python3: No module named email.__main__; 'email' is a package and "
                                     "cannot be directly executed"));
  CHECK_FALSE(is_module_lookup_error("ModuleNotFoundError: No module named 'torch'"));  // a traceback's line
  CHECK_FALSE(is_module_lookup_error("epoch 3: No module named in the config"));
}

// What Python 3.11 prints on stderr for an uncaught exception: frames with "^^^^" markers under the call.
TEST_CASE("a traceback on stderr gives its exception line and its last frames") {
  const std::string err = "loading shard 3\n"
                          "Traceback (most recent call last):\n"
                          "  File \"/job/train.py\", line 40, in <module>\n    main()\n"
                          "  File \"/job/train.py\", line 31, in main\n    step(batch)\n    ^^^^^^^^^^^\n"
                          "  File \"/job/train.py\", line 12, in step\n    raise RuntimeError(\"boom\")\n"
                          "RuntimeError: boom\n"
                          "[W socket.cpp:436] a warning printed at exit\n";
  const auto e = ddprun::agent::read_stderr_end(err, true, 2);
  CHECK(e.exception == "RuntimeError: boom");
  CHECK(e.start_kept);
  CHECK(e.last_line == "[W socket.cpp:436] a warning printed at exit");
  CHECK(e.traceback.frames_total == 3);
  CHECK(e.traceback.frames_shown == 2);
  REQUIRE(e.traceback.lines.size() == 8);
  CHECK(e.traceback.lines[0] == "Traceback (most recent call last):");
  CHECK(e.traceback.lines[1] == "  ... 1 earlier frame not shown");
  CHECK(e.traceback.lines[2] == "  File \"/job/train.py\", line 31, in main");
  CHECK(e.traceback.lines.back() == "RuntimeError: boom");  // what came after it is not the traceback's
}

TEST_CASE("a SyntaxError in the script has no header: its frame and caret are the traceback") {
  const std::string err = "  File \"/job/train.py\", line 1\n    def f(:\n          ^\nSyntaxError: invalid syntax\n";
  const auto e = ddprun::agent::read_stderr_end(err, true);
  CHECK(e.exception == "SyntaxError: invalid syntax");
  CHECK(e.start_kept);  // all of stderr was kept: no header means there was none
  CHECK(e.traceback.frames_total == 1);
  CHECK(e.traceback.lines.front() == "  File \"/job/train.py\", line 1");
}

TEST_CASE("a tail cut inside a traceback drops its partial first line and says the start is lost") {
  const std::string err = "ne 20, in f2\n    f3()\n  File \"/job/train.py\", line 30, in f3\n    f4()\n"
                          "ValueError: bad batch\n";
  const auto e = ddprun::agent::read_stderr_end(err, false);
  CHECK(e.exception == "ValueError: bad batch");
  CHECK_FALSE(e.start_kept);
  CHECK(e.traceback.frames_total == 1);
  CHECK(e.traceback.lines.front() == "  File \"/job/train.py\", line 30, in f3");
  // The same bytes as the whole stream: the first line is kept (and is no frame).
  CHECK(ddprun::agent::read_stderr_end(err, true).start_kept);
}

TEST_CASE("stderr without a traceback gives only its last line") {
  const std::string err = "usage: train.py [-h] --lr LR\ntrain.py: error: the following arguments are required: --lr\n\n";
  const auto e = ddprun::agent::read_stderr_end(err, true);
  CHECK(e.exception.empty());
  CHECK(e.traceback.lines.empty());
  CHECK(e.last_line == "train.py: error: the following arguments are required: --lr");
  // Frames whose exception never came (the process was cut short) name nothing.
  CHECK(ddprun::agent::read_stderr_end("Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n", true)
            .exception.empty());
  CHECK(ddprun::agent::read_stderr_end("", true).last_line.empty());
}

TEST_CASE("a file is whole only as one JSON object with a message: what a writer that finished leaves") {
  using ddprun::supervision::parse_error_file;
  CHECK(parse_error_file(R"({"message": {"message": "E: x", "extraInfo": {}}})").whole);
  CHECK(parse_error_file(R"({"message": "E: x"})").whole);
  CHECK_FALSE(parse_error_file(R"({"message": {"message": "E: x", "extra)").whole);  // cut mid-write
  CHECK_FALSE(parse_error_file("").whole);
  CHECK_FALSE(parse_error_file(R"({"other": 1})").whole);
  CHECK_FALSE(parse_error_file("Traceback (most recent call last):").whole);
}
