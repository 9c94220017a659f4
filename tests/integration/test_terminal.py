"""ddprun on a real terminal (a tmux pane: a pty with its line discipline and a shell's job control), where a
user stops it by hand: Ctrl-S (XOFF: the terminal stops taking output) must not keep a failed job from being torn
down, and the job ends with the right code once Ctrl-Q lets the output through (none lost); Ctrl-Z pauses the
whole job (workers included) for as long as the user likes, and `fg` resumes it to a normal end."""
import shutil
import subprocess
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import DDPRUN, DdprunTestCase, pid_alive, reap_zombies
from wait import wait_until


class Terminal(DdprunTestCase):
    def setUp(self):
        super().setUp()
        if not shutil.which("tmux"):
            self.skipTest("tmux is not installed (scripts/setup installs it)")
        self.tmux = ["tmux", "-S", self.path("tmux.sock")]
        self.tenv = {**self.env, "TERM": "xterm"}
        self.pids_file = self.path("pids")

    def tearDown(self):
        # The server is a daemon (re-parented to this test, a subreaper): it must be gone before tearDown looks.
        subprocess.run([*self.tmux, "kill-server"], stderr=subprocess.DEVNULL)
        super().tearDown()

    def pane(self, program):
        subprocess.run([*self.tmux, "new-session", "-d", "-x", "150", "-y", "40", "-s", "t", program], env=self.tenv,
                       check=True)

    def keys(self, *keys):
        subprocess.run([*self.tmux, "send-keys", "-t", "t", *keys], env=self.tenv, check=True)

    def screen(self):
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", "t"], env=self.tenv, capture_output=True,
                              text=True).stdout

    def wait_for(self, what, predicate, timeout):
        """wait_until, its failure showing the screen."""
        wait_until(predicate, lambda: f"{what}; screen:\n{self.screen()}", timeout, interval=0.05)

    def read(self, name):
        try:
            with open(self.path(name)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def worker_pids(self, count):
        self.wait_for(f"{count} workers", lambda: len((self.read("pids") or "").split()) >= count, 10)
        return [int(p) for p in self.read("pids").split()]

    def rc(self):
        text = self.read("rc")
        return text.strip() if text is not None else None

    def test_ctrl_s_does_not_hold_the_teardown_and_ctrl_q_ends_the_job_with_its_code(self):
        job = (f"{DDPRUN} --nproc-per-node 2 sh -c 'echo $$ >> {self.pids_file}; "
               f"if [ $RANK = 1 ]; then sleep 2; exit 3; fi; exec seq 1 100000000'")
        self.pane(f"{job}; echo $? > {self.path('rc')}; sleep 600")
        pids = self.worker_pids(2)
        self.wait_for("output on the terminal", lambda: "[rank0]: " in self.screen(), 10)
        self.keys("C-s")  # XOFF: the pty stops taking output; ddprun's writes to it block
        t0 = time.monotonic()
        # Rank 1 exits 3 at ~2 s: the job is torn down at once, the terminal still stopped.
        self.wait_for("every worker gone", lambda: (reap_zombies() or True) and
                        not any(pid_alive(p) for p in pids), 10)
        gone_after = time.monotonic() - t0
        self.assertLess(gone_after, 6, "the teardown waited for the terminal")
        time.sleep(0.5)
        self.assertIsNone(self.rc(), "ddprun must wait for its output to be shown, not drop it")
        self.keys("C-q")  # XON
        self.wait_for("ddprun's exit", lambda: self.rc() is not None, 60)
        self.assertEqual(self.rc(), "3", self.screen())
        self.wait_for("the summary", lambda: "root cause: rank 1" in self.screen(), 10)

    def test_ctrl_z_pauses_the_whole_job_and_fg_resumes_it_to_a_normal_end(self):
        self.pane("bash --norc --noprofile -i")
        # In a script, so that the exit code is written when ddprun ends (bash would go on to the next command
        # of a list the moment the job stops).
        with open(self.path("job.sh"), "w") as f:
            f.write(f"{DDPRUN} --nproc-per-node 2 sh -c 'echo $$ >> {self.pids_file}; "
                    f"for i in $(seq 1 10); do echo tick $RANK $i; sleep 0.3; done'\necho $? > {self.path('rc')}\n")
        self.wait_for("the shell's prompt", lambda: self.screen().strip() != "", 10)
        self.keys(f"sh {self.path('job.sh')}", "Enter")
        pids = self.worker_pids(2)
        self.wait_for("ticks", lambda: "tick 0 2" in self.screen(), 10)
        self.keys("C-z")
        self.wait_for("the shell to report the job stopped", lambda: "Stopped" in self.screen(), 10)

        def state(pid):
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]

        self.wait_for("every worker stopped", lambda: all(state(p) == "T" for p in pids), 5)
        time.sleep(8)  # longer than any heartbeat or timer ddprun has for one node
        self.assertTrue(all(state(p) == "T" for p in pids), "a worker ran on while the job was stopped")
        self.assertIsNone(self.rc())
        self.keys("fg", "Enter")
        self.wait_for("ddprun's exit", lambda: self.rc() is not None, 30)
        self.assertEqual(self.rc(), "0", self.screen())
        screen = self.screen()
        self.assertIn("tick 0 10", screen)
        self.assertIn("tick 1 10", screen)
