"""Issue 21's straggler test with real PyTorch gloo ranks (Debian's python3-torch): one rank of a lockstep job works
50% longer per step and is named within 30 s, by the default rule (5 s samples, a 20 s window, 30% over the
others' median for 10 s). The long balanced run is test_straggler_balanced.py."""
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from python_env import SCRIPT, TorchStragglerCase


class TorchStraggler(TorchStragglerCase):
    def test_a_gloo_rank_that_works_50_percent_longer_is_named_within_30_s(self):
        events, stop = self.path("events.jsonl"), self.path("stop")
        proc = self.start("--nproc-per-node", 3, "--events-file", events, SCRIPT, "--seconds", 90, "--slow-rank", 2,
                          "--stop-file", stop)
        try:
            seen = self.stderr_until(proc, b"straggler: rank 2", timeout=60, why="rank 2 was never named")
        finally:
            with open(stop, "w"):
                pass
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, (seen + err)[-3000:])
        log = (seen + err).decode()
        self.assertRegex(log, r"straggler: rank 2 \(node 0, host [^)]+\) took 0\.1[4-9]\d s of its own work per "
                              r"step over the last 20 s, the other ranks' median 0\.1[0-2]\d s")
        self.assertNotIn("straggler: rank 0", log)
        self.assertNotIn("straggler: rank 1", log)
        evs = self.events(events)
        started = min(e["time_ms"] for e in evs if e["event"] == "started")
        named = [e for e in evs if e["event"] == "straggler"]
        self.assertEqual([(e["rank"], e["measure"]) for e in named], [(2, "work")], named)
        delay_s = (named[0]["time_ms"] - started) / 1000
        print(f"\nnamed {delay_s:.1f} s after the workers started", flush=True)
        self.assertLess(delay_s, 30)


if __name__ == "__main__":
    unittest.main()
