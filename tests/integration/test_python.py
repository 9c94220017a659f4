"""The Python examples (examples/python) under ddprun with real PyTorch (Debian's python3-torch, gloo on CPU):
training on Fashion-MNIST with 2 ranks on one node and on 2 nodes over loopback, a failing rank whose
traceback (from @record's error file) ends up in the summary, and a restart that resumes from rank 0's
checkpoint. Each job trains for a few steps on a slice of the data set: seconds, not minutes."""
import os
import subprocess
import unittest

from harness import DdprunTestCase
from python_env import EXAMPLES, NO_TORCH, torch_python
from ports import free_port

PYTHON = torch_python()
TRAIN = os.path.join(EXAMPLES, "fashion_mnist_ddp.py")
FAIL = os.path.join(EXAMPLES, "record_failure.py")
SHORT = ("--train-limit", "2000", "--batch-size", "32", "--log-every", "5")


@unittest.skipIf(PYTHON is None, NO_TORCH)
class PythonExamples(DdprunTestCase):
    def setUp(self):
        super().setUp()
        self.env["PYTHON_EXEC"] = PYTHON

    def checkpoint_step(self, path):
        out = subprocess.run([PYTHON, "-c", f"import torch; print(torch.load({path!r})['step'])"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        return int(out.stdout)

    def test_two_ranks_train_and_rank_0_checkpoints(self):
        ckpt = self.path("ckpt.pt")
        res = self.run_ddprun("--nproc-per-node", 2, TRAIN, *SHORT, "--max-steps", 10, "--checkpoint", ckpt,
                              "--checkpoint-every", 5, timeout=180)
        self.assertEqual(res.code, 0, res)
        out, err = res.stdout.decode(), res.stderr.decode()
        for rank in (0, 1):
            self.assertIn(f"[rank{rank}]: rank {rank}: finished at step 10", out, res)
        self.assertIn("[rank0]: epoch 0 step 10 loss", out, res)
        self.assertNotIn("[rank1]: epoch", out, res)  # only rank 0 reports
        self.assertEqual(self.checkpoint_step(ckpt), 10)
        self.assertEqual([f for f in os.listdir(self.tmp) if ".tmp." in f], [], "a temporary checkpoint was left")
        # The interpreter, resolved, is logged once.
        self.assertEqual(err.count("Python interpreter: " + PYTHON), 1, res)
        self.assertIn("(PYTHON_EXEC)", err, res)

    def test_two_nodes_on_loopback(self):
        port = free_port()
        self.env["DDPRUN_TOKEN"] = "test-token"
        procs = [self.start("--nnodes", 2, "--node-rank", r, "--master-addr", "127.0.0.1", "--rdzv-port", port,
                            "--nproc-per-node", 1, "--rdzv-timeout", 60, TRAIN, *SHORT, "--max-steps", 6)
                 for r in (0, 1)]
        outputs = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                self.fail("a node did not finish within 180 s")
            outputs.append((p.returncode, out.decode(), err.decode()))
        for node, (code, out, err) in enumerate(outputs):
            self.assertEqual(code, 0, f"node {node}: {out}\n{err}")
            self.assertIn(f"[rank{node}]: rank {node}: finished at step 6", out, err)
        self.assertIn("[rank0]: epoch 0 step 5 loss", outputs[0][1])

    def test_failing_rank_takes_the_job_down_with_its_traceback(self):
        logs, events = self.path("logs"), self.path("events")
        res = self.run_ddprun("--nproc-per-node", 2, "--log-dir", logs, "--events-file", events, FAIL,
                              "--fail-rank", 1, timeout=180)
        self.assertEqual(res.code, 1, res)
        err = res.stderr.decode()
        self.assertIn("root cause: rank 1", err, res)
        self.assertIn("root cause error: ValueError: shard header has element type 0x09", err, res)
        # The traceback's last frames, from @record's error file, each line marked.
        self.assertIn("ddprun: root cause traceback (rank 1, last 4 of 4 frames):", err, res)
        self.assertIn("ddprun: | Traceback (most recent call last):", err, res)
        self.assertRegex(err, r'ddprun: \|   File ".*record_failure.py", line \d+, in load_shard', res)
        self.assertRegex(err, r'ddprun: \|   File ".*record_failure.py", line \d+, in parse_header', res)
        self.assertIn("ddprun: | ValueError: shard header has element type 0x09", err, res)
        # Where the whole error file and the rank's logs are.
        files = [line.split(": ", 2)[2] for line in err.splitlines() if line.startswith("ddprun: full error file: ")]
        self.assertEqual(len(files), 1, res)
        self.assertTrue(os.path.isfile(files[0]) and files[0].startswith(logs), files)
        self.assertIn("ddprun: rank 1's files: " + os.path.dirname(files[0]), err, res)
        self.assertLess(res.elapsed, 120)
        # The same for tools: the events file's summary carries the traceback's lines and the file.
        summary = [e for e in self.events(events) if e["event"] == "summary"][-1]
        tb = summary["root_cause"]["traceback"]
        self.assertEqual((tb["frames_total"], tb["frames_shown"], tb["error_file"]), (4, 4, files[0]))
        self.assertEqual(tb["lines"][0], "Traceback (most recent call last):")
        self.assertEqual(tb["lines"][-1], "ValueError: shard header has element type 0x09, expected 0x08 (unsigned byte)")

    def test_traceback_without_log_dir_says_how_to_keep_the_file(self):
        res = self.run_ddprun("--nproc-per-node", 2, FAIL, "--fail-rank", 0, timeout=180)
        self.assertEqual(res.code, 1, res)
        err = res.stderr.decode()
        self.assertIn("ddprun: root cause traceback (rank 0,", err, res)
        self.assertNotIn("ddprun: full error file:", err, res)  # it was in a temporary directory, now removed
        self.assertIn("--log-dir DIR keeps the full error file", err, res)

    def test_restart_resumes_from_the_checkpoint(self):
        ckpt = self.path("ckpt.pt")
        res = self.run_ddprun("--nproc-per-node", 2, "--max-restarts", 1, TRAIN, *SHORT, "--max-steps", 10,
                              "--checkpoint", ckpt, "--checkpoint-every", 5, "--crash-at-step", 7, timeout=240)
        self.assertEqual(res.code, 0, res)
        out = res.stdout.decode()
        self.assertIn("[rank1]: RuntimeError: rank 1: crash requested at step 7", out + res.stderr.decode(), res)
        for rank in (0, 1):
            self.assertIn(f"[rank{rank}]: rank {rank}: resumed from {ckpt} at step 5 (restart 1, world size 2)", out, res)
            self.assertIn(f"[rank{rank}]: rank {rank}: finished at step 10", out, res)
        self.assertEqual(self.checkpoint_step(ckpt), 10)


if __name__ == "__main__":
    unittest.main()
