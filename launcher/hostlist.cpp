#include "launcher/hostlist.hpp"

#include <cctype>

namespace ddprun::launcher {
namespace {

struct Group {
  std::string text_before;           // the literal text in front of this bracket group
  std::vector<std::string> numbers;  // the group's numbers, zero-padded as written
};

bool is_separator(char c) { return c == ',' || std::isspace(static_cast<unsigned char>(c)); }

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// "07-09" → 07 08 09; "5" → 5. Appends to `out`.
void expand_range(const std::string& range, const std::string& item, std::vector<std::string>& out) {
  const auto dash = range.find('-');
  const std::string lo = range.substr(0, dash);
  const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
  if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
    throw HostlistError("invalid range '" + range + "' in '" + item + "' (N or N-M, decimal digits)");
  const long first = std::stol(lo), last = std::stol(hi);
  if (last < first) throw HostlistError("descending range '" + range + "' in '" + item + "'");
  if (static_cast<std::size_t>(last - first) >= kMaxHostlistHosts)
    throw HostlistError("range '" + range + "' in '" + item + "' is too large");
  for (long n = first; n <= last; ++n) {
    std::string digits = std::to_string(n);
    if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
    out.push_back(digits);
  }
}

std::vector<Group> parse_item(const std::string& item, std::string& tail) {
  std::vector<Group> groups;
  std::size_t pos = 0;
  while (true) {
    const auto open = item.find_first_of("[]", pos);
    if (open == std::string::npos) break;
    if (item[open] == ']') throw HostlistError("']' without '[' in '" + item + "'");
    const auto close = item.find_first_of("[]", open + 1);
    if (close == std::string::npos || item[close] == '[') throw HostlistError("unclosed '[' in '" + item + "'");
    Group g;
    g.text_before = item.substr(pos, open - pos);
    const std::string inside = item.substr(open + 1, close - open - 1);
    std::size_t start = 0;
    while (true) {
      const auto comma = inside.find(',', start);
      expand_range(inside.substr(start, comma - start), item, g.numbers);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    groups.push_back(std::move(g));
    pos = close + 1;
  }
  tail = item.substr(pos);
  if (!groups.empty() && !tail.empty())
    throw HostlistError("text '" + tail + "' after the last ']' in '" + item + "' (SLURM allows none)");
  return groups;
}

// SLURM's order: the last group varies fastest, then the first, second, ..., next-to-last slowest.
void multiply_out(const std::vector<Group>& groups, const std::string& tail, std::vector<std::string>& out) {
  if (groups.empty()) {
    out.push_back(tail);
    return;
  }
  std::vector<std::size_t> order;  // group indices from the slowest to the fastest
  for (std::size_t i = groups.size() - 1; i-- > 0;) order.push_back(i);
  order.push_back(groups.size() - 1);
  std::size_t total = 1;
  for (const Group& g : groups) {
    total *= g.numbers.size();
    if (out.size() + total > kMaxHostlistHosts) throw HostlistError("more than 65536 hosts");
  }
  std::vector<std::size_t> digit(groups.size(), 0);
  for (std::size_t n = 0; n < total; ++n) {
    std::string host;
    for (std::size_t i = 0; i < groups.size(); ++i) host += groups[i].text_before + groups[i].numbers[digit[i]];
    out.push_back(host + tail);
    for (std::size_t k = order.size(); k-- > 0;) {  // odometer step, fastest group first
      const std::size_t i = order[k];
      if (++digit[i] < groups[i].numbers.size()) break;
      digit[i] = 0;
    }
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& text) {
  std::vector<std::string> hosts;
  std::size_t pos = 0;
  while (pos < text.size()) {
    // An item ends at a separator outside brackets.
    std::size_t end = pos;
    int depth = 0;
    while (end < text.size() && !(depth == 0 && is_separator(text[end]))) {
      if (text[end] == '[') ++depth;
      if (text[end] == ']' && depth > 0) --depth;
      if (depth > 0 && std::isspace(static_cast<unsigned char>(text[end])))
        throw HostlistError("whitespace inside brackets in '" + text + "'");
      ++end;
    }
    const std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    std::string tail;
    const std::vector<Group> groups = parse_item(item, tail);
    multiply_out(groups, tail, hosts);
  }
  if (hosts.empty()) throw HostlistError("no host in '" + text + "'");
  return hosts;
}

}  // namespace ddprun::launcher
