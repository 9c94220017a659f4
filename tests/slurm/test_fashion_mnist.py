"""The real training program (examples/fashion_mnist, C++ LibTorch) under SLURM through the examples' batch
scripts: examples/slurm/train.sbatch on 2 nodes, and examples/slurm/preemptible.sbatch's notice → checkpoint
→ exit 79 → requeue → resume, end to end (test_preemption.py does the same with a shell stand-in).

Training runs on a small generated look-alike of Fashion-MNIST (tests/support/fashion_mnist_files.py, as in
test_main_job.py), one worker per node, so each case takes seconds. FASHION_MNIST is the binary's path
(CMakeLists.txt sets it when the SDK is built)."""
import os
import re
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from cluster import SlurmClusterCase
from fashion_mnist_files import write_split
from slurm_jobs import DDPRUN, EXAMPLE as PREEMPTIBLE, read, send_notice, wait_requeued_and_completed
from wait import wait_until

FASHION_MNIST = os.environ.get("FASHION_MNIST")
TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples/slurm/train.sbatch")


@unittest.skipUnless(FASHION_MNIST, "FASHION_MNIST is not set: examples/fashion_mnist is built only with the SDK "
                                    "(configure with -DDDPRUN_BUILD_SDK=ON and LibTorch)")
class FashionMnist(SlurmClusterCase):
    def setUp(self):
        super().setUp()
        self.data, self.ckpt = self.path("data"), self.path("ckpt")
        os.mkdir(self.data)
        for prefix, samples in (("train", 2048), ("t10k", 256)):  # 64 steps an epoch with 2 ranks of 16
            write_split(self.data, prefix, samples)
        self.env = self.cluster.env(DDPRUN=DDPRUN, NPROC=1)

    def train_args(self, *extra):
        return (FASHION_MNIST, "--data-dir", self.data, "--batch-size", "16", "--checkpoint-dir", self.ckpt, *extra)

    def test_train_sbatch_on_two_nodes(self):
        out = self.path("job.out")
        job = self.cluster.sbatch(read(TRAIN), "-N2", "--time=5", "-o", out, env=self.env,
                                  script_args=self.train_args("--epochs", "2", "--max-steps", "20",
                                                              "--log-every", "5"))
        info = self.cluster.wait_job(job, timeout=60)
        text = read(out)
        self.assertEqual(info.get("JobState"), "COMPLETED", text)
        # One worker on each of the 2 nodes: a world of 2, the global batch both ranks' batches.
        self.assertIn("[rank0]: recipe: global batch 32 (2 x 16)", text)
        self.assertIn("[rank0]: train epoch 1 step 20/64 loss", text)
        self.assertRegex(text, r"\[rank0\]: epoch 1 test_loss [0-9.]+ accuracy [0-9.]+%\n")
        self.assertTrue(os.path.exists(os.path.join(self.ckpt, "checkpoint.pt")), text)

    def test_preemptible_sbatch_checkpoints_requeues_and_resumes(self):
        out = self.path("job.out")
        job = self.cluster.sbatch(read(PREEMPTIBLE), "-N2", "--time=5", "-o", out, env=self.env,
                                  script_args=self.train_args("--epochs", "2", "--max-steps", "120",
                                                              "--log-every", "5", "--resume"))
        wait_until(lambda: "train epoch 1 step 5/64" in read(out), lambda: f"epoch 1's step 5:\n{read(out)}", 30,
                   interval=0.05)
        send_notice(self.cluster, job)
        info = wait_requeued_and_completed(self.cluster, job)
        text = read(out)
        self.assertEqual((info.get("JobState"), info.get("Restarts")), ("COMPLETED", "1"), text)
        m = re.search(r"\[rank0\]: stop requested by SIGUSR1: checkpoint (\S+) saved after epoch (\d+) step (\d+)/64",
                      text)
        self.assertTrue(m, text)
        self.assertEqual(m.group(1), os.path.join(self.ckpt, "checkpoint.pt"))
        self.assertIn("exit code 79", text)
        self.assertIn("preempted: requeueing job", text)
        self.assertIn("run 2 of job", text)
        self.assertIn(f"[rank0]: resumed from {m.group(1)} at epoch {m.group(2)} step {m.group(3)}\n", text)
        self.assertRegex(text, r"\[rank0\]: epoch \d+ test_loss [0-9.]+ accuracy [0-9.]+%\n")
