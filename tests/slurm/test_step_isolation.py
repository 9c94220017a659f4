"""Issue 18 on the real SLURM cluster: each step is its own job (its own run id and port, never another step's
world), a port held by another program or another job is passed by, and a node that cannot start ends every
node of its step within seconds with its reason (was: --rdzv-timeout, 900 s)."""
import os
import re
import subprocess
import time

import support_path  # puts tests/support, the fixtures, on sys.path; its SUPPORT goes to occupy.py below
from cluster import SlurmClusterCase, slurm_rdzv_ports
from exit_codes import UNAVAILABLE
from ports import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
DDPRUN = os.path.abspath(os.environ.get("DDPRUN", os.path.join(HERE, "../../build/launcher/ddprun")))
WORKER = os.path.abspath(os.environ.get("TEST_WORKER", os.path.join(HERE, "../../build/tests/bin/test_worker")))
RENDEZVOUS = os.path.join(os.path.dirname(DDPRUN), "../rendezvous/ddprun-rendezvous")


def worker_lines(text):
    """{rank: {NAME: value}} from ddprun's prefixed output lines "[rankR]: NAME=value"."""
    ranks = {}
    for rank, name, value in re.findall(r"^\[rank(\d+)\]: (\w+)=(.*)$", text, re.M):
        ranks.setdefault(int(rank), {})[name] = value
    return ranks


def sweep_script(outputs, steps=4, extra="", ddprun_args=""):
    """A batch script that starts `steps` 2-node steps at once in a 3-node allocation (alternately on n[1-2]
    and n[2-3], so that every pair of steps shares a node), each writing its output and exit code to a file."""
    lines = ["#!/bin/sh", extra]
    for i in range(steps):
        lines.append(f"( srun --overlap -N2 --ntasks-per-node=1 -r {i % 2} {DDPRUN} --nproc-per-node 1 {ddprun_args} "
                     f"{WORKER} "
                     f"env=SLURM_STEP_ID env=TORCHELASTIC_RUN_ID env=WORLD_SIZE env=MASTER_PORT sleep=0.5 "
                     f"> {outputs}.{i} 2>&1; echo \"rc=$?\" >> {outputs}.{i} ) &")
    lines.append("wait")
    return "\n".join(lines) + "\n"


def judge_sweep(job_id, outputs, steps=4):
    """(merged, failed, details) for one sweep: a step is merged when a worker's world is not its own step's
    (its run id names another step, or its world has another size), failed when it did not exit 0."""
    merged = failed = 0
    details = []
    for i in range(steps):
        with open(f"{outputs}.{i}") as f:
            text = f.read()
        ok = re.search(r"^rc=0$", text, re.M) is not None
        ranks = worker_lines(text)
        # One world: both workers share its master port and size; a run id naming a step names their own.
        own = len({r.get("MASTER_PORT") for r in ranks.values()}) == 1 and all(
            r.get("WORLD_SIZE") == "2" and r.get("TORCHELASTIC_RUN_ID") in (f"slurm-{job_id}.{r.get('SLURM_STEP_ID')}",
                                                                            f"slurm-{job_id}", str(job_id))
            for r in ranks.values())
        if not ok or sorted(ranks) != [0, 1]:
            failed += 1
            details.append(f"step {i} failed:\n{text}")
        elif not own:
            merged += 1
            details.append(f"step {i} merged:\n{text}")
    return merged, failed, details


class ConcurrentSteps(SlurmClusterCase):
    def test_four_two_node_steps_at_once_each_see_only_their_own_ranks(self):
        outputs = self.path("step")
        job, info = self.cluster.sbatch_wait(sweep_script(outputs), "-N3", "-o", self.path("batch.out"), timeout=90)
        merged, failed, details = judge_sweep(job, outputs)
        self.assertEqual((merged, failed), (0, 0), "\n".join(details))
        self.assertEqual(info["JobState"], "COMPLETED", info)
        run_ids = set()
        for i in range(4):
            with open(f"{outputs}.{i}") as f:
                run_ids |= {r["TORCHELASTIC_RUN_ID"] for r in worker_lines(f.read()).values()}
        self.assertEqual(len(run_ids), 4, run_ids)

    def test_steps_given_one_run_id_never_merge(self):
        """Issue 34: torchrun's habit, --rdzv-id $SLURM_JOB_ID, gave every step the same run id and token, and
        concurrent steps merged into one world (1 of 10 sweeps; 3/3 with identical candidate lists). The token is
        bound to the step now: the worlds stay apart, and every worker sees the run id it was given."""
        outputs = self.path("shared")
        for sweep in range(3):
            script = sweep_script(outputs, ddprun_args="--rdzv-id $SLURM_JOB_ID")
            job, info = self.cluster.sbatch_wait(script, "-N3", "-o", self.path(f"batch{sweep}.out"), timeout=90)
            merged, failed, details = judge_sweep(job, outputs)
            self.assertEqual((merged, failed), (0, 0), "\n".join(details))
            for i in range(4):
                with open(f"{outputs}.{i}") as f:
                    self.assertEqual({r["TORCHELASTIC_RUN_ID"] for r in worker_lines(f.read()).values()}, {str(job)})


    def test_steps_given_one_run_id_and_one_fixed_port_never_merge(self):
        """Issue 54: the step binding applied only on the automatic ports, and docs/MULTINODE.md advises a fixed
        --rdzv-port: two steps with one --rdzv-id and one port merged into one world (2 of 6). Bound to the step
        whatever the port: a step whose node 0 finds the port taken by another step's server fails (it says so),
        and no step's workers ever see another step's world."""
        outputs = self.path("fixed")
        port = free_port()  # every step is given the same one
        for sweep in range(2):
            script = sweep_script(outputs, ddprun_args=f"--rdzv-id $SLURM_JOB_ID --rdzv-port {port}")
            job, info = self.cluster.sbatch_wait(script, "-N3", "-o", self.path(f"fixed{sweep}.out"), timeout=120)
            merged, failed, details = judge_sweep(job, outputs)
            self.assertEqual(merged, 0, "\n".join(details))


class PortCollisions(SlurmClusterCase):
    def occupy(self, count, rendezvous_at=None):
        """A batch-script fragment: silent listeners on the step's first `count` candidate ports on n1 (all
        n* are 127.0.0.1 here), and another run's ddprun-rendezvous on candidate `rendezvous_at`."""
        helper = self.path("occupy.py")
        with open(helper, "w") as f:
            f.write(f"""import socket, subprocess, sys, time
sys.path.insert(0, {support_path.SUPPORT!r})
from cluster import slurm_rdzv_ports
ports = slurm_rdzv_ports(int(sys.argv[1]), 0)
held = []
for p in ports[:{count}]:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", p)); s.listen(); held.append(s)
other = None
if {rendezvous_at is not None!r}:
    other = subprocess.Popen([{RENDEZVOUS!r}, "--rdzv-id", "slurm-999.0", "--nnodes", "2", "--static-node-ranks",
                              "--port", str(ports[{rendezvous_at!r}]), "--rdzv-timeout", "60", "--log-level", "error",
                              "--token", "another-jobs-token"])
open({self.path('occupied')!r}, "w").close()
time.sleep(60)
""")
        return (f"python3 {helper} $SLURM_JOB_ID & OCC=$!\n"
                f"for i in $(seq 200); do [ -e {self.path('occupied')} ] && break; sleep 0.05; done\n")

    def batch(self, script):
        """(job id, final job info, the batch output) of `script` run on 2 nodes."""
        out = self.path("batch.out")
        job = self.cluster.sbatch(script, "-N2", "-o", out)
        try:
            info = self.cluster.wait_job(job, timeout=60)
        except AssertionError as e:
            with open(out) as f:
                raise AssertionError(f"{e}\n{f.read()}") from None
        with open(out) as f:
            return job, info, f.read()

    def test_a_silent_listener_and_another_jobs_server_on_the_first_ports_are_passed_by(self):
        script = ("#!/bin/sh\n" + self.occupy(1, rendezvous_at=1) +
                  f"srun -N2 --ntasks-per-node=1 {DDPRUN} -v --nproc-per-node 1 {WORKER} env=MASTER_PORT env=WORLD_SIZE\n"
                  "rc=$?; pkill -P $OCC; kill $OCC; exit $rc\n")
        job, info, text = self.batch(script)
        self.assertEqual(info["JobState"], "COMPLETED", text)
        ports = slurm_rdzv_ports(job, 0)
        self.assertIn(f"the rendezvous listens on port {ports[2]}, the first free one of 8 candidates", text)
        self.assertEqual(sorted(worker_lines(text)), [0, 1], text)

    def test_every_candidate_taken_says_so_and_names_the_option(self):
        script = ("#!/bin/sh\n" + self.occupy(8) +
                  f"srun -N2 --ntasks-per-node=1 {DDPRUN} --rdzv-timeout 4 --nproc-per-node 1 {WORKER} exit=0\n"
                  "rc=$?; kill $OCC; exit $rc\n")
        job, info, text = self.batch(script)
        self.assertEqual(info["JobState"], "FAILED", text)
        ports = ", ".join(map(str, slurm_rdzv_ports(job, 0)))
        self.assertIn(f"the rendezvous ports of this SLURM step ({ports}) are all in use on this node", text)
        self.assertIn("--rdzv-port", text)


class FailingTogether(SlurmClusterCase):
    def munge_env(self):
        return self.cluster.env(DDPRUN_MUNGE_SOCKET=self.cluster.path("munge/munge.socket"))

    def step_with_munged_down_on(self, node):
        """srun -N2 ddprun --rdzv-auth munge, where `node`'s ddprun finds no munged (its socket moved away)."""
        wrapper = self.path("ddprun-wrapper")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\nif [ \"$SLURMD_NODENAME\" = {node} ]; then "
                    f"export DDPRUN_MUNGE_SOCKET={self.path('no-munged/munge.socket')}; fi\nexec {DDPRUN} \"$@\"\n")
        os.chmod(wrapper, 0o755)
        return self.cluster.srun("-N2", "--ntasks-per-node=1", wrapper, "--rdzv-auth", "munge", "--nproc-per-node", 1,
                                 WORKER, "print=started", env=self.munge_env(), timeout=60)

    def test_munged_down_on_a_joiner_ends_the_host_within_seconds_with_its_reason(self):
        res = self.step_with_munged_down_on("n2")
        self.assertEqual(res.code, UNAVAILABLE, res)
        self.assertLess(res.elapsed, 10, res)
        self.assertNotIn("started", res.out, res)
        self.assertRegex(res.err, r"node 1 \(host [^)]+\) could not start: the rendezvous requires a MUNGE credential")
        self.assertNotIn("missing node ranks", res.err, res)

    def test_munged_down_on_the_host_ends_the_joiner_within_seconds_with_its_reason(self):
        res = self.step_with_munged_down_on("n1")
        self.assertEqual(res.code, UNAVAILABLE, res)
        self.assertLess(res.elapsed, 10, res)
        self.assertNotIn("started", res.out, res)
        self.assertIn("the job ended before this node joined: node 0", res.err, res)
        self.assertIn("could not start: --rdzv-auth munge", res.err, res)
