#include "launcher/arg_matching.hpp"

#include <algorithm>
#include <cctype>

#include "common/error.hpp"
#include "launcher/exit_codes.hpp"

namespace ddprun::launcher {
namespace {

[[noreturn]] void usage(const std::string& message) { throw UsageError(message, kExitUsage); }

// The option a long name (without dashes) stands for: an exact spelling, else the one option that has a
// spelling starting with it (both spellings of one option count once, unlike older argparse).
const OptionNames* find_long(const std::string& name, const std::vector<OptionNames>& table) {
  for (const OptionNames& o : table)
    if (std::find(o.longs.begin(), o.longs.end(), name) != o.longs.end()) return &o;
  std::vector<const OptionNames*> matches;
  for (const OptionNames& o : table)
    for (const std::string& l : o.longs)
      if (l.compare(0, name.size(), name) == 0) {
        matches.push_back(&o);
        break;
      }
  if (matches.size() == 1) return matches.front();
  if (matches.size() > 1) {
    std::string list;
    for (const OptionNames* m : matches) list += (list.empty() ? "--" : ", --") + m->canonical;
    usage("ambiguous option --" + name + ": it could be " + list + " (type more of it)");
  }
  // Unknown: suggest the closest spelling, if one is close enough to be a typo ('_' and '-' count alike).
  std::string typed = name;
  std::replace(typed.begin(), typed.end(), '_', '-');
  const OptionNames* best = nullptr;
  std::size_t best_distance = std::max<std::size_t>(2, typed.size() / 4) + 1;
  for (const OptionNames& o : table)
    for (std::string l : o.longs) {
      std::replace(l.begin(), l.end(), '_', '-');
      const std::size_t d = edit_distance(typed, l);
      if (d < best_distance) best = &o, best_distance = d;
    }
  usage("unknown option --" + name + (best ? "; did you mean --" + best->canonical + "?" : "") +
        " (see ddprun --help)");
}

const OptionNames* find_short(char c, const std::vector<OptionNames>& table) {
  for (const OptionNames& o : table)
    if (o.shorts.find(c) != std::string::npos) return &o;
  return nullptr;
}

// argparse's negative number, "-5", "-0.5" or "-.5" (Python 3.11's pattern ^-\d+$|^-\d*\.\d+$).
bool negative_number(const std::string& word) {
  std::size_t i = 1;
  while (i < word.size() && std::isdigit(static_cast<unsigned char>(word[i]))) ++i;
  if (i == word.size()) return i > 1;
  if (word[i] != '.' || i + 1 == word.size()) return false;
  for (++i; i < word.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(word[i]))) return false;
  return true;
}

// Whether the word after an option that takes a value may be that value. argparse (so torchrun) reads a
// word that starts with '-' as the next option, and then refuses the one before it ("expected one
// argument"); CLI11 would take it as the value, which made `--log-dir --standalone` a directory named
// "--standalone". The exceptions are argparse's: "-" alone; a negative number, because no option of torchrun
// or ddprun looks like one (argparse's rule when the parser has none), so `--max-restarts -1` reaches the
// value check and is refused there for what it is; and a word with a space in it (`--prefix "-> "`), which
// argparse takes as a value unless it starts with a short option's letter, a corner not copied here. Any
// value at all can be given glued on: `--log-dir=-x`, `-r-x`.
bool can_be_value(const std::string& word) {
  if (word.size() < 2 || word[0] != '-') return true;
  return negative_number(word) || word.find(' ') != std::string::npos;
}

// The word after `typed` (an option that takes a value, named `canonical`), checked to be its value.
const std::string& value_after(const std::vector<std::string>& args, std::size_t i, const std::string& typed,
                               const std::string& canonical) {
  const std::string named = typed == canonical ? typed : typed + " (" + canonical + ")";
  if (i + 1 == args.size())
    usage(named + " expects a value, and nothing follows it: give it as " + canonical + " VALUE");
  const std::string& next = args[i + 1];
  if (!can_be_value(next))
    usage(named + " expects a value, but the next word is " + (next == "--" ? "'--'" : "the option " + next) +
          ": give the value right after " + typed + " (as " + canonical + "=VALUE if it starts with '-')");
  return next;
}

}  // namespace

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::vector<std::string> canonical_options(const std::vector<std::string>& args, const std::vector<OptionNames>& table,
                                           std::set<std::string>& given) {
  std::vector<std::string> out;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the program (or "--") and everything after it
    if (a.compare(0, 2, "--") == 0) {
      const auto eq = a.find('=');
      const OptionNames& o = *find_long(a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2), table);
      if (!o.refusal.empty()) usage(o.refusal);
      given.insert(o.canonical);
      out.push_back("--" + o.canonical + (eq == std::string::npos ? "" : a.substr(eq)));
      if (eq == std::string::npos && o.takes_value) out.push_back(value_after(args, i++, a, "--" + o.canonical));
      continue;
    }
    // "-r3", "-r 3", "-vq": letters until one that takes a value; its value is the rest, or the next word.
    out.push_back(a);
    for (std::size_t k = 1; k < a.size(); ++k) {
      const OptionNames* o = find_short(a[k], table);
      if (!o) usage("unknown option -" + std::string(1, a[k]) + " (see ddprun --help)");
      given.insert(o->canonical);
      if (!o->takes_value) continue;
      if (k + 1 == a.size()) out.push_back(value_after(args, i++, "-" + std::string(1, a[k]), "--" + o->canonical));
      break;
    }
  }
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

}  // namespace ddprun::launcher
