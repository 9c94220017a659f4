// "1 host", "3 hosts": a count with its noun in the right number, for messages.
#pragma once

#include <string>

namespace ddprun {

// `plural` when the noun does not just take an "s" ("process" → "processes").
inline std::string counted(long long n, const std::string& noun, const std::string& plural = "") {
  return std::to_string(n) + " " + (n == 1 ? noun : plural.empty() ? noun + "s" : plural);
}

}  // namespace ddprun
