// The worker's last words: an exception escaping main is written to TORCHELASTIC_ERROR_FILE in
// torchelastic's JSON format before a non-zero exit, so ddprun's root cause shows the message, not
// only an exit code.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace ddprun::sdk {

struct ErrorRecord {
  std::string type;       // "ddprun::sdk::Error", "std::runtime_error", "c10::Error", ...
  std::string message;    // what(), without LibTorch's backtrace
  std::string where;      // "file.cpp:42" when known, else the program and rank
  long long timestamp = 0;  // unix seconds
};

// Describes an exception (of any type, std::exception or not).
ErrorRecord describe_exception(const std::exception_ptr& error);

// {"message": {"message": "<type>: <message>", "extraInfo": {"py_callstack": "<where>",
//  "timestamp": "<unix seconds>"}}}
std::string error_json(const ErrorRecord& record);

// Writes the record to `path` (a no-op when empty). Never throws: this runs while dying.
void write_error_file(const std::string& path, const ErrorRecord& record);

// Runs `body`; returns its exit code. An exception escaping it is printed to stderr, written to
// $TORCHELASTIC_ERROR_FILE, and turned into exit code 1.
int run_main(const std::function<int()>& body);

}  // namespace ddprun::sdk
