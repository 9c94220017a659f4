"""Bad input: one clear line on stderr, a documented exit code, and nothing started or created."""
import os
import socket

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import CANT_CREATE, NOT_EXECUTABLE, NOT_FOUND, UNAVAILABLE, USAGE
from harness import DdprunTestCase, WORKER


class BadInput(DdprunTestCase):
    def setUp(self):
        super().setUp()
        self.marker_dir = self.path("markers")
        os.mkdir(self.marker_dir)
        self.ok_worker = [WORKER, f"ready={self.marker_dir}"]  # would leave ready.N if it ever ran

    def refused(self, args, code, words, cwd=None):
        self.assert_refused(args, code, words, cwd=cwd)

    def test_nproc_zero(self):
        self.refused(["--nproc-per-node", "0", *self.ok_worker], USAGE, ["--nproc-per-node", "between 1"])

    def test_nproc_negative(self):
        self.refused(["--nproc-per-node", "-3", *self.ok_worker], USAGE, ["--nproc-per-node"])

    def test_nproc_not_a_number(self):
        self.refused(["--nproc-per-node", "four", *self.ok_worker], USAGE,
                     ["a number of workers", "auto, gpu, cpu", "four"])

    def test_nproc_huge(self):
        self.refused(["--nproc-per-node", "100000", *self.ok_worker], USAGE, ["--nproc-per-node"])

    def test_missing_program(self):
        self.refused(["--nproc-per-node", "2"], USAGE, ["no program"])

    def test_program_not_found(self):
        self.refused(["no-such-program-4711"], NOT_FOUND, ["not found", "no-such-program-4711"])

    def test_program_path_not_found(self):
        self.refused([self.path("nothing/here")], NOT_FOUND, ["not found"])

    def test_program_not_executable(self):
        p = self.path("plain")
        with open(p, "w") as f:
            f.write("echo hi\n")
        os.chmod(p, 0o644)
        # Without --no-python such a file is a Python script (test_torchrun_cli).
        self.refused(["--no-python", p], NOT_EXECUTABLE, ["not executable"])

    def test_program_in_the_working_directory_without_a_slash(self):
        # An executable '#!' script is a program, and a bare name is looked up in PATH as a shell does.
        with open(self.path("run"), "w") as f:
            f.write("#!/bin/sh\necho hi\n")
        os.chmod(self.path("run"), 0o755)
        self.refused(["run"], NOT_FOUND, ["'run' not found in PATH", "give ./run"], cwd=self.tmp)

    def test_program_is_a_directory(self):
        self.refused([self.marker_dir], NOT_EXECUTABLE, ["is a directory"])

    def test_python_script_not_found(self):
        self.refused([self.path("train.py")], NOT_FOUND, ["script", "not found"])

    def test_python_interpreter_not_found(self):
        script = self.path("train.py")
        with open(script, "w") as f:
            f.write("print(1)\n")
        self.env["PYTHON_EXEC"] = "/nonexistent/python"
        self.refused([script], NOT_FOUND, ["PYTHON_EXEC"])

    def test_module_with_no_python(self):
        self.refused(["-m", "--no-python", "json.tool"], USAGE, ["contradict"])

    def test_unknown_option(self):
        self.refused(["--nproc-per-nodes", "2", *self.ok_worker], USAGE, ["--nproc-per-nodes"])

    def test_option_without_value(self):
        self.refused(["--nproc-per-node"], USAGE, ["--nproc-per-node"])

    def test_option_followed_by_an_option(self):
        # Run in self.tmp, whose listing refused() compares: no directory named "--standalone" may appear.
        worker = [os.path.abspath(WORKER), f"ready={self.marker_dir}"]
        self.refused(["--log-dir", "--standalone", *worker], USAGE,
                     ["--log-dir expects a value", "the option --standalone", "--log-dir=VALUE"], cwd=self.tmp)
        # The prefix --std is --stdin-rank: the "1" meant for --nproc_per_node is not taken for the program.
        self.refused(["--std", "--nproc_per_node", "1", *worker], USAGE,
                     ["--std (--stdin-rank) expects a value", "--nproc_per_node"], cwd=self.tmp)

    def test_standalone_with_two_nodes(self):
        self.refused(["--standalone", "--nnodes", "2", *self.ok_worker], USAGE, ["--standalone"])

    def test_multi_node_needs_an_address(self):
        self.refused(["--nnodes", "2", *self.ok_worker], USAGE, ["--master-addr", "--rdzv-endpoint"])

    def test_multi_node_node_rank_out_of_range(self):
        self.refused(["--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1", *self.ok_worker], USAGE,
                     ["--node-rank", "between 0 and 1"])

    def test_dynamic_needs_an_id(self):
        self.refused(["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1234", *self.ok_worker], USAGE,
                     ["--rdzv-id"])

    def test_dynamic_with_node_rank(self):
        self.refused(["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1234", "--rdzv-id", "j", "--node-rank", "1",
                      *self.ok_worker], USAGE, ["--node-rank"])

    def test_bad_endpoint(self):
        self.refused(["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:http", "--rdzv-id", "j", *self.ok_worker],
                     USAGE, ["--rdzv-endpoint"])

    def test_unreadable_token_file(self):
        self.refused(["--rdzv-token-file", self.path("no-such-token"), *self.ok_worker], 66,
                     ["--rdzv-token-file"])

    def test_heartbeat_timeout_not_above_interval(self):
        self.refused(["--heartbeat-interval", "2", "--heartbeat-timeout", "1", *self.ok_worker], USAGE,
                     ["--heartbeat-timeout"])

    def test_elastic_nnodes_without_an_endpoint(self):
        self.refused(["--nnodes", "1:4", *self.ok_worker], USAGE, ["elastic node count needs --rdzv-endpoint"])

    def test_join_policy_unknown(self):
        self.refused(["--nnodes", "1:3", "--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-id", "j", "--rdzv-conf",
                      "join_policy=later", *self.ok_worker], USAGE,
                     ["--rdzv-conf join_policy 'later'", "expected now or at_failure"])

    def test_join_min_interval_with_at_failure(self):
        self.refused(["--nnodes", "1:3", "--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-id", "j", "--rdzv-conf",
                      "join_policy=at_failure,join_min_interval=60", *self.ok_worker], USAGE,
                     ["join_min_interval applies to join_policy now"])

    def test_node_rank_out_of_range(self):
        self.refused(["--node-rank", "1", *self.ok_worker], USAGE, ["--node-rank"])

    def test_port_out_of_range(self):
        self.refused(["--master-port", "65536", *self.ok_worker], USAGE, ["--master-port"])

    def test_port_not_a_number(self):
        self.refused(["--master-port", "http", *self.ok_worker], USAGE, ["--master-port"])

    def test_port_in_use(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            self.refused(["--master-port", str(port), *self.ok_worker], UNAVAILABLE,
                         [f"--master-port {port} is not available"])

    def test_unwritable_log_dir(self):
        parent = self.path("readonly")
        os.mkdir(parent)
        os.chmod(parent, 0o555)
        if os.access(parent, os.W_OK):  # root ignores permissions: use a path under a file instead
            os.chmod(parent, 0o755)
            os.rmdir(parent)
            with open(parent, "w") as f:
                f.write("x")
        self.refused(["--log-dir", os.path.join(parent, "logs"), *self.ok_worker], CANT_CREATE, ["--log-dir"])

    def test_log_dir_is_a_file(self):
        p = self.path("file")
        with open(p, "w") as f:
            f.write("x")
        self.refused(["--log-dir", p, *self.ok_worker], CANT_CREATE, ["not a directory"])

    def test_events_file_in_missing_directory(self):
        self.refused(["--events-file", self.path("no/such/dir/ev.jsonl"), *self.ok_worker], CANT_CREATE,
                     ["--events-file"])

    def test_events_file_is_a_directory(self):
        self.refused(["--events-file", self.marker_dir, *self.ok_worker], CANT_CREATE, ["is a directory"])

    def test_log_dir_and_events_file_on_kernel_file_systems(self):
        # /proc and /sys accept no new files, whatever the permission bits say (root included): still 73.
        for args in (["--log-dir", "/proc/ddprun-x"], ["--log-dir", "/sys/ddprun-x"],
                     ["--events-file", "/sys/ddprun-x"], ["--events-file", "/proc/ddprun-x"]):
            self.refused([*args, *self.ok_worker], CANT_CREATE, [args[1]])

    def test_term_timeout_negative(self):
        self.refused(["--term-timeout", "-5", *self.ok_worker], USAGE, ["--term-timeout"])

    def test_term_timeout_garbage(self):
        self.refused(["--term-timeout", "soon", *self.ok_worker], USAGE, ["--term-timeout"])

    def test_monitor_interval_garbage(self):
        self.refused(["--monitor-interval", "x", *self.ok_worker], USAGE, ["--monitor-interval"])

    def test_redirects_bad_value(self):
        self.refused(["--redirects", "7", "--log-dir", self.path("l"), *self.ok_worker], USAGE, ["--redirects"])

    def test_tee_rank_out_of_range(self):
        self.refused(["--nproc-per-node", "2", "--tee", "5:3", "--log-dir", self.path("l"), *self.ok_worker],
                     USAGE, ["--tee", "out of range"])

    def test_tee_without_log_dir(self):
        self.refused(["--tee", "3", *self.ok_worker], USAGE, ["--log-dir"])

    def test_local_ranks_filter_out_of_range(self):
        self.refused(["--nproc-per-node", "2", "--local-ranks-filter", "2", *self.ok_worker], USAGE,
                     ["--local-ranks-filter"])

    def test_run_id_with_a_slash(self):
        self.refused(["--run-id", "a/b", *self.ok_worker], USAGE, ["--run-id"])

    def test_empty_role(self):
        self.refused(["--role", "", *self.ok_worker], USAGE, ["--role"])

    def test_bad_prefix_placeholder(self):
        self.refused(["--prefix", "[{hostname}]", *self.ok_worker], USAGE, ["--prefix"])

    def test_bad_log_level(self):
        self.refused(["--log-level", "loud", *self.ok_worker], USAGE, ["--log-level"])

    def test_bad_log_level_in_environment(self):
        self.env["DDPRUN_LOG_LEVEL"] = "loud"
        self.refused([*self.ok_worker], USAGE, ["DDPRUN_LOG_LEVEL"])

    def test_bad_master_addr(self):
        self.refused(["--master-addr", "two words", *self.ok_worker], USAGE, ["--master-addr"])


class GoodInputEdges(DdprunTestCase):
    def test_help_and_version_exit_zero(self):
        r = self.run_ddprun("--help")
        self.assertEqual(r.code, 0)
        self.assertIn(b"--nproc-per-node", r.stdout)
        self.assertIn(b"event-driven", r.stdout.replace(b"\n", b" ").replace(b"  ", b" ") + b"event-driven")
        r = self.run_ddprun("--version")
        self.assertEqual(r.code, 0)
        self.assertTrue(r.stdout.startswith(b"ddprun "))

    def test_success_line_counts_its_workers(self):
        r = self.run_ddprun(WORKER, "exit=0")
        self.assertEqual(r.code, 0, r)
        self.assertIn(b"the worker succeeded in ", r.stderr)
        self.assertNotIn(b"all 1 workers", r.stderr)
        r = self.run_ddprun("--nproc-per-node", "2", WORKER, "exit=0")
        self.assertEqual(r.code, 0, r)
        self.assertIn(b"all 2 workers succeeded in ", r.stderr)

    def test_value_starting_with_a_dash_glued_on(self):
        r = self.run_ddprun("--prefix=-{rank}- ", WORKER, "env=RANK")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(r.stdout, b"-0- RANK=0\n")

    def test_nproc_cpu_uses_the_usable_cpus(self):
        r = self.run_ddprun("--nproc-per-node", "cpu", WORKER, "env=LOCAL_WORLD_SIZE")
        self.assertEqual(r.code, 0, r)
        n = len(os.sched_getaffinity(0))
        self.assertEqual(len(r.stdout.splitlines()), n)

    def test_nproc_auto_without_gpus_falls_back_to_cpus_with_a_note(self):
        self.env["CUDA_VISIBLE_DEVICES"] = ""  # gpu without GPUs is refused, as torchrun does (test_torchrun_cli)
        r = self.run_ddprun("--nproc-per-node", "auto", WORKER, "env=LOCAL_WORLD_SIZE")
        self.assertEqual(r.code, 0, r)
        self.assertIn(b"no CUDA device visible", r.stderr)
        self.assertEqual(len(r.stdout.splitlines()), len(os.sched_getaffinity(0)))
