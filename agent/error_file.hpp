// What a failed worker wrote to TORCHELASTIC_ERROR_FILE, shown in the summary: the reader is the one every
// supervisor shares (common/supervision/error_file.hpp); here, how its Python call stack is cut to size.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/supervision/error_file.hpp"

namespace ddprun::agent {

using supervision::ErrorFileContents;
using supervision::read_error_file;

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
