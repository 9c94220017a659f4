#include "agent/error_file.hpp"

#include <algorithm>
#include <sstream>

namespace ddprun::agent {
namespace {
constexpr std::size_t kMaxLineWidth = 300;
constexpr const char* kTracebackHeader = "Traceback (most recent call last):";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// A frame line as Python prints it: two spaces, File "path", line N, in name.
bool is_frame_line(const std::string& line) { return starts_with(line, "  File \""); }

}  // namespace

TracebackTail traceback_tail(const std::string& callstack, std::size_t max_frames, std::size_t max_lines,
                             const std::string& full_text_in) {
  std::vector<std::string> all;
  std::istringstream in(callstack);
  for (std::string line; std::getline(in, line);) all.push_back(line);
  while (!all.empty() && all.back().empty()) all.pop_back();
  // The last traceback: chained exceptions print one block each, the one that ended the program last.
  std::size_t begin = 0;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i] == kTracebackHeader) begin = i;
  std::vector<std::size_t> frames;
  for (std::size_t i = begin; i < all.size(); ++i)
    if (is_frame_line(all[i])) frames.push_back(i);
  TracebackTail out;
  out.frames_total = static_cast<int>(frames.size());
  const std::size_t shown = std::min(frames.size(), max_frames);
  out.frames_shown = static_cast<int>(shown);
  std::size_t first = frames.empty() ? begin : frames[frames.size() - shown];
  if (begin < all.size() && all[begin] == kTracebackHeader) out.lines.push_back(all[begin]);
  if (shown < frames.size())
    out.lines.push_back("  ... " + std::to_string(frames.size() - shown) + " earlier frame" +
                        (frames.size() - shown == 1 ? "" : "s") + " not shown");
  if (first == begin && !out.lines.empty()) ++first;  // the header was taken already
  for (std::size_t i = first; i < all.size(); ++i) {
    std::string line = all[i];
    if (line.size() > kMaxLineWidth) line = line.substr(0, kMaxLineWidth) + "...";
    out.lines.push_back(std::move(line));
  }
  // Too long (a huge exception message): keep the start, which holds the frames, and say so.
  if (out.lines.size() > max_lines) {
    out.lines.resize(max_lines);
    out.lines.push_back("  ... (cut; the full text is in " + full_text_in + ")");
  }
  return out;
}

StderrEnd read_stderr_end(const std::string& tail, bool from_start, std::size_t max_frames) {
  std::vector<std::string> lines;
  std::istringstream in(tail);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
  }
  if (!from_start && !lines.empty()) lines.erase(lines.begin());  // cut in the middle of a line
  StderrEnd out;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    if (!it->empty()) {
      out.last_line = it->size() > kMaxLineWidth ? it->substr(0, kMaxLineWidth) + "..." : *it;
      break;
    }
  // The exception line follows the last frame: the first line after it that is not indented (source lines,
  // carets and "^^^^" markers are). Output after it (a warning at shutdown) is not the traceback's.
  std::size_t last_frame = lines.size();
  for (std::size_t i = lines.size(); i-- > 0;)
    if (is_frame_line(lines[i])) {
      last_frame = i;
      break;
    }
  if (last_frame == lines.size()) return out;
  std::size_t exception = last_frame + 1;
  while (exception < lines.size() && (lines[exception].empty() || lines[exception][0] == ' ')) ++exception;
  if (exception == lines.size()) return out;  // cut before its exception: nothing to name
  // Its start: the header above the frames, or, where there is none (cut off, or a SyntaxError's bare
  // frame), the first of the run of frames and indented lines that leads to the last frame.
  std::size_t start = last_frame;
  while (start > 0 && lines[start - 1] != kTracebackHeader && (is_frame_line(lines[start - 1]) ||
                                                               (!lines[start - 1].empty() && lines[start - 1][0] == ' ')))
    --start;
  const bool header = start > 0 && lines[start - 1] == kTracebackHeader;
  if (header) --start;
  std::string block;
  for (std::size_t i = start; i <= exception; ++i) block += lines[i] + "\n";
  out.traceback = traceback_tail(block, max_frames, 40, "its stderr");
  out.exception = lines[exception].substr(0, kMaxLineWidth);
  // Without a header, a tail that was cut may have lost earlier frames; one kept whole has not.
  out.start_kept = header || from_start;
  return out;
}

bool is_import_error(const std::string& message) {
  return starts_with(message, "ModuleNotFoundError") || starts_with(message, "ImportError") ||
         is_module_lookup_error(message);
}

bool is_module_lookup_error(const std::string& line) {
  // runpy's "<sys.executable>: <message>": an absolute path, then the message.
  if (!starts_with(line, "/")) return false;
  for (const char* what : {": No module named ", ": Error while finding module specification for "}) {
    const std::size_t at = line.find(what);
    if (at != std::string::npos && line.find("cannot be directly executed", at) == std::string::npos) return true;
  }
  return false;
}

}  // namespace ddprun::agent
