#include "launcher/python_source.hpp"

#include <cctype>
#include <fstream>

#include "common/contract/worker_contract.hpp"
#include "common/process/spawn.hpp"
#include "launcher/option_values.hpp"

namespace ddprun::launcher {
using process::regular_file;

namespace {
constexpr std::size_t kMaxSourceBytes = 1 << 20;

bool identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// Skips what may stand between a call's tokens: blanks, line breaks, a backslash continuation, a comment.
void skip_blank(const std::string& s, std::size_t& i) {
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
      ++i;
    } else if (c == '\\' && i + 1 < s.size() && s[i + 1] == '\n') {
      i += 2;
    } else if (c == '#') {
      const std::size_t eol = s.find('\n', i);
      i = eol == std::string::npos ? s.size() : eol + 1;
    } else {
      return;
    }
  }
}

// One single-line string literal at `i` ('...' or "...", r or u prefix allowed): its text, escapes kept
// as written (an option name has none). False when there is none; `i` then stays put.
bool read_literal(const std::string& s, std::size_t& i, std::string& text) {
  std::size_t at = i;
  if (at < s.size() && (s[at] == 'r' || s[at] == 'R' || s[at] == 'u' || s[at] == 'U')) ++at;
  if (at >= s.size() || (s[at] != '"' && s[at] != '\'')) return false;
  const char quote = s[at++];
  text.clear();
  for (; at < s.size() && s[at] != quote; ++at) {
    if (s[at] == '\n') return false;
    if (s[at] == '\\' && at + 1 < s.size()) text += s[at++];
    text += s[at];
  }
  if (at >= s.size()) return false;
  i = at + 1;
  return true;
}
}  // namespace

std::string declared_local_rank_option(const std::string& source) {
  static const std::string kCall = "add_argument";
  for (std::size_t at = source.find(kCall); at != std::string::npos; at = source.find(kCall, at + 1)) {
    if (at > 0 && identifier_char(source[at - 1])) continue;  // another name that ends so
    const std::size_t line = source.rfind('\n', at);
    if (source.find('#', line == std::string::npos ? 0 : line + 1) < at) continue;  // commented out
    std::size_t i = at + kCall.size();
    skip_blank(source, i);
    if (i >= source.size() || source[i] != '(') continue;
    ++i;
    // argparse takes the option strings first, before any keyword: "--local-rank", "--local_rank", type=int
    for (std::string name;;) {
      skip_blank(source, i);
      if (!read_literal(source, i, name)) break;
      if (name == "--local_rank" || name == "--local-rank") return name;
      skip_blank(source, i);
      if (i >= source.size() || source[i] != ',') break;
      ++i;
    }
  }
  return {};
}

std::string declared_local_rank_option_in_file(const std::string& path) {
  // A regular file only: a script given as a pipe (`ddprun <(…)`, a FIFO) would be consumed here, leaving
  // Python nothing to run, and its open would wait for a writer.
  if (!regular_file(path)) return {};
  std::ifstream file(path, std::ios::binary);
  if (!file) return {};
  std::string text(kMaxSourceBytes, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(file.gcount()));
  return declared_local_rank_option(text);
}

std::string module_source_file(const std::string& module, const std::vector<std::string>& env) {
  if (module.empty()) return {};
  std::string relative = module;
  for (char& c : relative) c = c == '.' ? '/' : c;
  std::vector<std::string> dirs = {"."};
  const std::string path = contract::env_value(env, "PYTHONPATH", "");
  if (!path.empty())
    for (const std::string& dir : split_on(path, ':')) dirs.push_back(dir.empty() ? "." : dir);
  for (const std::string& dir : dirs)
    for (const std::string& candidate : {dir + "/" + relative + ".py", dir + "/" + relative + "/__main__.py"})
      if (regular_file(candidate)) return candidate;
  return {};
}

}  // namespace ddprun::launcher
