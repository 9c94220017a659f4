// How deep a JSON text nests, measured before it is parsed: nlohmann's parser and its values' destructors recurse
// once per level, so a text nested a million deep from a peer or from etcd overflowed the stack (issue 55: a
// segfault, 139, no summary). Every text from outside is checked against a small bound first.
#pragma once

#include <string_view>

namespace ddprun {

// Whether no object or array in `text` opens deeper than `max_depth` (brackets inside strings are not counted).
// Linear, no allocation; says nothing of whether the text is valid JSON.
inline bool json_nesting_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

}  // namespace ddprun
