"""MUNGE authentication of the rendezvous, with a private munged per test (tests/support/munged.py):
nodes of the job's user join; a process of another user (nobody) is refused with 77 even with the right
token, run id and port; --rdzv-auth auto uses MUNGE in a SLURM step only; munged down: auto falls back to
the token with a warning, --rdzv-auth munge refuses to start (69)."""
import os
import pwd
import shutil
import signal
import subprocess
import time
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import UNAVAILABLE, USAGE
from harness import DDPRUN, RENDEZVOUS, WORKER
from multinode import MultiNodeCase, REFUSED
from munged import PrivateMunged
from wait import wait_until

MUNGE_LINE = "each with a MUNGE credential of uid"


def read_text(path):
    with open(path) as f:
        return f.read()


class MungeCase(MultiNodeCase):
    def setUp(self):
        super().setUp()
        self.munged = PrivateMunged()
        try:
            self.env["DDPRUN_MUNGE_SOCKET"] = self.munged.start()
        except unittest.SkipTest:
            self.munged.stop()
            raise

    def tearDown(self):
        self.munged.stop()  # before the harness looks for processes left behind
        super().tearDown()

    def kill_if_running(self, proc):
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()

    def two_node_job(self, *extra, env=None):
        saved = self.env
        self.env = env or self.env
        try:
            procs = [self.node(r, 2, "exit=0", extra=extra) for r in range(2)]
        finally:
            self.env = saved
        return self.wait_all(procs)


class MungeJobs(MungeCase):
    def test_two_nodes_with_munge_complete(self):
        results = self.two_node_job("--rdzv-auth", "munge")
        for res in results:
            self.assertEqual(res.code, 0, res)
        self.assertIn(MUNGE_LINE, results[0].stderr.decode(), results[0])

    def test_auto_uses_munge_inside_a_slurm_step_only(self):
        step = dict(self.env, SLURM_JOB_ID="4242", SLURM_STEP_ID="0")
        in_step = self.two_node_job(env=step)
        for res in in_step:
            self.assertEqual(res.code, 0, res)
        self.assertIn(MUNGE_LINE, in_step[0].stderr.decode(), in_step[0])
        outside = self.two_node_job()
        for res in outside:
            self.assertEqual(res.code, 0, res)
        self.assertNotIn(MUNGE_LINE, outside[0].stderr.decode(), outside[0])

    def test_a_node_of_another_user_is_refused_and_the_job_goes_on(self):
        nobody = pwd.getpwnam("nobody")
        # nobody must be able to run ddprun and the worker: copies in a directory it can read.
        bin_dir = self.path("bin")
        os.mkdir(bin_dir)
        os.chmod(self.tmp, 0o755)
        ddprun, worker = shutil.copy(DDPRUN, bin_dir), shutil.copy(WORKER, bin_dir)
        nobody_tmp = self.path("nobody-tmp")
        os.mkdir(nobody_tmp)
        os.chown(nobody_tmp, nobody.pw_uid, nobody.pw_gid)
        host = self.node(0, 2, "exit=0", extra=("--rdzv-auth", "munge"))
        self.addCleanup(self.kill_if_running, host)
        # The right token (DDPRUN_TOKEN), run id, port and node rank: only its user is wrong.
        intruder = subprocess.run(
            ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", ddprun,
             "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--rdzv-port", str(self.port),
             "--nproc-per-node", "1", "--rdzv-timeout", "10", "--rdzv-auth", "munge", worker,
             f"ready={nobody_tmp}"],
            env=dict(self.env, TMPDIR=nobody_tmp, HOME=nobody_tmp), capture_output=True, timeout=30,
            start_new_session=True)
        err = intruder.stderr.decode()
        self.assertEqual(intruder.returncode, REFUSED, err)
        self.assertIn("refused this node: authentication failed", err)
        self.assertIn("not the job's user", err)
        self.assertFalse(os.path.exists(os.path.join(nobody_tmp, "ready.1")), "a worker of the intruder ran")
        member = self.node(1, 2, "exit=0", extra=("--rdzv-auth", "munge"))
        results = self.wait_all([host, member])
        for res in results:
            self.assertEqual(res.code, 0, res)
        host_err = results[0].stderr.decode()
        self.assertIn(f"MUNGE credential of another user than the job's uid {os.geteuid()}", host_err)

    def test_a_joiner_whose_munged_is_down_ends_the_job_at_once_with_its_reason(self):
        # Before issue 18 it was refused (77) and node 0 waited --rdzv-timeout for it; now both end, 69, its reason.
        host = self.node(0, 2, f"ready={self.ready}", extra=("--rdzv-auth", "munge"))
        self.addCleanup(self.kill_if_running, host)
        saved = self.env
        self.env = dict(saved, DDPRUN_MUNGE_SOCKET=self.path("no-munged.socket"))
        try:
            lost = self.node(1, 2, f"ready={self.ready}")
        finally:
            self.env = saved
        results = self.wait_all([host, lost])
        for res in results:
            self.assertEqual(res.code, UNAVAILABLE, res)
        self.assertIn("requires a MUNGE credential and this node cannot make one", results[1].stderr.decode())
        self.assertIn("no-munged.socket", results[1].stderr.decode())
        self.assertRegex(results[0].stderr.decode(), r"root cause: node 1 \(host [^)]+\) could not start: the "
                                                     r"rendezvous requires a MUNGE credential")
        self.assertEqual(os.listdir(self.ready), [])  # no worker started anywhere

    def test_a_stop_signal_cuts_the_wait_to_tell_late_nodes_short(self):
        """Issue 34: once the job could not start, node 0 waits up to 10 s to tell the nodes not yet there; a stop
        signal then was not read (a scancel took 6.6 s). Now it ends the wait at once; the exit stays 69."""
        host = self.node(0, 3, f"ready={self.ready}", extra=("--rdzv-auth", "munge"))
        self.addCleanup(self.kill_if_running, host)
        saved = self.env
        self.env = dict(saved, DDPRUN_MUNGE_SOCKET=self.path("no-munged.socket"))
        try:
            lost = self.node(1, 3, f"ready={self.ready}")
        finally:
            self.env = saved
        self.assertEqual(self.wait_all([lost])[0].code, UNAVAILABLE)
        time.sleep(1)  # node 0 heard it and waits for node 2, which never comes
        t0 = time.monotonic()
        host.send_signal(signal.SIGTERM)
        res = self.wait_all([host])[0]
        self.assertLess(time.monotonic() - t0, 5, res)
        self.assertEqual(res.code, UNAVAILABLE, res)
        self.assertIn("not waiting any longer to tell the other nodes", res.stderr.decode(), res)

    def test_dynamic_node_ranks_with_munge(self):
        # The endpoint's machine hosts (the first agent to bind it); the other joins it and answers the challenge.
        agents = [self.start("--nnodes", 2, "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", "dynjob",
                             "--rdzv-auth", "munge", "--nproc-per-node", 1, "--rdzv-timeout", 20, WORKER, "exit=0")
                  for _ in range(2)]
        results = self.wait_all(agents)
        for res in results:
            self.assertEqual(res.code, 0, res)
        self.assertEqual(sum(MUNGE_LINE in res.stderr.decode() for res in results), 1, results)

    def test_a_separate_rendezvous_server_with_munge(self):
        # The server decides; the agents (no --rdzv-auth) answer what its challenge asks.
        port_file = self.path("port")
        server = subprocess.Popen([RENDEZVOUS, "--rdzv-id", "dynjob", "--nnodes", "2", "--host", "127.0.0.1",
                                   "--port", "0", "--port-file", port_file, "--munge"],
                                  env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.addCleanup(self.kill_if_running, server)
        # Listening before any agent starts: else an agent could bind the endpoint first and host it itself.
        self.wait_for_files([port_file])
        # Written by the server, maybe not yet whole.
        wait_until(lambda: read_text(port_file).endswith("\n"), "the server to write its port", 10)
        port = int(read_text(port_file))
        agents = [self.start("--nnodes", 2, "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "dynjob",
                             "--nproc-per-node", 1, "--rdzv-timeout", 20, WORKER, "exit=0") for _ in range(2)]
        for res in self.wait_all(agents):
            self.assertEqual(res.code, 0, res)
        served = self.wait_all([server])[0]
        self.assertEqual(served.code, 0, served)
        self.assertIn(MUNGE_LINE, served.stderr.decode(), served)

    def test_bad_rdzv_auth_value_is_a_usage_error(self):
        res = self.run_ddprun("--rdzv-auth", "kerberos", "--nproc-per-node", "1", WORKER, "exit=0")
        self.assertEqual(res.code, USAGE, res)
        self.assertIn("--rdzv-auth must be auto, munge or token", res.stderr.decode())


class MungedDown(MungeCase):
    def test_auto_in_a_slurm_step_falls_back_to_the_token_with_a_warning(self):
        self.munged.kill()  # the socket file stays, as after a crash
        step = dict(self.env, SLURM_JOB_ID="4242", SLURM_STEP_ID="0")
        results = self.two_node_job(env=step)
        for res in results:
            self.assertEqual(res.code, 0, res)
        host_err = results[0].stderr.decode()
        self.assertIn("MUNGE authentication is off for this job", host_err)
        self.assertNotIn(MUNGE_LINE, host_err)

    def test_munge_asked_for_refuses_to_start_without_munged(self):
        self.munged.stop()
        res = self.run_ddprun("--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--rdzv-port",
                              self.port, "--rdzv-auth", "munge", "--nproc-per-node", "1", WORKER,
                              f"ready={self.path('started')}")
        self.assertEqual(res.code, UNAVAILABLE, res)
        self.assertIn("--rdzv-auth munge: MUNGE: munged at", res.stderr.decode())
        self.assertFalse(os.path.exists(self.path("started")))  # no worker ran

    def test_a_separate_server_with_munge_refuses_to_start_without_munged(self):
        self.munged.stop()
        res = subprocess.run([RENDEZVOUS, "--rdzv-id", "dynjob", "--nnodes", "2", "--host", "127.0.0.1", "--port",
                              "0", "--munge"], env=self.env, capture_output=True, text=True, timeout=30)
        self.assertEqual(res.returncode, UNAVAILABLE, res.stderr)
        self.assertIn("--munge: MUNGE: munged at", res.stderr)


if __name__ == "__main__":
    unittest.main()
