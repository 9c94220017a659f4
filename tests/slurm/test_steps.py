"""ddprun in real SLURM steps: the topology comes from the step (not the job), and the two classic mistakes -
ddprun straight in the batch script, several tasks per node - are refused with advice."""
import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from cluster import SlurmClusterCase
from exit_codes import USAGE
from slurm_jobs import DDPRUN, WORKER, worker_env

ENV_STEPS = ["env=RANK", "env=WORLD_SIZE", "env=GROUP_RANK", "env=MASTER_ADDR", "env=MASTER_PORT",
             "env=TORCHELASTIC_RUN_ID"]


class StepTopology(SlurmClusterCase):
    def check_job(self, res, nnodes, nproc, master):
        self.assertEqual(res.code, 0, res)
        ranks = worker_env(res.out)
        self.assertEqual(sorted(ranks), list(range(nnodes * nproc)), res)
        ports = {r["MASTER_PORT"] for r in ranks.values()}
        self.assertEqual(len(ports), 1, res)
        for rank, env in ranks.items():
            self.assertEqual(env["WORLD_SIZE"], str(nnodes * nproc), res)
            self.assertEqual(env["GROUP_RANK"], str(rank // nproc), res)
            self.assertEqual(env["MASTER_ADDR"], master, res)
            self.assertTrue(env["TORCHELASTIC_RUN_ID"].startswith("slurm-"), res)

    def test_srun_two_and_three_nodes(self):
        for nnodes in (2, 3):
            res = self.cluster.srun(f"-N{nnodes}", "--ntasks-per-node=1", DDPRUN, "--nproc-per-node", 2, WORKER,
                                    *ENV_STEPS)
            self.check_job(res, nnodes, 2, "n1")

    def test_step_on_a_subset_of_the_job_takes_its_master_from_the_step(self):
        # In a 3-node job, a step on n[2-3]: node 0 is n2, and nobody may look for a rendezvous on n1.
        res = self.cluster.run("salloc", "-p", "test", "-N3", "srun", "-N2", "-r1", "--ntasks-per-node=1", DDPRUN,
                               "--nproc-per-node", 1, WORKER, *ENV_STEPS)
        self.check_job(res, 2, 1, "n2")
        res = self.cluster.run("salloc", "-p", "test", "-N3", "srun", "-N2", "-w", "n1,n3", DDPRUN,
                               "--nproc-per-node", 1, WORKER, *ENV_STEPS)
        self.check_job(res, 2, 1, "n1")
        res = self.cluster.run("salloc", "-p", "test", "-N3", "srun", "-N2", "-x", "n1", DDPRUN,
                               "--nproc-per-node", 1, WORKER, *ENV_STEPS)
        self.check_job(res, 2, 1, "n2")


class Mistakes(SlurmClusterCase):
    def test_ddprun_straight_in_the_batch_script_is_refused_with_advice(self):
        out = self.path("batch.out")
        job, info = self.cluster.sbatch_wait(
            f"#!/bin/sh\n{DDPRUN} --nproc-per-node 1 {WORKER} print=started\n", "-N2", "-o", out, timeout=30)
        with open(out) as f:
            text = f.read()
        self.assertEqual(info["JobState"], "FAILED", text)
        self.assertEqual(info["ExitCode"], "64:0", text)
        self.assertIn("srun", text)
        self.assertNotIn("started", text)
        self.assertEqual(len([line for line in text.splitlines() if line.strip()]), 1, text)

    def test_two_tasks_per_node_are_refused_with_advice(self):
        res = self.cluster.run("salloc", "-p", "test", "-N2", "--ntasks-per-node=2", "srun", DDPRUN,
                               "--nproc-per-node", 1, WORKER, "print=started")
        self.assertEqual(res.code, USAGE, res)
        self.assertNotIn("started", res.out, res)
        self.assertIn("--ntasks-per-node=1", res.err, res)
