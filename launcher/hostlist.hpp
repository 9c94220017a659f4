// SLURM's compressed host lists ("gpu[07-09,12],cpu1"), expanded exactly as SLURM 22.05's
// `scontrol show hostnames` does; what SLURM calls an invalid host list is an error here too.
//
// Grammar (each rule has a unit test in tests/launcher/hostlist_test.cpp, checked against scontrol):
//   list   := item { sep item }        sep: ',' or whitespace; empty items are skipped ("n1,,n2", "n1,")
//   item   := text { '[' ranges ']' text }     the text after the last ']' must be empty: "n[1-2]x" is invalid,
//                                              "n[1-2]x[3]" is not
//   ranges := range { ',' range }      range: N or N-M with N <= M, decimal digits only
//   A range's numbers are printed with the digit count of its low bound: "n[08-11]" → n08 … n11,
//   "n[8-11]" → n8 … n11, "n[01-1]" → n01.
//   Several bracket groups multiply out in SLURM's order: the last group varies fastest, then the first, the
//   second and so on: "a[1-2]b[3-4]c[5-6]" → a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 …
// No escapes: SLURM has none ("n\[1\]" is invalid). Duplicates are kept, in order.
// Refused although scontrol prints something: an unclosed '[' ("n[1-3" → scontrol says "n]"), a stray ']',
// an empty upper bound ("n[1-]").
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::launcher {

// Why a host list is invalid, as one phrase ("unclosed '[' in 'n[1-3'").
class HostlistError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

inline constexpr std::size_t kMaxHostlistHosts = 65536;  // more is a typo ("n[1-999999999]"), not a cluster

// The hosts of `text`, in SLURM's order. Throws HostlistError.
std::vector<std::string> expand_hostlist(const std::string& text);

}  // namespace ddprun::launcher
