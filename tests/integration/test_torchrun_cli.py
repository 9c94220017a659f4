"""torchrun command lines run unchanged under ddprun (docs/TORCHRUN.md): the real binary, real workers.

The full table of verdicts is tests/launcher/torchrun_test.cpp; this runs a few of each kind end to end:
accepted lines start the workers torchrun would start, refused ones print one line, exit 64 and start nothing.
"""
import os

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import NOT_EXECUTABLE, RDZV_REFUSED, USAGE
from harness import DdprunTestCase, WORKER
from ports import free_port


class TorchrunLines(DdprunTestCase):
    def setUp(self):
        super().setUp()
        for name in list(self.env):
            if name.startswith("PET_"):
                del self.env[name]  # the machine's own torchrun settings must not leak into these tests

    def lines(self, r):
        return sorted(line.split(": ", 1)[1] for line in r.stdout.decode().splitlines())

    def test_a_typical_torchrun_line(self):
        r = self.run_ddprun("--standalone", "--nnodes=1", "--nproc_per_node=2", "--start-method=spawn",
                            "--monitor_interval=0.1", "--max_restarts=0", "--rdzv-backend=c10d",
                            "--rdzv-conf=join_timeout=60,read_timeout=60", WORKER, "env=WORLD_SIZE")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(self.lines(r), ["WORLD_SIZE=2", "WORLD_SIZE=2"])

    def test_argparse_prefix(self):
        r = self.run_ddprun("--nproc", "3", WORKER, "env=LOCAL_WORLD_SIZE")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(self.lines(r), ["LOCAL_WORLD_SIZE=3"] * 3)

    def test_torch_distributed_launch_use_env(self):
        r = self.run_ddprun("--use_env", "--nproc_per_node=2", "--node_rank=0", "--master_addr=127.0.0.1", WORKER,
                            "env=LOCAL_RANK")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(self.lines(r), ["LOCAL_RANK=0", "LOCAL_RANK=1"])

    def test_pet_variables_configure_like_kubeflow_and_the_command_line_wins(self):
        self.env.update(PET_NPROC_PER_NODE="2", PET_NNODES="1", PET_MAX_RESTARTS="0", PET_RDZV_BACKEND="c10d")
        r = self.run_ddprun(WORKER, "env=WORLD_SIZE")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(self.lines(r), ["WORLD_SIZE=2"] * 2)
        r = self.run_ddprun("--nproc-per-node", "1", WORKER, "env=WORLD_SIZE")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(self.lines(r), ["WORLD_SIZE=1"])

    def test_run_path_runs_a_python_file_of_any_name(self):
        script = self.path("train")
        with open(script, "w") as f:
            f.write("import os\nprint('rank', os.environ['RANK'])\n")
        r = self.run_ddprun("--run-path", "--nproc-per-node", "2", script)
        self.assertEqual(r.code, 0, r)
        self.assertEqual(self.lines(r), ["rank 0", "rank 1"])

    def test_a_script_without_py_runs_under_python_and_programs_are_executed(self):
        def write(name, text, mode):
            with open(self.path(name), "w") as f:
                f.write(text)
            os.chmod(self.path(name), mode)
        python = "import os, sys\nprint('python', os.environ['RANK'], sys.argv[1])\n"
        write("train", python, 0o644)  # as torchrun: a file in the working directory, named without ./
        write("train_x", python, 0o755)  # executable, but no '#!' line: the kernel could not run it
        write("run", "#!/bin/sh\necho shell $RANK $1\n", 0o755)
        for program, lines in (("train", ["python 0 a", "python 1 a"]),
                               ("./train_x", ["python 0 a", "python 1 a"]),
                               ("./run", ["shell 0 a", "shell 1 a"])):
            r = self.run_ddprun("--nproc-per-node", "2", program, "a", cwd=self.tmp)
            self.assertEqual(r.code, 0, f"{program}: {r}")
            self.assertEqual(self.lines(r), lines, program)
        r = self.run_ddprun("--no-python", "./train_x", cwd=self.tmp)  # executed: the kernel refuses it
        self.assertEqual(r.code, NOT_EXECUTABLE, r)
        self.assertIn(b"Exec format error", r.stderr)

    def test_one_node_at_a_fixed_endpoint_keeps_the_default_run_id(self):
        endpoint = ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}"]
        go = self.path("go")
        first = self.start(*endpoint, "--nproc-per-node", "2", WORKER, f"ready={self.tmp}", f"waitfile={go}",
                           "env=TORCHELASTIC_RUN_ID")
        self.wait_for_files([self.path("ready.0"), self.path("ready.1")])
        # Why one node needs no id: a second job at the same endpoint, run "none" too, is refused, not merged.
        second = self.run_ddprun(*endpoint, WORKER, "exit=0")
        self.assertEqual(second.code, RDZV_REFUSED, second)
        self.assertIn(b"is closed", second.stderr)
        open(go, "w").close()
        out, err = first.communicate(timeout=60)
        self.assertEqual(first.returncode, 0, err)
        self.assertEqual(sorted(line.split(": ", 1)[1] for line in out.decode().splitlines()),
                         ["TORCHELASTIC_RUN_ID=none"] * 2)

    def test_start_method_is_noted_at_debug_level_only(self):
        r = self.run_ddprun("--start-method", "fork", WORKER, "exit=0")
        self.assertEqual(r.code, 0, r)
        self.assertNotIn(b"--start-method", r.stderr)
        r = self.run_ddprun("-v", "--start-method", "fork", WORKER, "exit=0")
        self.assertEqual(r.code, 0, r)
        self.assertIn(b"--start-method fork ignored", r.stderr)

    def test_workers_get_both_nccl_error_handling_names(self):
        r = self.run_ddprun(WORKER, "env=NCCL_ASYNC_ERROR_HANDLING", "env=TORCH_NCCL_ASYNC_ERROR_HANDLING")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(self.lines(r), ["NCCL_ASYNC_ERROR_HANDLING=1", "TORCH_NCCL_ASYNC_ERROR_HANDLING=1"])


class TorchrunRefusals(DdprunTestCase):
    def setUp(self):
        super().setUp()
        for name in list(self.env):
            if name.startswith("PET_"):
                del self.env[name]
        self.marker_dir = self.path("markers")
        os.mkdir(self.marker_dir)
        self.ok_worker = [WORKER, f"ready={self.marker_dir}"]  # would leave ready.N if it ever ran

    def refused(self, args, words):
        # The harness's check, as test_bad_input's: one line on stderr, exit 64, nothing on stdout, no worker, no file.
        self.assert_refused([*args, *self.ok_worker], USAGE, words)

    def test_logs_specs(self):
        self.refused(["--logs-specs", "mine"], ["torchrun's --logs-specs is not supported by ddprun", "--log-dir"])

    def test_unknown_rdzv_conf_key(self):
        self.refused(["--rdzv-conf", "store_type=file"], ["'store_type'", "join_timeout"])

    def test_gpu_without_a_gpu(self):
        self.env["CUDA_VISIBLE_DEVICES"] = ""
        self.refused(["--nproc-per-node", "gpu"], ["no CUDA device visible", "auto"])

    def test_ambiguous_prefix(self):
        self.refused(["--rdzv", "x"], ["ambiguous option --rdzv", "--rdzv-endpoint", "--rdzv-id"])

    def test_misspelling(self):
        self.refused(["--nprocs-per-node", "2"], ["did you mean --nproc-per-node?"])

    def test_bad_pet_variable_is_named(self):
        self.env["PET_NNODES"] = "many"
        self.refused([], ["PET_NNODES"])
