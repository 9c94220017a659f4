// Parsers for option values. Each throws ddprun::UsageError (exit 64) with one line naming the option,
// the value and what is expected.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "agent/agent_config.hpp"

namespace ddprun::launcher {

// "a,b,,c" → {"a", "b", "", "c"}; "" → {""}.
std::vector<std::string> split_on(const std::string& text, char sep);
// Whole string a decimal integer (sign allowed), within int range. No throw.
bool parse_int_strict(const std::string& text, int& out);
// `text` as an integer within [lo, hi], or UsageError naming `option`.
int parse_int_in(const std::string& option, const std::string& text, int lo, int hi);
// "N" (min = max = N) or torchrun's elastic "MIN:MAX", 1 <= MIN <= MAX <= 2^20.
struct NodeRange {
  int min = 1;
  int max = 1;
  bool elastic() const { return min < max; }
};
NodeRange parse_nnodes(const std::string& text);
// Seconds, fractions allowed: "30", "0.5". Must be >= 0 and <= one day.
std::chrono::milliseconds parse_duration(const std::string& option, const std::string& text);
// torchrun's Std: "0".."3" for all local ranks, or "LR:MASK,LR:MASK" with 0 <= LR < nproc.
agent::StdStreams parse_std_streams(const std::string& option, const std::string& text, int nproc);
// "0,2,3" (empty: none given) with each 0 <= LR < nproc.
std::vector<int> parse_rank_list(const std::string& option, const std::string& text, int nproc);
// A host name or an IPv4/IPv6 literal: non-empty, no spaces or shell-unfriendly characters.
bool valid_host(const std::string& text);
// "[fd42::1]" -> "fd42::1"; anything else as it is.
std::string without_brackets(const std::string& host);
// Ids and role names become directory names: 1-128 of [A-Za-z0-9._-], not "." or "..".
bool valid_name(const std::string& text);
// "" when `path` can be created or truncated for writing without creating anything now, else why not.
std::string check_writable_file(const std::string& path);

}  // namespace ddprun::launcher
