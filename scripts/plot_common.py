"""What scripts/plot_events, plot_metrics and plot_step_rate share: reading JSON lines files (ddprun's
--events-file, the SDK's metrics file). Standard library only."""
import json
import os
import sys


def read_json_lines(path, prog, what):
    """Every object of a JSON lines file, in order; a bad line or an unreadable file ends `prog` with one
    line naming the file (and the line) and `what` the file should have been."""
    records = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{prog}: {path}:{n} is not a JSON line ({e}); give {what}")
    except OSError as e:
        sys.exit(f"{prog}: cannot read {path}: {e.strerror}")
    return records


def read_events(paths, prog="plot_events"):
    """[(file index, node_rank or None, event)] for every line of every events file (one file per ddprun, that
    is per node; an elastic job may give a node another node rank in a later round). Events without a
    node_rank (teardown, signal, restarting) have the node rank the file's last event before them named."""
    out = []
    for i, path in enumerate(paths):
        events = read_json_lines(path, prog, "ddprun --events-file files")
        node = next((e["node_rank"] for e in events if "node_rank" in e), None)
        for e in events:
            node = e.get("node_rank", node)
            out.append((i, node, e))
    return out


def is_straggler(event):
    """A rank named slow but alive: ddprun's `straggler` event (docs/MONITORING.md "Stragglers"); `straggler_end` is not."""
    return event.get("event") == "straggler" and "rank" in event


def pyplot(prog):
    """matplotlib's pyplot drawing to files (Agg), or `prog` ends naming the Debian package."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit(f"{prog}: matplotlib is missing: install python3-matplotlib (scripts/setup does) and run "
                 "with /usr/bin/python3")
    return plt


def save_png(fig, out):
    """Writes the figure to `out` whole (a reader never sees half a picture); returns (width, height)."""
    tmp = out + ".tmp.png"
    fig.savefig(tmp)
    os.replace(tmp, out)
    w, h = fig.get_size_inches() * fig.dpi
    return int(w), int(h)
