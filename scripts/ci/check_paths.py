#!/usr/bin/env python3
"""Every path of this repository named in a comment, a doc or a script exists (issue 31: five references named
files that did not exist, and nothing noticed). A path is a word that starts with one of the repository's
top-level folders and ends in a file extension, e.g. agent/hang_inquiry.hpp or docs/BENCHMARKS.md; it is
looked up from the repository's root. Generated and third-party trees are not read.

    scripts/ci/check_paths.py          exit 0 when all exist, else 1 with one line per missing path
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOP = [d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d)) and not d.startswith(".")
       and not d.startswith("build")]
EXT = r"(?:hpp|cpp|h|py|md|sh|txt|json|cmake|sbatch|svg|png|toml|in)"
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w.+-]+(?:/[\w.+-]+)*\.%s)(?![\w/])" % ("|".join(map(re.escape, TOP)), EXT))
READ = re.compile(r"\.(hpp|cpp|h|py|md|sh|txt|cmake|sbatch)$|(^|/)(CMakeLists\.txt|run|test|setup)$")


def tracked():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if READ.search(f)]


def main():
    missing = []
    for rel in tracked():
        try:
            with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except OSError:
            continue
        for n, line in enumerate(lines, 1):
            for m in PATH.finditer(line):
                path = m.group(1)
                if "*" in path or "<" in path or "{" in path:
                    continue
                if not os.path.exists(os.path.join(ROOT, path)):
                    missing.append(f"{rel}:{n}: names {path}, which does not exist")
    for line in missing:
        print(line)
    if missing:
        print(f"check_paths: {len(missing)} reference(s) to files that do not exist", file=sys.stderr)
        return 1
    print("check_paths: every path named in the sources and docs exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
