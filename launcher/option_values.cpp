#include "launcher/option_values.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/error.hpp"
#include "launcher/exit_codes.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::launcher {
namespace {
[[noreturn]] void bad(const std::string& option, const std::string& text, const std::string& expected) {
  throw UsageError(option + " '" + text + "': " + expected, kExitUsage);
}

int local_rank_in(const std::string& option, const std::string& text, const std::string& item, int nproc) {
  int lr = 0;
  if (!parse_int_strict(item, lr)) bad(option, text, "'" + item + "' is not a local rank");
  if (lr < 0 || lr >= nproc)
    bad(option, text, "local rank " + item + " is out of range 0.." + std::to_string(nproc - 1));
  return lr;
}
}  // namespace

std::vector<std::string> split_on(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = text.find(sep, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

bool parse_int_strict(const std::string& text, int& out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || end == text.c_str() || v < INT_MIN || v > INT_MAX || std::isspace(text[0]))
    return false;
  out = static_cast<int>(v);
  return true;
}

NodeRange parse_nnodes(const std::string& text) {
  const auto colon = text.find(':');
  int lo = 0, hi = 0;
  if (colon == std::string::npos) {
    if (!parse_int_strict(text, lo)) bad("--nnodes", text, "expected a number of nodes, or MIN:MAX");
    hi = lo;
  } else if (!parse_int_strict(text.substr(0, colon), lo) || !parse_int_strict(text.substr(colon + 1), hi)) {
    bad("--nnodes", text, "expected a number of nodes, or MIN:MAX");
  }
  if (lo < 1 || hi < lo) bad("--nnodes", text, "needs 1 <= MIN <= MAX");
  if (hi > rendezvous::kMaxNodes) bad("--nnodes", text, "at most " + std::to_string(rendezvous::kMaxNodes) + " nodes");
  return NodeRange{lo, hi};
}

std::chrono::milliseconds parse_duration(const std::string& option, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0' || !std::isfinite(v))
    bad(option, text, "expected seconds, e.g. 30 or 0.5");
  if (v < 0 || v > 86400) bad(option, text, "must be between 0 and 86400 seconds");
  return std::chrono::milliseconds(static_cast<long long>(std::llround(v * 1000.0)));
}

agent::StdStreams parse_std_streams(const std::string& option, const std::string& text, int nproc) {
  agent::StdStreams s;
  const std::string expected = "expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:VALUE,...";
  auto mask = [&](const std::string& m) {
    int v = -1;
    if (!parse_int_strict(m, v) || v < 0 || v > 3) bad(option, text, expected);
    return v;
  };
  if (text.find(':') == std::string::npos) {
    s.all = mask(text);
    return s;
  }
  s.per_rank_given = true;
  for (const std::string& item : split_on(text, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) bad(option, text, expected);
    const int lr = local_rank_in(option, text, item.substr(0, colon), nproc);
    if (!s.per_rank.emplace(lr, mask(item.substr(colon + 1))).second)
      bad(option, text, "local rank " + std::to_string(lr) + " given twice");
  }
  return s;
}

std::vector<int> parse_rank_list(const std::string& option, const std::string& text, int nproc) {
  std::vector<int> ranks;
  if (text.empty()) return ranks;
  for (const std::string& item : split_on(text, ',')) ranks.push_back(local_rank_in(option, text, item, nproc));
  return ranks;
}

bool valid_host(const std::string& text) {
  if (text.empty() || text.size() > 253) return false;
  for (char c : text)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '_' || c == '%'))
      return false;
  return true;
}

std::string without_brackets(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') return host.substr(1, host.size() - 2);
  return host;
}

bool valid_name(const std::string& text) {
  if (text.empty() || text.size() > 128 || text == "." || text == "..") return false;
  for (char c : text)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) return false;
  return true;
}

std::string check_writable_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return path + " is a directory";
    if (::access(path.c_str(), W_OK) != 0) return path + " is not writable (" + std::strerror(errno) + ")";
    return "";
  }
  std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
  if (::stat(parent.c_str(), &st) != 0) return "directory " + parent.string() + " does not exist";
  if (!S_ISDIR(st.st_mode)) return parent.string() + " is not a directory";
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    return "cannot create a file in " + parent.string() + " (" + std::strerror(errno) + ")";
  return "";
}

int parse_int_in(const std::string& name, const std::string& text, int lo, int hi) {
  int v = 0;
  if (!parse_int_strict(text, v)) throw UsageError(name + " must be an integer, got '" + text + "'", kExitUsage);
  if (v < lo || v > hi)
    throw UsageError(name + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                         text,
                     kExitUsage);
  return v;
}

}  // namespace ddprun::launcher
