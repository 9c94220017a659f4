"""Shared by the tests on the real SLURM cluster: the binaries (DDPRUN, WORKER), the reading of the workers'
output (worker_env), JobCase (steps that run ddprun, workers that report ready), and the preemption recipe's
helpers (examples/slurm/preemptible.sbatch: EXAMPLE, send_notice, wait_requeued_and_completed, read)."""
import os
import re
import time

from cluster import SlurmClusterCase
from wait import wait_until

DDPRUN = os.environ.get("DDPRUN", os.path.join(os.path.dirname(__file__), "../../build/launcher/ddprun"))
WORKER = os.environ.get("TEST_WORKER", os.path.join(os.path.dirname(__file__), "../../build/tests/bin/test_worker"))
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples/slurm/preemptible.sbatch")


def worker_env(text):
    """{rank: {NAME: value}} from ddprun's prefixed output lines "[rankR]: NAME=value"."""
    ranks = {}
    for rank, name, value in re.findall(r"^\[rank(\d+)\]: (\w+)=(.*)$", text, re.M):
        ranks.setdefault(int(rank), {})[name] = value
    return ranks


class JobCase(SlurmClusterCase):
    """Steps of ddprun on the cluster (start_step), and a ready directory every node's workers can write to."""

    def start_step(self, nodes, *ddprun_args, srun_args=()):
        return self.cluster.popen("srun", "--partition=test", f"-N{nodes}", "--ntasks-per-node=1", *srun_args,
                                  DDPRUN, "--term-timeout", 5, *ddprun_args)

    def wait_ready(self, count, timeout=20):
        wait_until(lambda: len(os.listdir(self.path("ready"))) >= count,
                   lambda: f"{count} workers ready, not only {os.listdir(self.path('ready'))}", timeout, interval=0.02)

    def job_id_of(self, proc_name_hint=None):
        r = self.cluster.run("squeue", "-h", "-o", "%i")
        ids = r.out.split()
        self.assertEqual(len(ids), 1, r)
        return ids[0]

    def setUp(self):
        super().setUp()
        os.mkdir(self.path("ready"))
        os.chmod(self.path("ready"), 0o777)


def send_notice(cluster, job):
    """What --signal=B:USR1@120 does 120 s before the time limit: SIGUSR1 to the batch shell only."""
    cluster.run("scancel", "--batch", "--signal=USR1", job)


def wait_requeued_and_completed(cluster, job, timeout=60):
    """Waits for the job's second run to end (or for it to fail); releases it at once when requeued.
    Returns the job's last scontrol fields. Not wait_until: the wait releases the job on its way, and what it
    returns on a timeout (the last fields) is the caller's to assert on."""
    deadline = time.monotonic() + timeout
    info, released = {}, False
    while time.monotonic() < deadline:
        info = cluster.job_info(job)
        if info.get("JobState") == "PENDING" and info.get("Restarts") == "1" and not released:
            # SLURM holds a requeued job back for a while (EligibleTime); the test need not wait for it. But the
            # first run's processes must be gone first (a Python worker takes a moment to exit): a run released
            # onto nodes still ending the last one failed at launch, with no line of output (once in CI). Not
            # wait_until: past the bound the job is released anyway, and its run then says what went wrong.
            gone_by = time.monotonic() + 15
            while cluster.leftovers() and time.monotonic() < gone_by:
                time.sleep(0.1)
            # And the run must start in a later wall-clock second than the requeue: slurmd revokes the first
            # run's credential at the requeue and compares the new credential's creation time with it in whole
            # seconds, so a run allocated within the same second is refused ("Job credential revoked", the job
            # FAILED with no output; 2 of 5 runs here, twice in CI). SLURM's own EligibleTime waits far longer.
            time.sleep(2 - time.time() % 1)
            print(f"requeued: Reason={info.get('Reason')} EligibleTime={info.get('EligibleTime')}")
            cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
            released = True
        if info.get("JobState") == "COMPLETED" and info.get("Restarts") == "1":
            break
        if info.get("JobState") in ("FAILED", "CANCELLED"):
            break
        time.sleep(0.2)
    return info


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""
