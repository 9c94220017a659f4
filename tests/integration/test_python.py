"""The Python examples (examples/python) under ddprun with real PyTorch (Debian's python3-torch, gloo on CPU):
training on Fashion-MNIST with 2 ranks on one node and on 2 nodes over loopback, a failing rank whose
traceback (from @record's error file) ends up in the summary, a restart that resumes at the step the survivor
saved when its collective failed, an elastic job that a node joins and then leaves (restarting: the re-form's
SIGTERM and the lost peer each cost no completed step; in place: one process throughout), and a job killed
outright (rank 0's periodic checkpoint). Each job trains for a few steps on a slice of the data set: seconds,
not minutes."""
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import DdprunTestCase, descendants, read_until
from python_env import EXAMPLES, NO_TORCH, torch_python
from ports import free_port

PYTHON = torch_python()
TRAIN = os.path.join(EXAMPLES, "fashion_mnist_ddp.py")
FAIL = os.path.join(EXAMPLES, "record_failure.py")
DATA = "/usr/share/datasets/fashion-mnist"
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

    def test_restart_resumes_at_the_step_the_survivor_saved(self):
        """Rank 1 raises after step 7; rank 0's next collective fails ("Connection closed by peer"), so rank 0 saves
        step 7 alone: the restart resumes there, not at the periodic checkpoint of step 5."""
        ckpt = self.path("ckpt.pt")
        res = self.run_ddprun("--nproc-per-node", 2, "--max-restarts", 1, TRAIN, *SHORT, "--max-steps", 10,
                              "--checkpoint", ckpt, "--checkpoint-every", 5, "--crash-at-step", 7, timeout=240)
        self.assertEqual(res.code, 0, res)
        out = res.stdout.decode()
        self.assertIn("[rank1]: RuntimeError: rank 1: crash requested at step 7", out + res.stderr.decode(), res)
        # Under ddprun the survivor first waits for a re-form in place, which a failure's restart never is: its
        # SIGTERM ends the wait, and the checkpoint is saved then.
        self.assertRegex(out, rf"\[rank0\]: rank 0: the group broke \([^\n]*\); (?:waiting for the next round\n"
                              rf"\[rank0\]: rank 0: stopped while re-forming; )?checkpoint {re.escape(ckpt)} saved at "
                              r"step 7 \(epoch 0, batch 7 of 31\)\n", res)
        for rank in (0, 1):
            self.assertIn(f"[rank{rank}]: rank {rank}: resumed from {ckpt} at step 7 (restart 1, world size 2)", out, res)
            self.assertIn(f"[rank{rank}]: rank {rank}: finished at step 10", out, res)
        self.assertEqual(self.checkpoint_step(ckpt), 10)
        self.assertEqual([f for f in os.listdir(self.tmp) if ".tmp." in f], [], "a temporary checkpoint was left")

    def join_then_lose_a_node(self, ckpt, *example_args, round_start, freeze=False):
        """--nnodes 1:2, one rank per node, the default --checkpoint-every (50), 3 epochs (B has seconds to join).
        Node A trains alone; node B joins; once A's rank 0 logged a step of the two-node round, B's ddprun is
        SIGKILLed (its guard SIGKILLs its worker) and A finishes alone. `round_start`: what A's rank 0 writes when a
        round starts. With `freeze`, B's ddprun and worker are SIGSTOPped instead (until A is done), and the
        nodes drop a silent peer after 3 s (--heartbeat-timeout). Returns A's stdout and stderr, the step logged
        with two nodes and the seconds from B's loss to A's next round."""
        self.env["DDPRUN_TOKEN"] = "test-token"
        common = ["--nnodes", "1:2", "--nproc-per-node", 1, "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
                  "--rdzv-id", "py", "--max-restarts", 0, "--rdzv-conf", "last_call_timeout=0.2",
                  "--term-timeout", 30]
        if freeze:
            common += ["--heartbeat-interval", 0.5, "--heartbeat-timeout", 3]
        train = [TRAIN, *SHORT, "--epochs", 3, "--checkpoint", ckpt, *example_args]
        a = self.start(*common, "--events-file", self.path("events.a"), *train)
        procs = [a]
        # Whatever goes wrong, nothing runs for ever: the reads below then see end of file and fail.
        killer = threading.Timer(150, lambda: [os.killpg(p.pid, signal.SIGKILL) for p in procs if p.poll() is None])
        killer.start()
        self.addCleanup(killer.cancel)
        try:
            out = read_until(a, b"", b"[rank0]: epoch 0 step 10 loss", "node A trained alone")
            b = self.start(*common, *train)
            procs.append(b)
            out = read_until(a, out, round_start, "the re-form after node B joined")
            out = read_until(a, out, b"\n", "the line")
            mark = len(out)
            out = read_until(a, out, b"loss", "a step with two nodes")
            out = read_until(a, out, b"\n", "the step's line")
            m = re.search(rb"\[rank0\]: epoch \d+ step (\d+) loss", out[mark:])
            self.assertIsNotNone(m, out)
            lost_at = time.monotonic()
            if freeze:  # the worker is in a process group of its own: every process of the node
                for pid in [b.pid, *descendants(b.pid)]:
                    os.kill(pid, signal.SIGSTOP)
            else:
                os.kill(b.pid, signal.SIGKILL)
            out = read_until(a, out, round_start, "the re-form without node B")
            next_round_after = time.monotonic() - lost_at
            while chunk := os.read(a.stdout.fileno(), 65536):
                out += chunk
            err = a.stderr.read()
            self.assertEqual(a.wait(timeout=60), 0, (out, err))
            if freeze:
                os.killpg(b.pid, signal.SIGKILL)
            self.assertEqual(b.wait(timeout=30), -signal.SIGKILL)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        return out.decode(), err.decode(), int(m.group(1)), next_round_after

    def test_a_join_and_a_lost_node_cost_no_completed_step(self):
        """Restarting at each re-form (--no-reform-in-place, what the example does under torchrun). B's join: the
        re-form's SIGTERM makes A's rank save the step it completed and exit 0, and both ranks resume at exactly
        that step. B's loss: A's collective fails, A's rank saves the last completed step alone, and A resumes
        there alone and finishes."""
        ckpt = self.path("ckpt.pt")
        text, _, together, _ = self.join_then_lose_a_node(ckpt, "--no-reform-in-place",
                                                          round_start=b"[rank0]: rank 0: resumed from")
        m = re.search(r"\[rank0\]: rank 0: stop requested by SIGTERM: checkpoint \S+ (?:saved at|already holds) "
                      r"step (\d+) \(epoch (\d+), batch (\d+) of 62\); exiting\n", text)
        self.assertIsNotNone(m, text)
        joined = int(m.group(1))
        self.assertGreaterEqual(joined, 10)
        self.assertEqual(62 * int(m.group(2)) + int(m.group(3)), joined)  # A alone: 62 steps an epoch
        # Resumed at the step A completed, not at the last multiple of 50 (and not from scratch).
        self.assertIn(f"[rank0]: rank 0: resumed from {ckpt} at step {joined} (restart 1, world size 2)\n", text)
        self.assertGreater(together, joined)
        m = re.search(rf"\[rank0\]: rank 0: the group broke \([^\n]*\); checkpoint {re.escape(ckpt)} "
                      r"(?:saved at|already holds) step (\d+)", text)
        self.assertIsNotNone(m, text)
        lost = int(m.group(1))
        self.assertGreaterEqual(lost, together)
        self.assertIn(f"[rank0]: rank 0: resumed from {ckpt} at step {lost} (restart 2, world size 1)\n", text)
        m = re.search(r"\[rank0\]: rank 0: finished at step (\d+),", text)
        self.assertIsNotNone(m, text)
        self.assertEqual(self.checkpoint_step(ckpt), int(m.group(1)))  # rank 0 saves at the end too
        rounds = [(e["restart_count"], e["nnodes"], e["world_size"]) for e in self.events(self.path("events.a"))
                  if e["event"] == "rendezvous"]
        self.assertEqual(rounds, [(0, 1, 1), (1, 2, 2), (2, 1, 1)])
        self.assertEqual([f for f in os.listdir(self.tmp) if ".tmp." in f], [], "a temporary checkpoint was left")

    def test_a_join_and_a_lost_node_re_form_in_place(self):
        """The same job with the example's default under ddprun: re-forming in place. A's worker (one process
        throughout) takes both new rounds up without a restart, never trains a step twice, and finishes; B's worker
        loaded the periodic checkpoint and caught up from A's state by the broadcast."""
        ckpt = self.path("ckpt.pt")
        text, _, together, _ = self.join_then_lose_a_node(ckpt, round_start=b"[rank0]: rank 0: re-formed in place at step")
        joined = re.search(r"\[rank0\]: rank 0: ddprun re-forms the job; waiting for the next round\n"
                           r"\[rank0\]: rank 0: re-formed in place at step (\d+) \(restart 1, world size 2\)\n", text)
        self.assertIsNotNone(joined, text)
        lost = re.search(r"\[rank0\]: rank 0: the group broke \([^\n]*\); waiting for the next round\n"
                         r"\[rank0\]: rank 0: re-formed in place at step (\d+) \(restart 2, world size 1\)\n", text)
        self.assertIsNotNone(lost, text)
        self.assertGreater(together, int(joined.group(1)))
        self.assertGreaterEqual(int(lost.group(1)), together)
        steps = [int(m) for m in re.findall(r"\[rank0\]: epoch \d+ step (\d+) loss", text)]
        self.assertEqual(steps, sorted(set(steps)), "a step was trained twice")  # in order, none repeated
        self.assertNotIn("resumed from", text)  # A never restarted
        finished = re.search(r"\[rank0\]: rank 0: finished at step (\d+),", text)
        self.assertIsNotNone(finished, text)
        self.assertEqual(self.checkpoint_step(ckpt), int(finished.group(1)))
        events = self.events(self.path("events.a"))
        self.assertEqual([(e["restart_count"], e["world_size"]) for e in events if e["event"] == "rendezvous"],
                         [(0, 1), (1, 2), (2, 1)])
        self.assertEqual(len([e for e in events if e["event"] == "started"]), 1, "A's worker was restarted")
        self.assertEqual(len([e for e in events if e["event"] == "reformed_in_place"]), 2)

    def test_a_frozen_node_costs_no_completed_step(self):
        """Issue 32: B's ddprun and worker SIGSTOPped, not dead. Its connections stay open, so A's rank waits in a
        collective that never fails by itself; before, A's ddprun dropped B after --heartbeat-timeout, then waited
        --term-timeout (30 s) for its worker to take the round up, killed it and restarted it from the checkpoint.
        Now A's worker leaves the group as soon as B is dropped (ddprun_heartbeat shuts its connections down) and
        takes the round up in place, with the step it had completed: no restart, no step trained twice, the next
        round within the heartbeat timeout and a few seconds (15 s here: a bound for a loaded machine, still far
        below the 33 s of the old path)."""
        ckpt = self.path("ckpt.pt")
        text, err, together, after = self.join_then_lose_a_node(
            ckpt, round_start=b"[rank0]: rank 0: re-formed in place at step", freeze=True)
        lost = re.search(r"\[rank0\]: rank 0: the group broke \([^\n]*Connection closed[^\n]*\); waiting for the next "
                         r"round\n\[rank0\]: rank 0: re-formed in place at step (\d+) \(restart 2, world size 1\)\n",
                         text)
        self.assertIsNotNone(lost, (text, err))
        self.assertGreaterEqual(int(lost.group(1)), together)
        self.assertLess(after, 15, "the frozen node's peers waited for --term-timeout")
        self.assertIn("ddprun_heartbeat: a node of this round was lost: shutting down the", err)
        steps = [int(m) for m in re.findall(r"\[rank0\]: epoch \d+ step (\d+) loss", text)]
        self.assertEqual(steps, sorted(set(steps)), "a step was trained twice")
        self.assertNotIn("resumed from", text)
        self.assertNotIn("did not take the re-formed round up", err)
        events = self.events(self.path("events.a"))
        self.assertEqual(len([e for e in events if e["event"] == "started"]), 1, "A's worker was restarted")
        self.assertIsNotNone(re.search(r"\[rank0\]: rank 0: finished at step \d+,", text), text)

    def test_a_usr1_notice_saves_and_ends_the_example_cleanly(self):
        """Issue 34: SLURM's notice (SIGUSR1, which ddprun forwards to every worker) killed every rank of the example
        (exit 138) and nothing was requeued. It is the example's stop request now, as SIGTERM is: rank 0 saves the
        step the ranks agreed on and every rank exits 0 (outside SLURM a notice is no failure: ddprun exits 0)."""
        ckpt = self.path("ckpt.pt")
        p = self.start("--nproc-per-node", 2, TRAIN, *SHORT, "--epochs", 5, "--checkpoint", ckpt)
        killer = threading.Timer(120, lambda: os.killpg(p.pid, signal.SIGKILL) if p.poll() is None else None)
        killer.start()
        self.addCleanup(killer.cancel)
        out = read_until(p, b"", b"[rank0]: epoch 0 step 10 loss", "step 10")
        os.kill(p.pid, signal.SIGUSR1)
        rest, err = p.communicate(timeout=60)
        text = (out + rest).decode()
        self.assertEqual(p.returncode, 0, (text, err))
        m = re.search(r"\[rank0\]: rank 0: stop requested by SIGUSR1: checkpoint \S+ saved at step (\d+)", text)
        self.assertIsNotNone(m, text)
        self.assertEqual(self.checkpoint_step(ckpt), int(m.group(1)))

    def test_a_job_killed_outright_keeps_the_periodic_checkpoint(self):
        """No rank can save when every one is SIGKILLed (ddprun is, and its guard SIGKILLs the workers): what is
        left is rank 0's last periodic checkpoint, a multiple of --checkpoint-every."""
        ckpt = self.path("ckpt.pt")
        p = self.start("--nproc-per-node", 2, TRAIN, *SHORT, "--epochs", 5, "--checkpoint", ckpt,
                       "--checkpoint-every", 5)
        killer = threading.Timer(120, lambda: os.killpg(p.pid, signal.SIGKILL) if p.poll() is None else None)
        killer.start()
        self.addCleanup(killer.cancel)
        try:
            # Rank 0 logs a step before it saves it: once step 20 is logged, step 15 is saved.
            read_until(p, b"", b"[rank0]: epoch 0 step 20 loss", "step 20")
        finally:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
        step = self.checkpoint_step(ckpt)
        self.assertGreaterEqual(step, 15)
        self.assertEqual(step % 5, 0)

    def test_the_data_set_is_decoded_once_into_the_cache(self):
        """--data-cache: the first start keeps the decoded data set there (no temporary file left); a later start
        reads it and never opens the .gz files (here overwritten with garbage of the same size and times, which
        would fail to inflate), and one whose source files changed (a new modification time) decodes them again
        (and fails here, on the garbage)."""
        data, cache = self.path("data"), self.path("cache")
        os.makedirs(data)
        for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
            shutil.copy2(os.path.join(DATA, name), data)
        args = ("--nproc-per-node", 1, TRAIN, *SHORT, "--max-steps", 3, "--data", data, "--data-cache", cache)
        res = self.run_ddprun(*args, timeout=180)
        self.assertEqual(res.code, 0, res)
        self.assertEqual(os.listdir(cache), ["train-2000.pt"])
        images = os.path.join(data, "train-images-idx3-ubyte.gz")
        st = os.stat(images)
        with open(images, "r+b") as f:
            f.write(b"\0" * st.st_size)
        os.utime(images, ns=(st.st_atime_ns, st.st_mtime_ns))
        res = self.run_ddprun(*args, timeout=180)
        self.assertEqual(res.code, 0, res)
        self.assertIn("[rank0]: rank 0: finished at step 3", res.stdout.decode(), res)
        os.utime(images, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        res = self.run_ddprun(*args, timeout=180)
        self.assertNotEqual(res.code, 0, res)
        self.assertIn("Not a gzipped file", res.stderr.decode(), res)


if __name__ == "__main__":
    unittest.main()
