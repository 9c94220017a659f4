// Long option names as argparse (and so torchrun) reads them: an unambiguous prefix names the option
// (`--nproc 4` is --nproc-per-node), an ambiguous one is refused listing the candidates, and an unknown
// one gets the nearest known name as a suggestion. CLI11 matches exact names only, so the command line is
// rewritten to canonical names before CLI11 sees it.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace ddprun::launcher {

struct OptionNames {
  std::string canonical;            // the first long name, without dashes: "nproc-per-node"
  std::vector<std::string> longs;   // every long spelling, without dashes: "nproc-per-node", "nproc_per_node"
  std::string shorts;               // single-letter names: "r"
  bool takes_value = true;
  std::string refusal;              // non-empty: a torchrun option ddprun refuses, and why (the whole message)
};

// Rewrites every long option before the program (the first positional argument, or what follows "--") to
// "--canonical" (keeping "=value"), and adds each option's canonical name to `given`. Worker arguments are
// left alone. Throws UsageError (64): an ambiguous prefix, an unknown option (with "did you mean"), an
// option whose `refusal` is set, or an option that takes a value followed by nothing or by another option
// (as argparse: `--log-dir --standalone` is refused; a negative number is a value).
std::vector<std::string> canonical_options(const std::vector<std::string>& args, const std::vector<OptionNames>& table,
                                           std::set<std::string>& given);

// Levenshtein distance, for suggestions.
std::size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace ddprun::launcher
