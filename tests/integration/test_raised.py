"""A worker that raised: the job ends when its error file is written, not when its interpreter is done exiting
(agent/error_file_watch.hpp, issue 35). A worker still running kRaisedExitGrace (50 ms of its own time) after its
whole error file is failed then with code 1, as an uncaught exception exits; one that exits within it keeps its own
exit; a file cut short is left to the exit. The verdict is the one the exit would have given, on every node."""
import os
import time
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import DdprunTestCase
from multinode import MultiNodeCase
from python_env import NO_TORCH, torch_python

PYTHON = torch_python()

# A DDP loop whose rank FAIL_RANK raises at step 5 under torch's @record, as a user's entry point would.
DDP_RAISE = """
import os, torch, torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(100000):
        if dist.get_rank() == int(os.environ["FAIL_RANK"]) and step == 5:
            raise ValueError(f"bad batch at step {step}")
        loss = model(torch.randn(4, 8)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()

main()
"""


class RaisedOnOneNode(DdprunTestCase):
    def kinds(self, events):
        return [e["event"] for e in events]

    def test_a_worker_still_exiting_after_its_error_file_ends_the_job_then(self):
        # Rank 1 writes its file and then never exits by itself (an interpreter stuck in its exit, at its worst):
        # without the watch this job would wait for it forever.
        events = self.path("events.jsonl")
        r = self.worker("@1:errorfile=ValueError: boom", "hang", nproc=3, extra=("--events-file", events))
        self.assertEqual(r.code, 1, r)
        err = r.stderr.decode()
        self.assertIn("rank 1 (pid", err, r)
        self.assertIn("failed: it raised ValueError: boom (its error file is written; its interpreter is still exiting", err)
        self.assertIn("root cause: rank 1 (local rank 1, node 0, host", err, r)
        self.assertRegex(err, r"root cause: rank 1 \([^)]*\) exited with code 1 at ", r)
        self.assertIn("root cause error: ValueError: boom", err, r)
        ev = self.events(events)
        raised = [e for e in ev if e["event"] == "raised"]
        self.assertEqual(len(raised), 1, ev)
        self.assertEqual((raised[0]["rank"], raised[0]["exit_code"], raised[0]["error"]), (1, 1, "ValueError: boom"))
        # The raise comes first, then the teardown, which ends the raiser too: it stays the failure it was.
        self.assertEqual(self.kinds(ev).index("raised") + 1, self.kinds(ev).index("teardown"), ev)
        exits = {e["rank"]: e for e in ev if e["event"] == "exited"}
        self.assertEqual((exits[1]["state"], exits[1]["exit_code"]), ("failed", 1), exits)
        self.assertEqual(sorted(exits[r]["state"] for r in (0, 2)), ["victim", "victim"], exits)
        summary = ev[-1]
        self.assertEqual((summary["exit_code"], summary["root_cause"]["rank"]), (1, 1), summary)
        self.assertLess(r.elapsed, 30, r)  # a bound against a hang; scripts/bench/exception_teardown.py times it

    def test_a_worker_that_exits_within_its_grace_keeps_its_own_exit(self):
        events = self.path("events.jsonl")
        r = self.worker("@1:errorfile=RuntimeError: x", "@1:exit=7", "hang", nproc=2, extra=("--events-file", events))
        self.assertEqual(r.code, 7, r)
        self.assertIn("root cause error: RuntimeError: x", r.stderr.decode(), r)
        self.assertNotIn("raised", self.kinds(self.events(events)))

    def test_an_error_file_cut_short_is_left_to_the_exit(self):
        events = self.path("events.jsonl")
        t0 = time.monotonic()
        r = self.worker('@1:errortext={"message": {"message": "ValueError: cut sh', "@1:sleep=2", "@1:exit=5",
                        "hang", nproc=2, extra=("--events-file", events))
        self.assertEqual(r.code, 5, r)
        self.assertGreaterEqual(time.monotonic() - t0, 2)  # nobody was failed before its exit
        self.assertRegex(r.stderr.decode(), r"root cause: rank 1 \([^)]*\) exited with code 5 at ", r)
        self.assertNotIn("raised", self.kinds(self.events(events)))

    def test_each_round_has_its_own_watch(self):
        # Round 0: rank 1 raises and hangs in its exit; round 1 (a restart) succeeds. Its files are new ones.
        events, flag = self.path("events.jsonl"), self.path("first_round")
        r = self.worker(f"@1:?{flag}:pidfile={flag}", f"@1:?{flag}:errorfile=ValueError: once",
                        f"@1:?{flag}:hang", "exit=0", nproc=2, extra=("--max-restarts", 1, "--events-file", events))
        self.assertEqual(r.code, 0, r)
        kinds = self.kinds(self.events(events))
        self.assertEqual(kinds.count("raised"), 1, kinds)
        self.assertEqual(kinds.count("restarting"), 1, kinds)
        self.assertLess(r.elapsed, 30, r)


class RaisedAcrossNodes(MultiNodeCase):
    def test_every_node_ends_with_the_raisers_root_cause(self):
        steps = [f"ready={self.ready}", f"@3:waitfile={self.go}", "@3:errorfile=boom", "@3:hang", "hang"]
        procs = [self.node(r, 2, *steps, nproc=2) for r in range(2)]
        self.wait_ready(4)
        t0 = time.monotonic()
        self.release()
        results = self.wait_all(procs)
        self.assertLess(time.monotonic() - t0, 10)  # against a hang: rank 3 never exits by itself
        for res in results:
            self.assertEqual(res.code, 1, res)
            err = res.stderr.decode()
            self.assertRegex(err, r"root cause: rank 3 \(local rank 1, node 1, host [^)]*\) exited with code 1 at ", res)
            self.assertIn("root cause error: boom", err, res)


@unittest.skipIf(PYTHON is None, NO_TORCH)
class RaisedInTorch(DdprunTestCase):
    def test_a_ddp_rank_that_raises_ends_the_job_while_its_interpreter_exits(self):
        script, events = self.path("ddp_raise.py"), self.path("events.jsonl")
        with open(script, "w") as f:
            f.write(DDP_RAISE)
        self.env.update(PYTHON_EXEC=PYTHON, FAIL_RANK="1", OMP_NUM_THREADS="1")
        r = self.run_ddprun("--nproc-per-node", 3, "--events-file", events, script, timeout=180)
        self.assertEqual(r.code, 1, r)
        out, err = r.stdout.decode(), r.stderr.decode()
        self.assertIn("root cause error: ValueError: bad batch at step 5", err, r)
        self.assertIn("ddprun: | ValueError: bad batch at step 5", err, r)  # the traceback, from the error file
        # The raiser printed its own traceback before it was stopped: no line of it is lost.
        self.assertIn("[rank1]: ValueError: bad batch at step 5", out + err, r)
        ev = self.events(events)
        # torch's interpreter exit (the process group, the DDP reducer, atexit) takes far longer than the grace.
        raised = [e for e in ev if e["event"] == "raised"]
        self.assertEqual([e["rank"] for e in raised], [1], ev)
        self.assertEqual(ev[-1]["root_cause"]["rank"], 1, ev[-1])


if __name__ == "__main__":
    unittest.main()
