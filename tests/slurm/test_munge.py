"""MUNGE on the real SLURM test cluster: a step's nodes prove the job's user with the cluster's own munged
(--rdzv-auth auto, nothing configured but munged's socket), and a process of another user (nobody) that knows
the run id and the port (both follow from the job and step ids) is refused with 77 while the job goes on."""
import hashlib
import hmac
import os
import pwd
import subprocess

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from cluster import SlurmClusterCase, slurm_rdzv_ports
from exit_codes import RDZV_REFUSED
from wait import wait_until

DDPRUN = os.environ.get("DDPRUN", os.path.join(os.path.dirname(__file__), "../../build/launcher/ddprun"))
WORKER = os.environ.get("TEST_WORKER", os.path.join(os.path.dirname(__file__), "../../build/tests/bin/test_worker"))
MUNGE_LINE = "each with a MUNGE credential of uid 0"


class MungeInSteps(SlurmClusterCase):
    def munge_env(self, **extra):
        # The cluster's munged listens in its temp dir, not at libmunge's default socket.
        return self.cluster.env(DDPRUN_MUNGE_SOCKET=self.cluster.path("munge/munge.socket"), **extra)

    def test_a_step_authenticates_its_nodes_with_munge_by_default(self):
        res = self.cluster.srun("-N2", "--ntasks-per-node=1", DDPRUN, "--nproc-per-node", 1, WORKER, "exit=0",
                                env=self.munge_env())
        self.assertEqual(res.code, 0, res)
        self.assertIn(MUNGE_LINE, res.err, res)

    def test_munge_refuses_another_user_and_the_job_goes_on(self):
        ready, go = self.path("ready"), self.path("go")
        os.mkdir(ready)
        job = self.cluster.popen("srun", "--partition=test", "-N2", "--ntasks-per-node=1", DDPRUN,
                                 "--nproc-per-node", 1, WORKER, f"ready={ready}", f"waitfile={go}",
                                 env=self.munge_env())
        try:
            def workers_ready():
                if all(os.path.exists(os.path.join(ready, f"ready.{r}")) for r in range(2)):
                    return True
                self.assertIsNone(job.poll(), "the job ended before its workers were ready")
                return False
            wait_until(workers_ready, "both workers to be ready", 30, interval=0.05)
            job_id = int(self.cluster.run("squeue", "-h", "-o", "%i").out.split()[0])
            nobody = pwd.getpwnam("nobody")
            nobody_tmp = self.path("nobody-tmp")
            os.mkdir(nobody_tmp)
            os.chown(nobody_tmp, nobody.pw_uid, nobody.pw_gid)
            # Everything a stranger can know: node 0's name, the port and run id that follow from the job id, and
            # the token the step uses, which follows from them too (the run id's, bound to the step: issue 34).
            run_id_token = f"ddprun-run-id-token:slurm-{job_id}.0".encode()
            token = hmac.new(run_id_token, f"ddprun-rdzv/1 scope\nslurm job {job_id} step 0".encode(),
                             hashlib.sha256).hexdigest()
            intruder = subprocess.run(
                ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", DDPRUN,
                 "--nnodes", "2", "--node-rank", "1", "--master-addr", "n1",
                 "--rdzv-port", str(slurm_rdzv_ports(job_id, 0)[0]),
                 "--run-id", f"slurm-{job_id}.0", "--rdzv-timeout", "10", "--nproc-per-node", "1",
                 "--rdzv-auth", "munge", WORKER, "exit=0"],
                env=self.munge_env(TMPDIR=nobody_tmp, HOME=nobody_tmp, DDPRUN_TOKEN=token), capture_output=True,
                text=True, timeout=30)
            self.assertEqual(intruder.returncode, RDZV_REFUSED, intruder.stderr)
            self.assertIn("authentication failed", intruder.stderr)
            self.assertIn("not the job's user", intruder.stderr)
        finally:
            with open(go, "w"):
                pass
            out, err = job.communicate(timeout=60)
        self.assertEqual(job.returncode, 0, err)
        self.assertIn(MUNGE_LINE, err)
        self.assertIn("MUNGE credential of another user than the job's uid 0", err)
