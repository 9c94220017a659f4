"""A checker over every node's events file (--events-file) and ddprun's own lines, for the partition tests: what a
job promised (docs/MULTINODE.md, "The invariants under partitions") is read from what each node wrote, not from one
node's word.
- rounds_overlapping: invariant 1, at most one round of a job runs workers at any time. A round is its number and
  its world's master (two sides of a partition may both form "restart 1": two rounds). A node's workers of a
  round run from its first `started` after that round's `rendezvous` to its last `exited`; two such spans of
  different rounds, on any nodes, must not overlap.
- root_causes: invariant 4, every node names the same root cause (or says it cannot learn it: exit 74)."""
import json
import os

CANNOT_LEARN = 74


def read_events(path):
    """The events of one node, in order ([] when the file is missing: a node that never started)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def worker_spans(events):
    """[(round, start_ms, end_ms)] of one node: when its workers of each round ran; a round is (its number,
    its master)."""
    spans, round_, start, end = [], None, None, None
    for e in events:
        kind = e.get("event")
        if kind == "rendezvous":
            if start is not None:
                spans.append((round_, start, end if end is not None else start))
            round_, start, end = (e.get("restart_count"), f"{e.get('master_addr')}:{e.get('master_port')}"), None, None
        elif kind == "started" and round_ is not None:
            start = e["time_ms"] if start is None else min(start, e["time_ms"])
        elif kind == "exited" and e.get("time_ms") is not None and start is not None:
            end = e["time_ms"] if end is None else max(end, e["time_ms"])
        elif kind == "summary" and start is not None and end is None:
            end = e["time_ms"]
    if start is not None:
        spans.append((round_, start, end if end is not None else start))
    return spans


def rounds_overlapping(events_by_node):
    """Pairs of spans of different rounds that ran at once: [] when invariant 1 holds."""
    spans = [(node, *span) for node, events in events_by_node.items() for span in worker_spans(events)]
    bad = []
    for i, (n1, r1, s1, e1) in enumerate(spans):
        for n2, r2, s2, e2 in spans[i + 1:]:
            if r1 != r2 and s1 < e2 and s2 < e1:
                bad.append(((n1, r1, s1, e1), (n2, r2, s2, e2)))
    return bad


def root_cause_line(stderr_text):
    lines = [l for l in stderr_text.splitlines() if l.startswith("ddprun: root cause:")]
    return lines[-1].split(" at 20")[0] if lines else None  # the line without its time


def root_causes(results):
    """{root cause line: [node index]} of the nodes that named one (exit 74 names none, by the rule)."""
    named = {}
    for i, res in enumerate(results):
        if res.code == CANNOT_LEARN:
            continue
        named.setdefault(root_cause_line(res.stderr.decode(errors="replace")), []).append(i)
    return named
