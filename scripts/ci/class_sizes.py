#!/usr/bin/env python3
"""The size of each class, as issue 31 measures it: the lines of its declaration plus the lines of the
definitions of its member functions, wherever they are (a class's methods may be spread over several files).
A class over the limit fails the check, so the agent cannot grow back into one class without anyone noticing.

    scripts/ci/class_sizes.py              exit 0 when every class is within the limit, else 1
    scripts/ci/class_sizes.py --top 20     also print the 20 largest classes
    scripts/ci/class_sizes.py --limit 650  the limit (lines; default 650: issue 31's "about 600")

What it reads: the tracked .hpp and .cpp files of the project's own code (not tests, not examples). What it
counts: a `class X` or `struct X` body from its opening line to its closing brace, and each out-of-line
definition `... X::name(...) ... { ... }` from the line that names it to its closing brace. Nested classes
count towards themselves, not their outer class. It is a counter of text, not a C++ parser: braces inside
strings and character literals are skipped, comments are skipped, and that is enough for this code base.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CODE = ("agent/", "common/", "etcd/", "launcher/", "rendezvous/", "worker_sdk/")
CLASS = re.compile(r"^\s*(?:template\s*<[^>]*>\s*)?(?:class|struct)\s+(?:\[\[[^\]]*\]\]\s*)?(\w+)"
                   r"(?:\s+final)?\s*(?::[^;{]*)?\{", re.M)
# X::f( with X a class: this code base names classes in CamelCase and namespaces in lower case (std::move(
# in an initialiser list is not a definition of std's).
DEFINITION = re.compile(r"(?<![\w:])((?:\w+::)*)([A-Z]\w*)::(~?\w+|operator\S+)\s*\(")


def strip(text):
    """The text with comments, strings and character literals blanked (newlines kept, so lines still count)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            k = text.find("(", i)
            delim = ")" + text[i + 2:k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def closing(text, open_at):
    """Index of the brace that closes the one at open_at."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text) - 1


def line_of(text, index):
    return text.count("\n", 0, index) + 1


def measure(files):
    sizes = collections.Counter()
    where = collections.defaultdict(set)
    for rel in files:
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
            text = strip(f.read())
        # Declarations: every class or struct body, nested ones counted apart from their outer class.
        bodies = [(m.start(), closing(text, m.end() - 1), m.group(1)) for m in CLASS.finditer(text)]
        for begin, end, name in bodies:
            lines = line_of(text, end) - line_of(text, begin) + 1
            # minus the classes directly inside it (those inside them are already outside these)
            inner = sum(line_of(text, e) - line_of(text, b) + 1 for b, e, _ in bodies if begin < b and e < end
                        and not any(begin < b2 < b and e < e2 < end for b2, e2, _ in bodies))
            sizes[name] += lines - inner
            where[name].add(rel)
        # Out-of-line definitions at namespace scope: `X::f(...) ... {`, X::f's body is counted for X.
        for m in DEFINITION.finditer(text):
            cls = m.group(2)
            # Only definitions: after the parameter list comes `{` (possibly after const, noexcept, an
            # initialiser list or a trailing return type) before any `;`.
            k = m.end() - 1
            depth_paren = 0
            while k < len(text):
                if text[k] == "(":
                    depth_paren += 1
                elif text[k] == ")":
                    depth_paren -= 1
                    if depth_paren == 0:
                        break
                k += 1
            if not at_namespace_scope(text, m.start()):
                continue  # a call inside a body
            body = body_brace(text, k + 1)  # None: a declaration (`;` first)
            if body is None:
                continue
            end = closing(text, body)
            line_start = text.rfind("\n", 0, m.start()) + 1
            sizes[cls] += line_of(text, end) - line_of(text, line_start) + 1
            where[cls].add(rel)
    return sizes, where


def at_namespace_scope(text, index):
    """True when index is not inside a function or class body (only namespace braces are open)."""
    open_braces = []  # for each open brace: is it a namespace's (or extern "C")?
    for m in re.finditer(r"[{}]", text[:index]):
        if m.group() == "{":
            head = text[max(0, m.start() - 200):m.start()].rstrip()
            open_braces.append(bool(re.search(r'(namespace(\s+[\w:]+)?|extern\s*"C")$', head)))
        elif open_braces:
            open_braces.pop()
    return all(open_braces)


def body_brace(text, rest):
    """The index of the function body's `{` after the parameter list ending before `rest`."""
    i = rest
    n = len(text)
    in_init = False
    while i < n:
        c = text[i]
        if c == ";":
            return None
        if c == ":" and not text.startswith("::", i) and not (i > 0 and text[i - 1] == ":"):
            in_init = True
        elif c in "({" and in_init:
            # a member initialiser's argument list: skip it, unless this `{` follows `)` or `}` (the body)
            prev = text[:i].rstrip()
            if c == "{" and (prev.endswith(")") or prev.endswith("}")):
                return i
            close = {"(": ")", "{": "}"}[c]
            depth = 0
            while i < n:
                if text[i] == c:
                    depth += 1
                elif text[i] == close:
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
        elif c == "{":
            return i
        i += 1
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=650)
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = [f for f in out.splitlines() if f.startswith(CODE) and f.endswith((".hpp", ".cpp"))]
    sizes, where = measure(files)
    ranked = sizes.most_common()
    for name, lines in ranked[:args.top]:
        print("%5d  %s  (%s)" % (lines, name, ", ".join(sorted(where[name]))))
    over = [(name, lines) for name, lines in ranked if lines > args.limit]
    for name, lines in over:
        print("class_sizes: %s has %d lines (declaration and member definitions), over %d: make a part of it a "
              "component of its own (docs/DESIGN-NOTES.md)" % (name, lines, args.limit), file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
