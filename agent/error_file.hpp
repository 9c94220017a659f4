// Reading what a failed worker wrote to TORCHELASTIC_ERROR_FILE. The format is torchelastic's:
//   {"message": {"message": "ValueError: ...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}
// (or "message" as a plain string). Anything else is shown raw, cut to a readable size.
#pragma once

#include <string>

namespace ddprun::agent {

struct ErrorFileContents {
  bool present = false;
  std::string message;    // one line, the exception
  std::string where;      // call stack or location, may be empty
  std::string timestamp;  // as written, may be empty
  std::string raw;        // the file's text (at most 64 KiB)
};

ErrorFileContents read_error_file(const std::string& path);

}  // namespace ddprun::agent
