"""What escapes the job guard's tag scan, each shown ended by the cover meant for it (DESIGN-NOTES "what covers
what"): a helper that stays in its worker's group but drops its environment (the group kill, whoever is left in
the group); one that leaves the group and drops its environment (the job's cgroup); a ddprun run inside a worker
(nested tags, and the inner guard surviving the outer kill to remove its run directory); a guard killed by hand
(a new one). The test runner is a child subreaper (harness.py): whatever escapes is re-parented to it, and the
tear-down's "processes left behind" check fails."""
import os
import signal
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import DDPRUN, DdprunTestCase, comm, descendants, reap_zombies, wait_gone
from wait import wait_until


def read_pids(path):
    try:
        with open(path) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


class EscapedHelpers(DdprunTestCase):
    def cgroup_or_skip(self):
        """Skips (with ddprun's own reason) where ddprun cannot make a cgroup."""
        r = self.run_ddprun("--log-level", "debug", "--nproc-per-node", 1, "true")
        self.assertEqual(r.code, 0, r)
        for line in r.stderr.decode().splitlines():
            if "DEBUG: job cgroup: " in line:
                return os.path.dirname(line.split("DEBUG: job cgroup: ", 1)[1])
            if "no job cgroup (" in line:
                self.skipTest("ddprun cannot make a cgroup here: " + line.split("no job cgroup (", 1)[1].split(")")[0])
        self.fail(f"ddprun said nothing about its cgroup:\n{r}")

    def worker_cgroups(self, path):
        """The cgroup directories the workers found themselves in (each wrote its /proc/self/cgroup line)."""
        mount = None
        with open("/proc/self/mountinfo") as f:
            for line in f:
                if " - cgroup2 " in line:
                    mount = line.split()[4]
        with open(path) as f:
            dirs = {mount + line.strip()[3:] for line in f if line.startswith("0::")}
        self.assertTrue(dirs and all(os.path.basename(d).startswith("ddprun-") for d in dirs), dirs)
        return dirs

    def assert_cgroups_removed(self, dirs):
        wait_until(lambda: not any(os.path.exists(d) for d in dirs),
                   lambda: f"the job cgroups to be removed: {[d for d in dirs if os.path.exists(d)]} left", 2)

    def sigkill_when(self, proc, pidfile, count):
        wait_until(lambda: len(read_pids(pidfile)) >= count, f"{count} helpers to write their pids", 10)
        pids = read_pids(pidfile)
        self.assertEqual(len(pids), count, "the helpers wrote their pids")
        proc.kill()
        _, err = proc.communicate()
        return pids, err.decode()

    def test_a_helper_that_dropped_its_environment_dies_with_its_group_after_the_worker_left(self):
        # The group's only tagged member (the worker) has exited: before, the guard killed a group only
        # while a tagged process remained in it. Without a cgroup, so the group kill alone is shown.
        self.env["DDPRUN_NO_CGROUP"] = "1"
        pidfile = self.path("helpers")
        script = (f'if [ "$RANK" = 0 ]; then env -i sh -c "echo \\$\\$ >> {pidfile}; exec sleep 300" & sleep 0.2; '
                  f'exit 0; fi; exec sleep 300')
        proc = self.start("--nproc-per-node", 2, "sh", "-c", script)
        pids, err = self.sigkill_when(proc, pidfile, 1)
        time.sleep(0.3)  # rank 0 has exited and was reaped by now
        self.assertEqual(wait_gone(pids, 1.0), [], f"the env -i helper outlived ddprun's SIGKILL\n{err}")

    def test_a_new_session_with_a_new_environment_is_ended_by_the_cgroup(self):
        self.cgroup_or_skip()
        pidfile, cgfile = self.path("helpers"), self.path("cgroups")
        # Neither tag nor watched group: `setsid env -i`, and Python's Popen(env={}, start_new_session=True).
        script = (f'cat /proc/self/cgroup >> {cgfile}; setsid env -i sh -c "echo \\$\\$ >> {pidfile}; exec sleep 300" & '
                  f'python3 -c "import subprocess; subprocess.Popen([\'sh\', \'-c\', \'echo \\$\\$ >> {pidfile}; '
                  f'exec sleep 300\'], env={{}}, start_new_session=True)"; exec sleep 300')
        proc = self.start("--nproc-per-node", 2, "sh", "-c", script)
        pids, err = self.sigkill_when(proc, pidfile, 4)
        self.assertEqual(wait_gone(pids, 2.0), [], f"a helper outside group and tag outlived ddprun\n{err}")
        self.assert_cgroups_removed(self.worker_cgroups(cgfile))

    def test_the_same_helpers_end_with_a_normal_end_and_the_cgroup_goes(self):
        self.cgroup_or_skip()
        cgfile = self.path("cgroups")
        r = self.run_ddprun("--nproc-per-node", 2, "sh", "-c",
                            f"cat /proc/self/cgroup >> {cgfile}; setsid env -i sleep 300 & sleep 0.2")
        self.assertEqual(r.code, 0, r)
        self.assert_cgroups_removed(self.worker_cgroups(cgfile))

    def nested_job(self):
        pidfile = self.path("inner")
        # The inner workers die with the inner ddprun (parent-death signal); their setsid helpers do not.
        inner = ("--nproc-per-node", 2, "sh", "-c",
                 f"cat /proc/self/cgroup >> {self.path('cgroups')}; "
                 f"setsid sh -c 'echo $$ >> {pidfile}; exec sleep 300' & echo $$ >> {pidfile}; exec sleep 300")
        proc = self.start("--nproc-per-node", 1, DDPRUN, *inner)
        pids, err = self.sigkill_when(proc, pidfile, 4)
        self.assertEqual(wait_gone(pids, 2.0), [], f"the inner job's workers outlived the outer ddprun\n{err}")
        wait_until(lambda: not [d for d in os.listdir(self.tmp) if d.startswith("ddprun-")],
                   lambda: f"the run directories to go: {os.listdir(self.tmp)}", 2)
        self.assertEqual(wait_gone(descendants(), 2.0), [])
        # The inner guard's note goes to the inner ddprun's stderr: a pipe nobody reads any more.
        self.assertIn("ddprun-guard: ddprun", err)

    def test_a_ddprun_inside_a_worker_ends_with_the_outer_one_by_tags(self):
        self.env["DDPRUN_NO_CGROUP"] = "1"
        self.nested_job()

    def test_a_ddprun_inside_a_worker_ends_with_the_outer_one_by_cgroups(self):
        self.cgroup_or_skip()
        self.nested_job()
        inner = self.worker_cgroups(self.path("cgroups"))
        self.assertEqual(len(inner), 1, inner)
        outer = os.path.dirname(next(iter(inner)))
        self.assertTrue(os.path.basename(outer).startswith("ddprun-"), "the inner job's cgroup is in the outer's")
        self.assert_cgroups_removed([*inner, outer])

    def test_a_guard_killed_by_hand_is_replaced_and_the_new_one_ends_the_job(self):
        self.env["DDPRUN_NO_CGROUP"] = "1"  # the tag scan is the guard's own work
        pidfile = self.path("workers")
        proc = self.start("--nproc-per-node", 2, "sh", "-c", f"echo $$ >> {pidfile}; exec sleep 300")
        wait_until(lambda: len(read_pids(pidfile)) >= 2, "both workers' pids", 10)
        guards = [p for p in descendants() if comm(p) == "ddprun-guard"]
        self.assertEqual(len(guards), 1)
        os.kill(guards[0], signal.SIGKILL)

        def new_guards():
            reap_zombies()
            return [p for p in descendants() if comm(p) == "ddprun-guard" and p != guards[0]]
        wait_until(new_guards, "a new guard to be started", 5)
        # ddprun says so once the new guard is told everything: wait for the line before the SIGKILL.
        said = self.stderr_until(proc, b"is gone: started a new one", 10,
                                 why="ddprun did not say its guard was replaced")
        self.assertIn(b"the job guard (pid ", said)
        pids, err = self.sigkill_when(proc, pidfile, 2)
        self.assertEqual(wait_gone(pids, 1.0), [], f"the workers outlived ddprun's SIGKILL\n{err}")
