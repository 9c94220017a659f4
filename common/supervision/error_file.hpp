// The error file a failed worker leaves at TORCHELASTIC_ERROR_FILE, read by every supervisor of workers (the
// node agent and the worker SDK's embedded spawn): one reader. The format is torchelastic's, which the SDK's
// run_main and torch's @record write:
//   {"message": {"message": "ValueError: ...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}
// ("message" may also be a plain string). Anything else is shown raw, cut to a readable size. libc-only: a
// small JSON reader of its own (the SDK builds without a JSON library).
#pragma once

#include <string>

namespace ddprun::supervision {

struct ErrorFileContents {
  bool present = false;
  std::string message;    // one line, the exception
  std::string where;      // call stack or location, may be empty
  std::string timestamp;  // as written, may be empty
  std::string raw;        // the file's text (at most 64 KiB)
  // The text is one whole JSON object with a message: what a writer that finished leaves. A file cut short (its
  // writer killed mid-write, a full disk) is shown raw, and is not enough to call a running worker failed.
  bool whole = false;
};

ErrorFileContents read_error_file(const std::string& path);
// The same from the file's text.
ErrorFileContents parse_error_file(std::string text);

}  // namespace ddprun::supervision
