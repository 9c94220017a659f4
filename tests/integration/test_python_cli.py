"""What ddprun gives a Python worker beyond the environment: its stdin (--stdin-rank), a launch-style
--local-rank argument (started as ddprun-launch, or --local-rank-arg), the heartbeat helper on its
PYTHONPATH, a summary that shows the exception a worker without an error file printed on stderr, and,
when the interpreter cannot import a module at start-up, one that names the interpreter and how to
choose another. The helper scripts in py/ need no torch: any
Python 3 runs them (this test's own); the launch-style example needs torch."""
import fcntl
import json
import os
import subprocess
import sys
import termios
import threading
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import NOT_FOUND, USAGE
from harness import DDPRUN, DdprunTestCase

DDPRUN_LAUNCH = os.path.join(os.path.dirname(DDPRUN), "ddprun-launch")  # a link to ddprun, installed beside it
from python_env import EXAMPLES, HELPERS, NO_TORCH, torch_python

ECHO = os.path.join(HELPERS, "echo_stdin.py")
ARGV = os.path.join(HELPERS, "print_argv.py")
MISSING = os.path.join(HELPERS, "import_missing.py")
HEARTBEAT = os.path.join(os.path.dirname(__file__), "..", "..", "python", "ddprun_heartbeat.py")
RAISES = os.path.join(HELPERS, "raise_without_record.py")
BREAKPOINT = os.path.join(HELPERS, "breakpoint_rank.py")


class PythonWorkerCli(DdprunTestCase):
    def setUp(self):
        super().setUp()
        self.env["PYTHON_EXEC"] = sys.executable

    def argv_of(self, res, rank):
        for line in res.stdout.decode().splitlines():
            if line.startswith(f"[rank{rank}]: rank {rank} argv "):
                return json.loads(line.split(" argv ", 1)[1])
        self.fail(f"rank {rank} printed no argv\n{res}")

    def test_stdin_goes_to_the_chosen_rank_only(self):
        proc = self.start("--nproc-per-node", 3, "--stdin-rank", 1, ECHO, stdin=subprocess.PIPE)
        try:
            out, err = proc.communicate(b"first line\nsecond line\n", timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            self.fail("ddprun did not finish within 60 s")
        out = out.decode()
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("[rank1]: rank 1 read: first line\n[rank1]: rank 1 read: second line\n[rank1]: rank 1 eof", out)
        for rank in (0, 2):  # /dev/null: end of file at once, nothing read
            self.assertIn(f"[rank{rank}]: rank {rank} eof", out)
            self.assertNotIn(f"rank {rank} read:", out)

    def test_stdin_rank_reads_ddpruns_terminal(self):
        # ddprun in a session of its own whose controlling terminal is a pty, as in an interactive shell. The
        # rank runs in a process group of its own: reading the terminal from a background group would stop
        # it (SIGTTIN) unless it is made the foreground group, as pdb needs.
        master, slave = os.openpty()

        def controlling_terminal():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        try:
            proc = subprocess.Popen([DDPRUN, "--nproc-per-node", "2", "--stdin-rank", "0", ECHO], stdin=slave,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                                    preexec_fn=controlling_terminal)
            os.close(slave)
            os.write(master, b"typed at the terminal\n\x04")  # a line, then Ctrl-D: end of file
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                out, err = proc.communicate()
                self.fail(f"ddprun did not finish within 60 s (a rank stopped by SIGTTIN?)\n{out!r}\n{err!r}")
        finally:
            os.close(master)
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn(b"[rank0]: rank 0 read: typed at the terminal\n[rank0]: rank 0 eof", out, err)
        self.assertIn(b"[rank1]: rank 1 eof", out)
        self.assertNotIn(b"rank 1 read", out)

    def test_without_stdin_rank_no_worker_reads_ddpruns_stdin(self):
        proc = self.start("--nproc-per-node", 2, ECHO, stdin=subprocess.PIPE)
        out, err = proc.communicate(b"nobody reads this\n", timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        self.assertNotIn(b"read:", out)
        self.assertEqual(out.count(b" eof"), 2, out)

    def test_stdin_rank_outside_the_job_is_refused_before_anything_starts(self):
        res = self.run_ddprun("--nproc-per-node", 2, "--stdin-rank", 2, ECHO)
        self.assertEqual(res.code, USAGE, res)
        err = res.stderr.decode()
        self.assertIn("--stdin-rank 2: the job has ranks 0-1", err, res)
        self.assertNotIn(b"eof", res.stdout)
        res = self.run_ddprun("--nproc-per-node", 2, "--stdin-rank", "one", ECHO)
        self.assertEqual(res.code, USAGE, res)

    def test_a_breakpoint_without_a_terminal_points_at_stdin_rank(self):
        self.env.pop("PYTHONBREAKPOINT", None)  # 0 would make breakpoint() do nothing
        res = self.run_ddprun("--nproc-per-node", 2, BREAKPOINT)
        self.assertEqual(res.code, 1, res)
        err = res.stderr.decode()
        self.assertIn("root cause error (rank 1's stderr): bdb.BdbQuit\n", err, res)
        self.assertIn("ddprun: rank 1 stopped at a breakpoint and pdb quit at once: its stdin is /dev/null. To debug "
                      "it, run again with --stdin-rank 1, which gives ddprun's terminal to rank 1 alone", err, res)
        # Another rank had ddprun's stdin: the note says to stop on that rank only.
        res = self.run_ddprun("--nproc-per-node", 2, "--stdin-rank", 0, BREAKPOINT)
        self.assertEqual(res.code, 1, res)
        self.assertIn("Only rank 0 (--stdin-rank) reads ddprun's terminal: call breakpoint() on that rank only",
                      res.stderr.decode(), res)

    def test_local_rank_arg_goes_after_the_script_as_launch_put_it(self):
        res = self.run_ddprun("--nproc-per-node", 2, "--local-rank-arg", "underscore", ARGV, "--lr", "0.1")
        self.assertEqual(res.code, 0, res)
        for rank in (0, 1):
            self.assertEqual(self.argv_of(res, rank), [f"--local_rank={rank}", "--lr", "0.1"])
        res = self.run_ddprun("--nproc-per-node", 2, "--local-rank-arg", "dash", ARGV)
        self.assertEqual(self.argv_of(res, 1), ["--local-rank=1"])
        res = self.run_ddprun("--nproc-per-node", 2, ARGV, "x")  # the default: nothing added
        self.assertEqual(self.argv_of(res, 1), ["x"])

    def test_local_rank_arg_with_a_module(self):
        self.env["PYTHONPATH"] = HELPERS
        res = self.run_ddprun("--nproc-per-node", 1, "--local-rank-arg", "dash", "-m", "print_argv", "y")
        self.assertEqual(res.code, 0, res)
        self.assertEqual(self.argv_of(res, 0), ["--local-rank=0", "y"])

    def test_local_rank_arg_refuses_bad_values_and_use_env(self):
        res = self.run_ddprun("--nproc-per-node", 1, "--local-rank-arg", "camel", ARGV)
        self.assertEqual(res.code, USAGE, res)
        self.assertIn("--local-rank-arg 'camel': expected dash", res.stderr.decode(), res)
        res = self.run_ddprun("--nproc-per-node", 1, "--use-env", "--local-rank-arg", "dash", ARGV)
        self.assertEqual(res.code, USAGE, res)
        self.assertIn("--local-rank-arg and --use-env contradict", res.stderr.decode(), res)
        self.assertNotIn(b"argv", res.stdout)

    def test_a_launch_line_gives_each_rank_its_local_rank(self):
        # pytorch/examples' launch line (--local_rank defaults to 0) with ddprun-launch as its first word: each
        # rank gets its own local rank, where passing nothing would have given every rank 0.
        script = os.path.join(HELPERS, "launch_default.py")
        res = self.run_ddprun("--nnodes=1", "--nproc_per_node=2", script, "--local_world_size=2",
                              program=DDPRUN_LAUNCH)
        self.assertEqual(res.code, 0, res)
        out = res.stdout.decode()
        for rank in (0, 1):
            self.assertIn(f"[rank{rank}]: rank {rank} parsed local_rank {rank} LOCAL_RANK {rank}\n", out, res)
        err = res.stderr.decode()
        self.assertEqual(err.count("ddprun-launch: each worker gets --local_rank=<its local rank>"), 1, err)
        # --use-env: launch passed nothing, and neither does ddprun-launch.
        res = self.run_ddprun("--use_env", "--nproc_per_node=2", script, program=DDPRUN_LAUNCH)
        self.assertEqual(res.code, 0, res)
        self.assertIn("[rank1]: rank 1 parsed local_rank 0 LOCAL_RANK 1", res.stdout.decode())
        # The same line as torchrun's (ddprun): nothing, whatever the script declares, as torchrun.
        res = self.run_ddprun("--nproc_per_node=2", script)
        self.assertEqual(res.code, 0, res)
        self.assertIn("[rank1]: rank 1 parsed local_rank 0 LOCAL_RANK 1", res.stdout.decode())
        self.assertNotIn("--local_rank", res.stderr.decode())

    def test_a_torchrun_line_runs_whatever_the_script_text_declares(self):
        # Issue 34 and 54: a sub-parser's --local_rank, a chained add_parser(...).add_argument, the call in a
        # string or in a helper nobody calls made ddprun append --local_rank=N, and the main parser exited 2
        # where torchrun runs the line. ddprun passes nothing, as torchrun.
        for script, args, expected in (
                ("launch_subcommand.py", ["train"], ["[rank0]: train local_rank -1 LOCAL_RANK 0",
                                                     "[rank1]: train local_rank -1 LOCAL_RANK 1"]),
                ("launch_text_forms.py", ["--steps", "3"], ["[rank0]: mode None steps 3 LOCAL_RANK 0",
                                                            "[rank1]: mode None steps 3 LOCAL_RANK 1"])):
            with self.subTest(script=script):
                res = self.run_ddprun("--nproc-per-node", 2, os.path.join(HELPERS, script), *args)
                self.assertEqual(res.code, 0, res)
                self.assertEqual(sorted(res.stdout.decode().splitlines()), expected)
        # The same script under launch's name gets --local_rank=N, as under launch, and argparse refuses it:
        # the summary names what passes nothing.
        res = self.run_ddprun("--nproc-per-node", 2, os.path.join(HELPERS, "launch_text_forms.py"),
                              program=DDPRUN_LAUNCH)
        self.assertEqual(res.code, 2, res)
        self.assertIn("'s script does not take the --local_rank=N ddprun passed: --local-rank-arg dash passes "
                      "--local-rank=N instead, --local-rank-arg none passes nothing", res.stderr.decode(), res)

    def test_an_executable_python_script_runs_as_python_named_without_dot_slash_and_under_python_exec(self):
        """Issue 34: an executable '#!' Python script named without ./ was refused (127, "not found in PATH") where
        torchrun runs it with Python, and PYTHON_EXEC was silently ignored for one (its '#!' line ran instead). It is
        Python's now: PYTHON_EXEC when set, else the interpreter its '#!' line names."""
        work = self.path("work")
        os.mkdir(work)
        script = os.path.join(work, "train")
        with open(script, "w") as f:
            f.write("#!/usr/bin/env python3\nimport os, sys\nprint('train', os.environ['LOCAL_RANK'], sys.argv[1:])\n")
        os.chmod(script, 0o755)
        self.env.pop("PYTHON_EXEC", None)
        res = self.run_ddprun("--nproc-per-node", 1, "train", "x", cwd=work)
        self.assertEqual(res.code, 0, res)
        self.assertEqual(res.stdout.decode(), "[rank0]: train 0 ['x']\n")
        self.assertIn("(the script's '#!' line; PYTHON_EXEC unset)", res.stderr.decode())
        wrapper = self.path("python_exec")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\necho 'ran by PYTHON_EXEC' >&2\nexec {sys.executable} \"$@\"\n")
        os.chmod(wrapper, 0o755)
        self.env["PYTHON_EXEC"] = wrapper
        res = self.run_ddprun("--nproc-per-node", 1, script, "y")
        self.assertEqual(res.code, 0, res)
        self.assertEqual(res.stdout.decode(), "[rank0]: train 0 ['y']\n")
        self.assertIn("ran by PYTHON_EXEC", res.stderr.decode())
        # A shell script is no Python's: without ./ it is still looked up in PATH, with the advice.
        shell = os.path.join(work, "job.sh")
        with open(shell, "w") as f:
            f.write("#!/bin/sh\necho shell\n")
        os.chmod(shell, 0o755)
        res = self.run_ddprun("--nproc-per-node", 1, "job.sh", cwd=work)
        self.assertEqual(res.code, NOT_FOUND, res)
        self.assertIn("give ./job.sh", res.stderr.decode())

    def test_argparse_stopping_over_local_rank_names_the_switch(self):
        # A launch script (its parser in another file) on a torchrun line: nothing passed, argparse's exit 2, and
        # the summary names the switches.
        res = self.run_ddprun("--nproc-per-node", 2, os.path.join(HELPERS, "launch_imported_parser.py"))
        self.assertEqual(res.code, 2, res)
        err = res.stderr.decode()
        self.assertIn("'s script requires --local_rank, which torch.distributed.launch passed and torchrun does not: "
                      "start it as ddprun-launch (launch's behaviour), or give --local-rank-arg underscore, to pass "
                      "--local_rank=N to every worker", err, res)
        res = self.run_ddprun("--nproc-per-node", 2, os.path.join(HELPERS, "launch_imported_parser.py"),
                              program=DDPRUN_LAUNCH)
        self.assertEqual(res.code, 0, res)
        self.assertEqual(sorted(res.stdout.decode().splitlines()), ["[rank0]: local_rank 0", "[rank1]: local_rank 1"])
        res = self.run_ddprun("--nproc-per-node", 2, "--local-rank-arg", "underscore",
                              os.path.join(HELPERS, "launch_imported_parser.py"))
        self.assertEqual(res.code, 0, res)
        self.assertEqual(sorted(res.stdout.decode().splitlines()), ["[rank0]: local_rank 0", "[rank1]: local_rank 1"])
        # The wrong spelling given: argparse does not know it, and the summary offers the other one.
        res = self.run_ddprun("--nproc-per-node", 2, "--local-rank-arg", "dash",
                              os.path.join(HELPERS, "launch_default.py"))
        self.assertEqual(res.code, 2, res)
        self.assertIn("'s script does not take the --local-rank=N ddprun passed: --local-rank-arg underscore passes "
                      "--local_rank=N instead, --local-rank-arg none passes nothing", res.stderr.decode(), res)

    def test_a_python_worker_imports_the_heartbeat_helper_without_set_up(self):
        # build/share/ddprun/python holds the helper as <prefix>/share/ddprun/python does once installed; ddprun
        # finds it beside itself and adds it at the end of a Python worker's PYTHONPATH.
        helper_dir = os.path.realpath(os.path.join(os.path.dirname(DDPRUN), "..", "share", "ddprun", "python"))
        with open(os.path.join(helper_dir, "ddprun_heartbeat.py"), "rb") as copy, open(HEARTBEAT, "rb") as source:
            self.assertEqual(copy.read(), source.read(), "the build tree's copy is not the source's")
        script = self.path("beats.py")
        with open(script, "w") as f:
            f.write("import os, ddprun_heartbeat\nddprun_heartbeat.beat(1)\n"
                    "print(os.path.realpath(ddprun_heartbeat.__file__), os.environ['PYTHONPATH'])\n")
        self.env.pop("PYTHONPATH", None)
        res = self.run_ddprun("--nproc-per-node", 1, script)
        self.assertEqual(res.code, 0, res)
        self.assertEqual(res.stdout.decode(), f"[rank0]: {helper_dir}/ddprun_heartbeat.py {helper_dir}\n")
        # The user's PYTHONPATH stays first (a copy of their own there wins), the helper's directory after it.
        self.env["PYTHONPATH"] = self.tmp
        res = self.run_ddprun("--nproc-per-node", 1, script)
        self.assertEqual(res.code, 0, res)
        self.assertTrue(res.stdout.decode().endswith(f" {self.tmp}:{helper_dir}\n"), res)
        # A program that is not Python gets the environment as it was.
        del self.env["PYTHONPATH"]
        res = self.run_ddprun("--nproc-per-node", 1, "sh", "-c", 'echo "${PYTHONPATH-unset}"')
        self.assertEqual(res.stdout.decode(), "[rank0]: unset\n", res)

    def test_a_missing_module_at_start_up_names_the_interpreter(self):
        res = self.run_ddprun("--nproc-per-node", 2, MISSING)
        self.assertEqual(res.code, 1, res)
        err = res.stderr.decode()
        self.assertIn("root cause error (rank ", err, res)
        self.assertIn("'s stderr): ModuleNotFoundError: No module named 'ddprun_test_no_such_module'", err, res)
        self.assertIn(f" ran {sys.executable}", err, res)
        self.assertIn("(PYTHON_EXEC), which cannot import that module: name an interpreter that has it with "
                      "PYTHON_EXEC=/path/to/python, or activate its virtual environment", err, res)

    def test_an_exception_without_an_error_file_is_shown_from_stderr(self):
        events = self.path("events")
        res = self.run_ddprun("--nproc-per-node", 2, "--events-file", events, RAISES)
        self.assertEqual(res.code, 1, res)
        err = res.stderr.decode()
        summary = err[err.index("ddprun: job FAILED"):]
        self.assertIn("ddprun: root cause error (rank 1's stderr): RuntimeError: cannot read shard-7: header is "
                      "truncated\nddprun: root cause traceback (rank 1's stderr, last 4 of 4 frames):\n"
                      "ddprun: | Traceback (most recent call last):\n", summary, res)
        self.assertRegex(summary, r'ddprun: \|   File ".*raise_without_record.py", line \d+, in load\n'
                                  r'ddprun: \|     read_shard\(f"shard-\{epoch\}"\)\n')
        self.assertIn("ddprun: | RuntimeError: cannot read shard-7: header is truncated\n", summary, res)
        self.assertNotIn("cannot import that module", summary, res)
        tb = [e for e in self.events(events) if e["event"] == "summary"][-1]["root_cause"]["traceback"]
        self.assertEqual((tb["source"], tb["frames_total"], tb["start_kept"]), ("stderr", 4, True))
        self.assertEqual(tb["exception"], "RuntimeError: cannot read shard-7: header is truncated")

    def test_an_argparse_error_is_shown_as_the_last_line_on_stderr(self):
        res = self.run_ddprun("--nproc-per-node", 1, RAISES, "--argparse")
        self.assertEqual(res.code, 2, res)
        self.assertIn("ddprun: rank 0's last line on stderr: raise_without_record.py: error: the following arguments "
                      "are required: --lr\n", res.stderr.decode(), res)

    def test_a_module_python_m_cannot_find_names_the_interpreter_and_where_it_looked(self):
        # python -m prints one line of its own (no traceback) for a module it cannot find, a missing package
        # or a missing subpackage alike.
        for module, said in (("ddprun_test_no_such_module", "No module named ddprun_test_no_such_module"),
                             ("ddprun_test_no_such_package.train", "Error while finding module specification for "
                              "'ddprun_test_no_such_package.train' (ModuleNotFoundError: No module named "
                              "'ddprun_test_no_such_package')")):
            res = self.run_ddprun("--nproc-per-node", 1, "-m", module)
            self.assertEqual(res.code, 1, res)
            err = res.stderr.decode()
            self.assertIn(f"root cause error (rank 0's stderr): {sys.executable}: {said}\n", err, res)
            self.assertIn(f"rank 0 ran {sys.executable}", err, res)
            self.assertIn("(PYTHON_EXEC), which cannot find the module -m names: it looks in the working directory, "
                          "PYTHONPATH and its own site-packages", err, res)

    def test_the_interpreter_from_path_is_named_as_such(self):
        # A directory of our own on PATH holding "python3": what a pyenv or venv shim looks like to ddprun.
        bindir = self.path("bin")
        os.mkdir(bindir)
        os.symlink(sys.executable, os.path.join(bindir, "python3"))
        del self.env["PYTHON_EXEC"]
        self.env["PATH"] = bindir + os.pathsep + self.env.get("PATH", "")
        res = self.run_ddprun("--nproc-per-node", 1, MISSING)
        self.assertEqual(res.code, 1, res)
        err = res.stderr.decode()
        named = f"{bindir}/python3 ({os.path.realpath(sys.executable)})"
        self.assertIn(f"Python interpreter: {named} (python3 from PATH; PYTHON_EXEC unset)", err, res)
        self.assertIn(f"rank 0 ran {named} (python3 from PATH; PYTHON_EXEC unset), which cannot import", err, res)

    def test_a_program_that_is_not_python_gets_no_interpreter_note(self):
        res = self.run_ddprun("--nproc-per-node", 1, "/bin/sh", "-c", "echo 'ModuleNotFoundError: x' >&2; exit 1")
        self.assertEqual(res.code, 1, res)
        self.assertNotIn("Python interpreter", res.stderr.decode(), res)
        self.assertNotIn("cannot import that module", res.stderr.decode(), res)


@unittest.skipIf(torch_python() is None, NO_TORCH)
class LaunchStyleScript(DdprunTestCase):
    SCRIPT = os.path.join(EXAMPLES, "launch_style.py")

    def setUp(self):
        super().setUp()
        self.env["PYTHON_EXEC"] = torch_python()

    def test_a_script_given_as_a_pipe_reaches_python_whole(self):
        # `ddprun <(…)` or a FIFO: ddprun reads nothing of it (a reading of the script's text once emptied the
        # pipe, so Python got nothing to run).
        script = self.path("piped.py")
        os.mkfifo(script)

        def feed():
            with open(script, "w") as f:  # waits for the reader: Python
                f.write("print('from the pipe')\n")
        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        res = self.run_ddprun("--nproc-per-node", 1, script)
        if writer.is_alive():  # nobody opened it: unblock the writer, the assertion below says why
            os.close(os.open(script, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(timeout=5)
        self.assertEqual(res.code, 0, res)
        self.assertIn(b"from the pipe", res.stdout, res)

    def test_a_launch_line_runs_unchanged(self):
        # python -m torch.distributed.launch --nnodes=1 --nproc_per_node=2 launch_style.py, first words replaced.
        res = self.run_ddprun("--nnodes=1", "--nproc_per_node=2", self.SCRIPT, timeout=180, program=DDPRUN_LAUNCH)
        self.assertEqual(res.code, 0, res)
        out = res.stdout.decode()
        for rank in (0, 1):
            self.assertIn(f"rank {rank}: --local_rank={rank} LOCAL_RANK={rank} all_reduce total 9 (expected 9)", out)

    def test_a_launch_script_runs_with_local_rank_arg(self):
        res = self.run_ddprun("--nproc-per-node", 2, "--local-rank-arg", "underscore", self.SCRIPT, timeout=180)
        self.assertEqual(res.code, 0, res)
        out = res.stdout.decode()
        for rank in (0, 1):
            self.assertIn(f"rank {rank}: --local_rank={rank} LOCAL_RANK={rank} all_reduce total 9 (expected 9)", out)

    def test_a_launch_script_told_to_get_nothing_fails_as_argparse_says(self):
        res = self.run_ddprun("--nproc-per-node", 2, "--local-rank-arg", "none", self.SCRIPT, timeout=180)
        self.assertEqual(res.code, 2, res)  # argparse's exit code
        self.assertIn("the following arguments are required: --local_rank", res.stdout.decode() + res.stderr.decode())
        self.assertIn("--local-rank-arg underscore, to pass --local_rank=N", res.stderr.decode())


if __name__ == "__main__":
    unittest.main()
