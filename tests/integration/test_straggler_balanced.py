"""Issue 21: a balanced job is never named a straggler. Three real gloo ranks of the same work (a matmul and a
100 ms pause per step, in lockstep) for 5 minutes under the default rule, on whatever else this machine runs
meanwhile (the rest of the suite, side by side under ctest -j): not one straggler line, not one event. Its own
ctest entry, so that its 5 minutes run beside the other entries."""
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from python_env import SCRIPT, TorchStragglerCase

MINUTES = 5


class BalancedJob(TorchStragglerCase):
    def test_a_balanced_gloo_job_is_never_named_in_5_minutes(self):
        events = self.path("events.jsonl")
        r = self.run_ddprun("--nproc-per-node", 3, "--events-file", events, SCRIPT, "--seconds", MINUTES * 60,
                            timeout=MINUTES * 60 + 120)
        self.assertEqual(r.code, 0, r)
        self.assertNotIn(b"straggler", r.stderr, r.stderr[-3000:])
        self.assertEqual([e for e in self.events(events) if e["event"].startswith("straggler")], [])
        steps = [int(line.split()[-2]) for line in r.stdout.decode().splitlines() if "stopped after" in line]
        self.assertEqual(len(steps), 3, r.stdout)
        self.assertGreater(min(steps), MINUTES * 60 * 3, steps)  # it did run: ~8 steps/s at a 100 ms pause


if __name__ == "__main__":
    unittest.main()
