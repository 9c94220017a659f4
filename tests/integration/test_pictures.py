"""Pictures that read well (issue 21), checked on rendered pictures.

The job timeline (scripts/plot_events) of real jobs (a failure on one node, a restart, a 3-node elastic re-form,
a hang), rendered by rsvg-convert: every text, rendered alone, must stay inside the picture and meet no other
text, and no leader line may cross a text. The step-rate picture (scripts/plot_step_rate) of a synthetic metrics
file and events file with a straggler line: the straggler is marked, in its colour, where the events say.

DDPRUN_KEEP_PICTURES=DIR keeps a copy of every picture (SVG and PNG) in DIR, to look at them."""
import os
import shutil
import signal
import subprocess
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from elastic_fixture import ElasticCase
from exit_codes import HUNG
from harness import DdprunTestCase, WORKER
import rendered
from temp_dirs import temp_dir

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
        self.assertEqual(r.code, HUNG, r)  # README "Exit codes": a hang
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


class StepRate(unittest.TestCase):
    """scripts/plot_step_rate on synthetic files: two ranks at 5 steps/s, a restart, and a straggler event line
    (as ddprun writes it, and the straggler_end that follows, which is not marked)."""

    def setUp(self):
        self.tmp = temp_dir(self, "ddprun_step_rate_")

    def write(self, name, lines):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        return path

    def plot(self, name, *files):
        png = os.path.join(self.tmp, "rate.png")
        p = subprocess.run([SYSTEM_PYTHON, os.path.join(ROOT, "scripts/plot_step_rate"), "-o", png, *files],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0 and "matplotlib is missing" in p.stderr:
            self.skipTest(p.stderr.strip())
        self.assertEqual(p.returncode, 0, p.stderr)
        keep(png, f"step_rate_{name}.png")
        return p.stdout, png

    def metrics(self):
        t0 = 1_700_000_000_000
        lines = []
        for i in range(1, 21):  # 20 records, 2 s apart; rank 1 slower from the 10th on; a restart after the 12th
            t = t0 + i * 2000 + (6000 if i > 12 else 0)
            lines.append(f'{{"kind":"step","global_step":{10 * i},"loss":1.0,"time_ms":{t},'
                         f'"steps_per_s_rank0":5,"steps_per_s_rank1":{5 if i < 10 else 3.5}}}')
        events = [f'{{"event":"rendezvous","time_ms":{t0},"node_rank":0,"world_size":2,"restart_count":0}}',
                  f'{{"event":"restarting","time_ms":{t0 + 26000},"cause":"rank 1 exit 3","reason":"restart 1 of 1",'
                  '"membership":false}',
                  f'{{"event":"rendezvous","time_ms":{t0 + 29000},"node_rank":0,"world_size":2,"restart_count":1}}']
        return t0, lines, events

    @staticmethod
    def colour_pixels(png, rgb):
        width, height, rows, ch = rendered.read_png(png)
        return [(x, y) for y, row in enumerate(rows) for x in range(width) if tuple(row[x * ch:x * ch + 3]) == rgb]

    def test_a_straggler_event_is_marked_on_its_rank_and_a_restart_breaks_the_lines(self):
        t0, lines, events = self.metrics()
        # The events ddprun writes (agent/live_view.cpp): named, and no longer named (not marked).
        straggler = (f'{{"event":"straggler","time_ms":{t0 + 22000},"rank":1,"node_rank":0,"host":"n1",'
                     f'"per_step_s":0.3,"median_s":0.2,"measure":"work","window_s":20}}')
        cleared = f'{{"event":"straggler_end","time_ms":{t0 + 24000},"rank":1,"node_rank":0}}'
        out, png = self.plot("straggler", self.write("metrics.jsonl", lines),
                             self.write("events", events + [straggler, cleared]))
        self.assertIn("2 ranks, 40 points, 1 restarts, 0 hung, 1 stragglers marked", out)
        self.assertIn("rank 1 straggler at +22.0 s", out)
        self.assertIn("restart at +26.0 s", out)
        marker = self.colour_pixels(png, (0xad, 0x14, 0x57))
        self.assertGreater(len(marker), 20, "no straggler marker in the picture")
        restart = self.colour_pixels(png, (0x6a, 0x1b, 0x9a))
        rank0 = self.colour_pixels(png, (0x15, 0x65, 0xc0))
        mx, my = (sum(c) / len(marker) for c in zip(*marker))
        # Where the events put it: before the restart (+22 s, +26 s), on rank 1's line, below rank 0's (3.5 < 5).
        self.assertLess(mx, min(x for x, _ in restart))
        self.assertGreater(my, sum(y for _, y in rank0) / len(rank0) + 10)
        # The same files without the straggler line: nothing in its colour.
        out, png = self.plot("no_straggler", self.write("metrics.jsonl", lines), self.write("events", events))
        self.assertIn("0 stragglers marked", out)
        self.assertEqual(self.colour_pixels(png, (0xad, 0x14, 0x57)), [])
        self.assertGreater(len(self.colour_pixels(png, (0x6a, 0x1b, 0x9a))), 20, "no restart line in the picture")

    def test_metrics_without_per_rank_rates_are_refused_with_a_reason(self):
        path = self.write("metrics.jsonl", ['{"kind":"step","global_step":10,"loss":1.0}'])
        p = subprocess.run([SYSTEM_PYTHON, os.path.join(ROOT, "scripts/plot_step_rate"), "-o",
                            os.path.join(self.tmp, "x.png"), path], capture_output=True, text=True, timeout=120)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("no step records with time_ms and steps_per_s_rank<R> fields", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x.png")))


if __name__ == "__main__":
    unittest.main()
