"""What a SLURM admin expects of ddprun (issue 18), on the real test cluster, one section per expectation. One
cluster for the whole file, with the backfill scheduler: SLURM schedules heterogeneous jobs with no other."""
import json
import os
import socket

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import PREEMPTED, USAGE
from slurm_jobs import DDPRUN, JobCase, WORKER, worker_env

MUNGE_LINE = "each with a MUNGE credential of uid 0"


def lines(text):
    return [line for line in text.splitlines() if line.strip()]


class Admin(JobCase):
    SCHEDULER = "backfill"

    def read(self, name):
        with open(self.path(name)) as f:
            return f.read()

    # ---- heterogeneous jobs ---------------------------------------------------------------------------------
    def test_ddprun_straight_in_a_het_batch_script_is_refused_with_advice(self):
        # The script sees its first component only (SLURM_JOB_NUM_NODES=1): it used to run as a one-node job.
        # Both ways of asking for a het job: components on the command line, and #SBATCH hetjob.
        body = f"{DDPRUN} --nproc-per-node 1 {WORKER} print=started\n"
        scripts = {"cli": ("#!/bin/sh\n" + body, ["-N1", ":", "--partition=test", "-N2"]),
                   "hetjob": ("#!/bin/sh\n#SBATCH -N1\n#SBATCH hetjob\n#SBATCH -N2\n" + body, [])}
        for name, (script, args) in scripts.items():
            out = self.path(f"{name}.out")
            job, info = self.cluster.sbatch_wait(script, "-o", out, *args, timeout=60)
            text = self.read(f"{name}.out")
            self.assertEqual(info["ExitCode"], f"{USAGE}:0", (name, text))
            self.assertNotIn("started", text, name)
            self.assertEqual(len(lines(text)), 1, text)
            self.assertIn(f"heterogeneous job {job} of 2 components", text)
            self.assertIn("srun --ntasks-per-node=1 ddprun", text)

    def test_a_step_of_a_het_job_is_one_world_over_its_components(self):
        # Chosen: a step is a step. SLURM 22.05 gives a step one node list and node ids across the components it
        # spans: --het-group=1 is a world over that component's 2 nodes, a step over both components (srun
        # --het-group=0,1, or srun's own het job) one world over all 3.
        script = "\n".join([
            "#!/bin/sh",
            f"srun --het-group=1 {DDPRUN} --nproc-per-node 1 {WORKER} env=WORLD_SIZE env=GROUP_RANK "
            f"env=MASTER_ADDR > {self.path('group1.out')}",
            "echo rc=$? >> " + self.path("group1.out"),
            f"srun --het-group=0,1 {DDPRUN} --nproc-per-node 1 {WORKER} env=WORLD_SIZE env=GROUP_RANK "
            f"env=MASTER_ADDR > {self.path('both.out')}",
            "echo rc=$? >> " + self.path("both.out"), ""])
        job, info = self.cluster.sbatch_wait(script, "-o", self.path("job.out"), "-N1", ":", "--partition=test",
                                             "-N2", timeout=60)
        self.assertEqual(info["ExitCode"], "0:0", self.read("job.out"))
        for name, nodes, master in (("group1.out", 2, "n2"), ("both.out", 3, "n1")):
            text = self.read(name)
            self.assertIn("rc=0", text, (name, self.read("job.out")))
            ranks = worker_env(text)
            self.assertEqual(sorted(ranks), list(range(nodes)), text)
            for rank, env in ranks.items():
                self.assertEqual(env["WORLD_SIZE"], str(nodes), text)
                self.assertEqual(env["GROUP_RANK"], str(rank), text)
                self.assertEqual(env["MASTER_ADDR"], master, text)

    # ---- the SLURM node's name in every report --------------------------------------------------------------
    def test_root_cause_summary_events_and_prefix_name_the_slurm_node(self):
        # The test cluster's nodes n1..n3 all run on this machine: its hostname is none of them.
        machine = socket.gethostname()
        self.assertNotIn(machine, ("n1", "n2", "n3"))
        events, printed = self.path("events"), self.path("printed")
        os.mkdir(printed)
        # Rank 3 fails once rank 0 has printed: the teardown must not race rank 0's line (it did once, loaded).
        res = self.cluster.srun("-N2", "--ntasks-per-node=1", "bash", "-c",
                                f'exec {DDPRUN} --nproc-per-node 2 --prefix "[{{host}} {{rank}}]: " '
                                f'--events-file {events}.$SLURMD_NODENAME {WORKER} print=hello ready={printed} '
                                f'@3:waitfile={printed}/ready.0 @3:exit=7')
        self.assertEqual(res.code, 7, res)
        causes = [line for line in res.err.splitlines() if "ddprun: root cause: " in line]
        self.assertEqual(len(causes), 2, res)
        for line in causes:
            self.assertIn("node 1, host n2", line, res)
        # Issue 34: each summary line says which node wrote it, as the log lines do.
        self.assertEqual(sorted(line.split()[0] for line in causes), ["[n1]", "[n2]"], res)
        self.assertRegex(res.err, r"(?m)^\[n1\] ddprun: job FAILED after ")
        self.assertNotIn(f"host {machine}", res.err, res)
        self.assertIn("[n2 3]: hello", res.out, res)
        self.assertIn("[n1 0]: hello", res.out, res)
        for node in ("n1", "n2"):
            with open(f"{events}.{node}") as f:
                summary = [json.loads(line) for line in f if '"summary"' in line][-1]
            self.assertEqual(summary["host"], node)
        self.assertIn("node rank      1 of 2 (host n2)", res.err, res)
        # Issue 34: every node's own lines meet in one output; each says which node wrote it.
        self.assertRegex(res.err, r"\[ddprun n1 pid \d+\] INFO: ")
        self.assertRegex(res.err, r"\[ddprun n2 pid \d+\] INFO: ")
        self.assertNotRegex(res.err, r"\[ddprun pid \d+\]")

    # ---- MUNGE where slurm.conf says ------------------------------------------------------------------------
    def test_munge_socket_from_slurm_conf_without_ddprun_munge_socket(self):
        # The cluster's munged listens in its temp dir (AuthInfo=socket=... in its slurm.conf), not at libmunge's
        # default; nothing tells ddprun but slurm.conf.
        env = self.cluster.env()
        self.assertNotIn("DDPRUN_MUNGE_SOCKET", env)
        res = self.cluster.srun("-N2", "--ntasks-per-node=1", DDPRUN, "--rdzv-auth", "munge", "--nproc-per-node", 1,
                                WORKER, "exit=0", env=env)
        self.assertEqual(res.code, 0, res)
        self.assertIn(MUNGE_LINE, res.err, res)

    # ---- SLURM's task variables per worker ------------------------------------------------------------------
    def test_each_worker_has_its_own_slurm_procid(self):
        names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "SLURM_PROCID",
                 "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID", "SLURM_STEP_NUM_TASKS",
                 "SLURM_STEP_TASKS_PER_NODE"]
        res = self.cluster.srun("-N2", "--ntasks-per-node=1", DDPRUN, "--nproc-per-node", 2, WORKER,
                                *[f"env={n}" for n in names])
        self.assertEqual(res.code, 0, res)
        ranks = worker_env(res.out)
        self.assertEqual(sorted(ranks), [0, 1, 2, 3], res)
        for rank, env in ranks.items():
            self.assertEqual(env["SLURM_PROCID"], env["RANK"], res)
            self.assertEqual(env["SLURM_PROCID"], str(rank), res)
            self.assertEqual(env["SLURM_LOCALID"], env["LOCAL_RANK"], res)
            self.assertEqual(env["SLURM_NTASKS"], "4", res)
            self.assertEqual(env["SLURM_NTASKS_PER_NODE"], "2", res)
            self.assertEqual(env["SLURM_NODEID"], env["GROUP_RANK"], res)
            self.assertEqual(env["SLURM_STEP_NUM_TASKS"], "4", res)
            self.assertEqual(env["SLURM_STEP_TASKS_PER_NODE"], "2(x2)", res)

    # ---- wording --------------------------------------------------------------------------------------------
    def test_sigterm_and_usr1_preemption_read_alike(self):
        # Workers that save and exit 0 on the signal: scancel's SIGTERM (what preemption sends) and a USR1 notice
        # are both a preemption, exit 79, said the same way: no "FAILED", no ERROR line, no phantom "SIG0".
        for sig in ("TERM", "USR1"):
            for f in os.listdir(self.path("ready")):
                os.unlink(os.path.join(self.path("ready"), f))
            events = self.path(f"events.{sig}")
            proc = self.cluster.popen("srun", "--partition=test", "-N2", "--ntasks-per-node=1", "bash", "-c",
                                      f"exec {DDPRUN} --term-timeout 5 --events-file {events}.$SLURMD_NODENAME "
                                      f"--nproc-per-node 2 {WORKER} trap={sig} ready={self.path('ready')} hang")
            self.wait_ready(4)
            job = self.job_id_of()
            self.cluster.run("scancel", "-s", sig, job)
            out, err = proc.communicate(timeout=30)
            self.assertEqual(proc.returncode, PREEMPTED, err)
            self.assertEqual(err.count("ddprun: job preempted after"), 2, err)
            self.assertNotIn("FAILED", err)
            self.assertNotIn("SIG0", err)
            self.assertEqual([line for line in err.splitlines() if "ERROR" in line], [], err)
            if sig == "TERM":
                self.assertIn("slurmstepd already sent it to every worker, ddprun sends no copy", err)
            for node in ("n1", "n2"):
                with open(f"{events}.{node}") as f:
                    summary = [json.loads(line) for line in f if '"summary"' in line][-1]
                self.assertEqual(summary["exit_code"], PREEMPTED, summary)
                self.assertIs(summary.get("preempted"), True, summary)
                self.assertNotIn("root_cause", summary)
            self.cluster.wait_job(job, timeout=20)

    # ---- srun --kill-on-bad-exit=1 --------------------------------------------------------------------------
    def test_kill_on_bad_exit_ends_the_step_when_a_ddprun_fails_at_start(self):
        # What docs/MULTINODE.md says -K adds: node 1's ddprun exits 64 before it joins (a bad option there);
        # srun ends the step at once instead of node 0 waiting out --rdzv-timeout (30 s here).
        res = self.cluster.srun("-N2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "bash", "-c",
                                f'if [ "$SLURM_NODEID" = 1 ]; then exec {DDPRUN} --no-such-option; fi; '
                                f'exec {DDPRUN} --rdzv-timeout 30 --nproc-per-node 1 {WORKER} exit=0', timeout=60)
        self.assertNotEqual(res.code, 0, res)
        self.assertIn("unknown option --no-such-option", res.err, res)
        self.assertIn("task 1: Exited with exit code 64", res.err, res)
        self.assertLess(res.elapsed, 10, res)
