// Reading what a failed worker wrote to TORCHELASTIC_ERROR_FILE. The format is torchelastic's:
//   {"message": {"message": "ValueError: ...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}
// (or "message" as a plain string). Anything else is shown raw, cut to a readable size.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ddprun::agent {

struct ErrorFileContents {
  bool present = false;
  std::string message;    // one line, the exception
  std::string where;      // call stack or location, may be empty
  std::string timestamp;  // as written, may be empty
  std::string raw;        // the file's text (at most 64 KiB)
};

ErrorFileContents read_error_file(const std::string& path);

// The end of a Python traceback (py_callstack): the header, the last `max_frames` frames (each "File ...,
// line N, in f" with its source line) and the exception, which is what explains a failure; earlier frames
// are counted, not shown. For chained exceptions ("During handling of the above exception...") only the last
// traceback is kept. Lines are cut to a readable width; at most `max_lines` are returned.
struct TracebackTail {
  std::vector<std::string> lines;
  int frames_total = 0;
  int frames_shown = 0;
};
TracebackTail traceback_tail(const std::string& callstack, std::size_t max_frames = 5, std::size_t max_lines = 40);

// True when `message` (an exception's "Type: text" line) is a ModuleNotFoundError or an ImportError.
bool is_import_error(const std::string& message);

}  // namespace ddprun::agent
