// What a failed worker wrote to TORCHELASTIC_ERROR_FILE, shown in the summary: the reader is the one every
// supervisor shares (common/supervision/error_file.hpp); here, how its Python call stack is cut to size, and,
// for a worker that wrote no error file (no @record), the traceback read back from the end of its stderr.
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
// `full_text_in` names where the uncut text is, for the note on a cut.
TracebackTail traceback_tail(const std::string& callstack, std::size_t max_frames = 5, std::size_t max_lines = 40,
                             const std::string& full_text_in = "the error file");

// The end of a worker's stderr, read for the summary when it wrote no error file. Python prints an uncaught
// exception there: "Traceback (most recent call last):", the frames, then the exception's "Type: text" line
// (a SyntaxError in the script itself has no header: its one frame, the source line, the caret).
struct StderrEnd {
  std::string exception;  // the last traceback's exception line ("RuntimeError: boom"); empty: none found
  TracebackTail traceback;  // that traceback's last frames and the exception line (empty without one)
  bool start_kept = true;   // false: the kept bytes begin inside the traceback, so frames_total is a floor
  std::string last_line;    // the last non-empty line, whatever it is (argparse's "prog: error: ...")
};
// `tail` is the stream's last bytes; `from_start` false when earlier bytes were dropped (its first line is
// then partial and is ignored).
StderrEnd read_stderr_end(const std::string& tail, bool from_start, std::size_t max_frames = 5);

// True when `message` (an exception's "Type: text" line) is a ModuleNotFoundError or an ImportError, or
// what `python -m X` prints when it cannot find X (is_module_lookup_error).
bool is_import_error(const std::string& message);
// `python -m X`'s own line when X cannot be found (no traceback: runpy prints it with the interpreter's
// path): "/usr/bin/python3: No module named X", or "... Error while finding module specification for 'X'
// (ModuleNotFoundError: No module named 'pkg')". Not the "is a package and cannot be directly executed"
// case: that package was imported.
bool is_module_lookup_error(const std::string& line);

}  // namespace ddprun::agent
