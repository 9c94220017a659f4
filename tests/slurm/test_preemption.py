"""Preemption end to end with examples/slurm/preemptible.sbatch: SIGUSR1 to the batch shell (what
--signal=B:USR1@T sends) → the trap passes it to the step → every worker saves a checkpoint and exits 0 →
ddprun exits 79 → the script requeues the job → the second run resumes from the checkpoints.

The worker is a shell stand-in for examples/fashion_mnist (which does the same with --checkpoint-dir and
--resume): it counts steps, saves its step on SIGUSR1 and, when it finds its checkpoint, resumes and ends."""
import os
import re

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from cluster import SlurmClusterCase
from python_env import NO_TORCH, torch_python
from slurm_jobs import DDPRUN, EXAMPLE, read, send_notice, wait_requeued_and_completed
from wait import wait_until

WORKER = r'''
ck="$CASE/ckpt.$RANK"
if [ -f "$ck" ]; then echo "rank $RANK resumed from step $(cat "$ck")"; exit 0; fi
step=0
trap 'echo "$step" > "$ck"; echo "rank $RANK saved step $step"; exit 0' USR1
touch "$CASE/ready/ready.$RANK"
while :; do step=$((step + 1)); sleep 0.05; done
'''


class Preemption(SlurmClusterCase):
    def test_notice_checkpoint_requeue_resume(self):
        os.mkdir(self.path("ready"))
        out = self.path("job.out")
        env = self.cluster.env(DDPRUN=DDPRUN, NPROC=2, CASE=self.tmp)
        with open(EXAMPLE) as f:
            script = f.read()
        job = self.cluster.sbatch(script, "-N2", "--time=5", "-o", out, env=env, script_args=("sh", "-c", WORKER))
        wait_until(lambda: len(os.listdir(self.path("ready"))) >= 4, lambda: f"4 workers ready:\n{read(out)}", 30,
                   interval=0.05)
        self.assertEqual(len(os.listdir(self.path("ready"))), 4, read(out))
        send_notice(self.cluster, job)
        info = wait_requeued_and_completed(self.cluster, job)
        text = read(out)
        self.assertEqual((info.get("JobState"), info.get("Restarts")), ("COMPLETED", "1"), text)
        self.assertIn("preempted: requeueing job", text)
        self.assertIn("exit code 79", text)
        # Issue 54: the recipe gave --term-timeout 60 against SLURM's default KillWait (30 s) and ddprun warned
        # about it on every run (9/9); it now fits what SLURM allows.
        self.assertNotIn("is not shorter than SLURM's KillWait", text)
        for rank in range(4):
            self.assertIn(f"rank {rank} saved step", text)
            with open(self.path(f"ckpt.{rank}")) as f:
                saved = f.read().strip()
            self.assertIn(f"rank {rank} resumed from step {saved}\n", text)
        self.assertIn("run 2 of job", text)


PYTHON_EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples/python/fashion_mnist_ddp.py")


class PythonExamplePreemption(SlurmClusterCase):
    """Issue 34: the Python example under the same recipe. Before, SIGUSR1 killed every rank (exit 138) and nothing
    was requeued; now the example takes it as its stop request: rank 0 saves the agreed step, every rank exits 0,
    ddprun exits 79, the script requeues, and the second run resumes from that step and finishes."""

    def test_the_python_example_checkpoints_requeues_and_resumes(self):
        python = torch_python()
        if python is None:
            self.skipTest(NO_TORCH)
        out, ckpt = self.path("job.out"), self.path("ckpt.pt")
        env = self.cluster.env(DDPRUN=DDPRUN, NPROC=1, PYTHON_EXEC=python)
        with open(EXAMPLE) as f:
            script = f.read()
        job = self.cluster.sbatch(script, "-N2", "--time=5", "-o", out, env=env,
                                  script_args=(PYTHON_EXAMPLE, "--train-limit", "2000", "--batch-size", "32",
                                               "--log-every", "5", "--epochs", "3", "--checkpoint", ckpt))
        wait_until(lambda: "[rank0]: epoch 0 step 10 loss" in read(out), lambda: f"rank 0's step 10:\n{read(out)}",
                   90, interval=0.1)
        send_notice(self.cluster, job)
        info = wait_requeued_and_completed(self.cluster, job, timeout=150)
        text = read(out)
        self.assertEqual((info.get("JobState"), info.get("Restarts")), ("COMPLETED", "1"), text)
        saved = re.search(r"\[rank0\]: rank 0: stop requested by SIGUSR1: checkpoint \S+ saved at step (\d+)", text)
        self.assertIsNotNone(saved, text)
        self.assertIn("exit code 79", text)
        self.assertIn("preempted: requeueing job", text)
        self.assertIn("run 2 of job", text)
        self.assertIn(f"[rank0]: rank 0: resumed from {ckpt} at step {saved.group(1)}", text)
        self.assertRegex(text, r"\[rank0\]: rank 0: finished at step \d+")
