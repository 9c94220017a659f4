#include "launcher/python_source.hpp"

#include <algorithm>
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
// The source with the text of its triple-quoted strings (docstrings) blanked, line breaks kept: a call quoted
// in a docstring is not one argparse sees (issue 34).
std::string without_docstrings(std::string s) {
  for (std::size_t at = 0; at + 2 < s.size();) {
    const std::size_t open = std::min(s.find("\"\"\"", at), s.find("'''", at));
    if (open == std::string::npos) break;
    const std::string quote = s.substr(open, 3);
    const std::size_t close = s.find(quote, open + 3);
    const std::size_t end = close == std::string::npos ? s.size() : close + 3;
    for (std::size_t i = open; i < end; ++i)
      if (s[i] != '\n') s[i] = ' ';
    at = end;
  }
  return s;
}

// The identifier just before `.add_argument` at `at` ("" when the call is not on a plain name).
std::string receiver_of(const std::string& s, std::size_t at) {
  if (at == 0 || s[at - 1] != '.') return {};
  std::size_t begin = at - 1;
  while (begin > 0 && identifier_char(s[begin - 1])) --begin;
  return s.substr(begin, at - 1 - begin);
}

// `name = ....add_parser(` somewhere: a sub-command's parser, whose options argparse reads only after that
// sub-command's name on the command line (a --local_rank=N before it is an error of the main parser).
bool is_subparser(const std::string& s, const std::string& name) {
  if (name.empty()) return false;
  for (std::size_t at = s.find(name); at != std::string::npos; at = s.find(name, at + 1)) {
    if ((at > 0 && identifier_char(s[at - 1])) || identifier_char(s[at + name.size()])) continue;
    std::size_t i = at + name.size();
    skip_blank(s, i);
    if (i >= s.size() || s[i] != '=' || (i + 1 < s.size() && s[i + 1] == '=')) continue;
    const std::size_t eol = s.find('\n', i);
    if (s.substr(i, eol == std::string::npos ? std::string::npos : eol - i).find(".add_parser(") != std::string::npos)
      return true;
  }
  return false;
}

// The function whose body holds `at` (a `def NAME(` line less indented than `at`'s line), when the file never
// names it again: a parser built in a function nobody calls is never parsed with (issue 34: a legacy parser).
bool in_an_uncalled_function(const std::string& s, std::size_t at) {
  const std::size_t line = s.rfind('\n', at) == std::string::npos ? 0 : s.rfind('\n', at) + 1;
  std::size_t indent = 0;
  while (line + indent < s.size() && (s[line + indent] == ' ' || s[line + indent] == '\t')) ++indent;
  for (std::size_t end = line; end > 0;) {  // the lines above, nearest first: [begin, end - 1)
    const std::size_t newline = end >= 2 ? s.rfind('\n', end - 2) : std::string::npos;
    const std::size_t begin = newline == std::string::npos ? 0 : newline + 1;
    std::size_t i = begin, own = 0;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i, ++own;
    end = begin;
    if (i >= s.size() || s[i] == '\n' || s[i] == '#' || own >= indent) continue;
    if (s.compare(i, 4, "def ") != 0 && s.compare(i, 10, "async def ") != 0) return false;  // a class, an if
    i = s.find("def ", i) + 4;
    std::size_t name_end = i;
    while (name_end < s.size() && identifier_char(s[name_end])) ++name_end;
    const std::string name = s.substr(i, name_end - i);
    for (std::size_t use = s.find(name); use != std::string::npos; use = s.find(name, use + 1))
      if (use != i && (use == 0 || !identifier_char(s[use - 1])) && !identifier_char(s[use + name.size()]))
        return false;  // called (or passed) somewhere
    return true;
  }
  return false;
}
}  // namespace

std::string declared_local_rank_option(const std::string& original) {
  static const std::string kCall = "add_argument";
  const std::string source = without_docstrings(original);
  for (std::size_t at = source.find(kCall); at != std::string::npos; at = source.find(kCall, at + 1)) {
    if (at > 0 && identifier_char(source[at - 1])) continue;  // another name that ends so
    const std::size_t line = source.rfind('\n', at);
    if (source.find('#', line == std::string::npos ? 0 : line + 1) < at) continue;  // commented out
    if (is_subparser(source, receiver_of(source, at)) || in_an_uncalled_function(source, at)) continue;
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
