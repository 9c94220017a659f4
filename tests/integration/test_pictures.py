"""Pictures that read well (issue 21), checked on rendered pictures.

The job timeline (scripts/plot_events) of real jobs (a failure on one node, a restart, a 3-node elastic re-form,
a hang), rendered by rsvg-convert: every text, rendered alone, must stay inside the picture and meet no other
text, and no leader line may cross a text.

DDPRUN_KEEP_PICTURES=DIR keeps a copy of every picture (SVG and PNG) in DIR, to look at them."""
import os
import shutil
import signal
import subprocess
import unittest

import rendered
from harness import DdprunTestCase, WORKER
from test_elastic import ElasticCase

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-matplotlib; `python3` may be a pyenv shim
KEEP = os.environ.get("DDPRUN_KEEP_PICTURES")


def keep(path, name):
    if KEEP:
        os.makedirs(KEEP, exist_ok=True)
        shutil.copyfile(path, os.path.join(KEEP, name))


class TimelineChecks:
    """Draws a timeline of events files and checks the rendered picture (a mixin for DdprunTestCase)."""

    def timeline(self, name, *events):
        """Runs scripts/plot_events; checks the picture as rendered; returns {text: ink box}."""
        if rendered.RSVG is None:
            self.skipTest("rsvg-convert is not installed: Debian's librsvg2-bin (scripts/setup installs it)")
        svg, png = self.path(f"{name}.svg"), self.path(f"{name}.png")
        p = subprocess.run([SYSTEM_PYTHON, os.path.join(ROOT, "scripts/plot_events"), "-o", svg, *events],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        width, height = rendered.size_of(rendered.parse(svg))
        self.assertEqual(rendered.render(svg, png), (int(width), int(height)))
        keep(svg, f"{name}.svg")
        keep(png, f"{name}.png")
        boxes = rendered.text_ink_boxes(svg)
        for text, (x0, y0, x1, y1) in boxes:
            self.assertTrue(0 <= x0 and x1 <= width and 0 <= y0 and y1 <= height,
                            f"{text!r} leaves the {width:.0f}x{height:.0f} picture: ink at {(x0, y0, x1, y1)}")
        for i, (a, box_a) in enumerate(boxes):
            for b, box_b in boxes[i + 1:]:
                self.assertFalse(rendered.overlaps(box_a, box_b), f"{a!r} at {box_a} overlaps {b!r} at {box_b}")
        for line in rendered.parse(svg).iter(rendered.SVG_NS + "line"):
            if line.get("class") != "leader":
                continue
            x, y1, y2 = float(line.get("x1")), float(line.get("y1")), float(line.get("y2"))
            segment = (x - 0.5, min(y1, y2), x + 0.5, max(y1, y2))
            for text, box in boxes:
                self.assertFalse(rendered.overlaps(segment, box), f"a leader line at x={x} crosses {text!r} at {box}")
        return {text: box for text, box in boxes}

    def assert_labels(self, boxes, *texts):
        """Each of `texts` begins a label, or a part of one (times a few pixels apart share a label: "a · b")."""
        for text in texts:
            self.assertTrue(any(part.startswith(text) for t in boxes for part in t.split(" \u00b7 ")),
                            (text, sorted(boxes)))


class Timeline(TimelineChecks, DdprunTestCase):
    def test_a_failure_on_one_node(self):
        events = self.path("events")
        r = self.run_ddprun("--nproc-per-node", 2, "--events-file", events, WORKER, "@1:exit=3", "hang", timeout=60)
        self.assertEqual(r.code, 3, r)
        boxes = self.timeline("failure", events)
        self.assert_labels(boxes, "exit 3", "teardown (", "rendezvous (round 0, world 2)", "root cause: ")

    def test_a_restart(self):
        events = self.path("events")
        r = self.run_ddprun("--nproc-per-node", 2, "--max-restarts", 1, "--events-file", events, WORKER,
                            "@1:exit=3", "hang", timeout=60)
        self.assertEqual(r.code, 3, r)
        boxes = self.timeline("restart", events)
        self.assert_labels(boxes, "restart", "rendezvous (round 0, world 2)", "rendezvous (round 1, world 2)",
                           "exit 3", "teardown (")

    def test_a_hang(self):
        events = self.path("events")
        r = self.worker("beat=3", "@0:hang", "@1:beatfor=30", nproc=2,
                        extra=("--hang-timeout", "1.5", "--events-file", events))
        self.assertEqual(r.code, 78, r)  # README "Exit codes": a hang
        boxes = self.timeline("hang", events)
        self.assert_labels(boxes, "hung after step 3", "teardown (", "exit 78")


class ElasticTimeline(TimelineChecks, ElasticCase):
    def test_a_3_node_elastic_reform(self):
        steps = [f"ready={self.ready}", f"waitfile={self.go}", "exit=0"]
        a = self.host_agent("2:3", *steps, name="a", max_restarts=1)
        b = self.agent("2:3", *steps, name="b", max_restarts=1)
        c = self.agent("2:3", *steps, name="c", max_restarts=1)
        self.wait_ready(range(6))
        self.clear_ready()
        os.kill(b.pid, signal.SIGKILL)
        self.wait_all([b])
        self.wait_ready(range(4))
        self.release()
        self.assertEqual([r.code for r in self.wait_all([a, c])], [0, 0])
        boxes = self.timeline("elastic", *[self.path(f"ev_{n}.jsonl") for n in "abc"])
        self.assert_labels(boxes, "re-form", "rendezvous (round 0, world 6)", "rendezvous (round 1, world 4)",
                           "exit 0")


if __name__ == "__main__":
    unittest.main()
