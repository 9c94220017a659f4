#!/usr/bin/env python3
"""docs/BENCHMARKS.md's summary table agrees with its sections (issue 31: the table said goodput 76.0% "not met"
while its section said 98.4% "met"). For every row of the table at the top: the section it names exists (a `## `
heading that starts with that name), and the figures of its ddprun and peer cells (each number with its unit or
%, e.g. "35.4 ms", "91.30%", "2 338 ms") appear in that section's text. A figure changed in one place only fails
here, with one line per figure.

    scripts/ci/check_benchmarks.py [PATH]     exit 0 when they agree, else 1
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# A figure: a number (thin-space or space thousands allowed) and what follows it directly (%, ×, a unit word).
FIGURE = re.compile(r"(?<![\w.])(\d{1,3}(?: \d{3})+|\d+(?:\.\d+)?)(\s?(?:%|×|ms|s|MiB|GiB|KiB)\b|%|×)?")


def sections(text):
    """{heading title: its text up to the next ## heading}."""
    out, title, lines = {}, None, []
    for line in text.splitlines():
        if line.startswith("## "):
            if title is not None:
                out[title] = "\n".join(lines)
            title, lines = line[3:].strip(), []
        elif title is not None:
            lines.append(line)
    if title is not None:
        out[title] = "\n".join(lines)
    return out


def table_rows(text):
    rows, started = [], False
    for line in text.splitlines():
        if line.startswith("| what | ddprun |"):
            started = True
            continue
        if started:
            if not line.startswith("|"):
                break
            if set(line.replace("|", "").strip()) <= set("-: "):
                continue
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def figures(cell):
    """The figures of a cell that carry a unit or a percent sign (plain counts like "5 of 5" are left out)."""
    found = []
    for m in FIGURE.finditer(cell):
        if m.group(2):
            found.append((m.group(1), m.group(2).strip()))
    return found


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "BENCHMARKS.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    secs = sections(text)
    rows = table_rows(text)
    problems = []
    if not rows:
        problems.append(f"{path}: no summary table (a row starting '| what | ddprun |')")
    for row in rows:
        if len(row) < 5:
            problems.append(f"summary row with {len(row)} cells, want 5: {' | '.join(row)}")
            continue
        what, ddprun, peer, _goal, section = row[:5]
        body = next((t for title, t in secs.items() if title.lower().startswith(section.lower())), None)
        if body is None:
            problems.append(f"'{what}': no section '## {section}…'")
            continue
        flat = body.replace("\u202f", " ").replace("\u2009", " ")
        for number, unit in figures(ddprun) + figures(peer):
            # The unit may come after a list of figures ("1.94, 1.91 ms"), never across a table cell.
            pattern = re.escape(number) + r"[^|\n]{0,16}?" + re.escape(unit)
            if not re.search(r"(?<![\d.])" + pattern, flat):
                problems.append(f"'{what}': {number} {unit} is not in section '{section}'")
    for p in problems:
        print(p)
    if problems:
        print(f"check_benchmarks: {len(problems)} disagreement(s) between the summary table and its sections",
              file=sys.stderr)
        return 1
    print(f"check_benchmarks: {len(rows)} summary rows agree with their sections")
    return 0


if __name__ == "__main__":
    sys.exit(main())
