"""The worker environment, as real workers see it (docs/ENVIRONMENT.md)."""
import os
import socket
import sys
import textwrap
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import DdprunTestCase, read_until
from ports import free_port
from python_env import NO_TORCH, torch_python

TORCH_PYTHON = torch_python()

CONTRACT = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
            "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
            "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING", "DDPRUN_AGENT_PID"]


class EnvContract(DdprunTestCase):
    def worker_envs(self, nproc, *extra):
        r = self.worker(*[f"env={v}" for v in CONTRACT], nproc=nproc, extra=extra)
        self.assertEqual(r.code, 0, r)
        envs = {}
        for line in r.stdout.decode().splitlines():
            prefix, _, kv = line.partition(": ")
            name, _, value = kv.partition("=")
            envs.setdefault(int(prefix[5:-1]), {})[name] = value
        return envs

    def test_every_worker_gets_the_torchrun_contract(self):
        envs = self.worker_envs(3, "--run-id", "job42", "--role", "trainer", "--master-port", "0")
        self.assertEqual(sorted(envs), [0, 1, 2])
        ports = {e["MASTER_PORT"] for e in envs.values()}
        self.assertEqual(len(ports), 1)
        self.assertTrue(1 <= int(ports.pop()) <= 65535)
        for rank, e in envs.items():
            self.assertEqual(e["RANK"], str(rank))
            self.assertEqual(e["LOCAL_RANK"], str(rank))
            self.assertEqual(e["ROLE_RANK"], str(rank))
            self.assertEqual(e["WORLD_SIZE"], "3")
            self.assertEqual(e["LOCAL_WORLD_SIZE"], "3")
            self.assertEqual(e["ROLE_WORLD_SIZE"], "3")
            self.assertEqual(e["GROUP_RANK"], "0")
            self.assertEqual(e["GROUP_WORLD_SIZE"], "1")
            self.assertEqual(e["ROLE_NAME"], "trainer")
            self.assertEqual(e["MASTER_ADDR"], "127.0.0.1")
            self.assertEqual(e["TORCHELASTIC_RESTART_COUNT"], "0")
            self.assertEqual(e["TORCHELASTIC_MAX_RESTARTS"], "0")
            self.assertEqual(e["TORCHELASTIC_RUN_ID"], "job42")
            self.assertTrue(e["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{rank}/error.json"))
            self.assertEqual(e["OMP_NUM_THREADS"], "1")
            self.assertEqual(e["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1")
            self.assertTrue(e["DDPRUN_AGENT_PID"].isdigit())

    def test_user_settings_of_omp_num_threads_win(self):
        self.env["OMP_NUM_THREADS"] = "4"
        envs = self.worker_envs(2)
        self.assertEqual({e["OMP_NUM_THREADS"] for e in envs.values()}, {"4"})

    def test_ddprun_says_once_why_it_sets_omp_num_threads(self):
        self.env.pop("OMP_NUM_THREADS", None)
        # Two rounds (a restart): still one line, said at start.
        r = self.worker("@1:exit=3", nproc=3, extra=("--max-restarts", "1"))
        self.assertEqual(r.code, 3, r)
        err = r.stderr.decode()
        self.assertEqual(err.count("OMP_NUM_THREADS is unset: each of the 3 workers gets OMP_NUM_THREADS=1"), 1, err)
        self.env["OMP_NUM_THREADS"] = "2"  # the user's value: nothing to say
        r = self.worker("print=x", nproc=3)
        self.assertEqual(r.code, 0, r)
        self.assertNotIn("OMP_NUM_THREADS", r.stderr.decode())
        del self.env["OMP_NUM_THREADS"]
        r = self.worker("print=x", nproc=1)  # one worker: ddprun sets nothing
        self.assertNotIn("OMP_NUM_THREADS", r.stderr.decode())

    def test_given_master_port_and_addr_are_passed(self):
        envs = self.worker_envs(2, "--master-addr", "localhost", "--master-port", "29517")
        self.assertEqual({e["MASTER_PORT"] for e in envs.values()}, {"29517"})
        self.assertEqual({e["MASTER_ADDR"] for e in envs.values()}, {"localhost"})

    def master_ports_per_round(self, *extra):
        # In round 0 rank 0 fails once both ranks have said their port (the ready files mark the first attempt);
        # round 1 ends.
        ready = self.path("ready")
        os.mkdir(ready)
        r = self.worker("env=MASTER_PORT", f"ready={ready}", f"@0:?{ready}/ready.0:waitfile={ready}/ready.1",
                        f"@0:?{ready}/ready.0:exit=1", nproc=2, extra=("--max-restarts", "1", *extra))
        self.assertEqual(r.code, 0, r)
        ports = [line.split("MASTER_PORT=")[1] for line in r.stdout.decode().splitlines() if "MASTER_PORT=" in line]
        self.assertEqual(len(ports), 4, r)
        self.assertEqual(len({ports[0], ports[1]}), 1, r)  # the ranks of a round agree
        return ports[0], ports[-1]

    def test_a_port_ddprun_picked_is_picked_afresh_for_every_round(self):
        # Another program may take the port between rounds (torchrun --standalone also picks anew): kept, every
        # later round of the job would fail in its store's bind.
        first, second = self.master_ports_per_round()
        self.assertNotEqual(first, second)
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
        if low - 20000 > 1000:  # outside the kernel's ephemeral range, where its own picks never land
            self.assertTrue(20000 <= int(first) < low and 20000 <= int(second) < low, (first, second))

    def test_a_port_the_user_gave_is_kept_for_every_round(self):
        port = str(free_port())
        self.assertEqual(self.master_ports_per_round("--master-port", port), (port, port))

    @unittest.skipIf(TORCH_PYTHON is None, NO_TORCH)
    def test_a_restart_whose_old_port_was_taken_meanwhile_still_forms_its_group(self):
        # Real gloo ranks: round 0 says its MASTER_PORT and waits; the test takes that port (another program
        # listening there), then round 0 fails. Round 1's rank 0 must host its store elsewhere: with the old port
        # kept, every later round failed in its bind ("Address already in use") until the restarts ran out.
        script = self.path("job.py")
        go = self.path("go")
        with open(script, "w") as f:
            f.write(textwrap.dedent(f'''
                import os, sys, time, torch, torch.distributed as dist
                if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
                    print("port", os.environ["MASTER_PORT"], flush=True)
                    while not os.path.exists({go!r}):
                        time.sleep(0.05)
                    sys.exit(1)
                dist.init_process_group("gloo")
                t = torch.ones(1)
                dist.all_reduce(t)
                print("formed on", os.environ["MASTER_PORT"], "sum", int(t.item()), flush=True)
            '''))
        self.env["PYTHON_EXEC"] = TORCH_PYTHON
        proc = self.start("--nproc-per-node", 2, "--max-restarts", 1, script)
        line = read_until(proc, b"", b"\n", "round 0's port")
        port = int(line.split(b"port ")[1].split()[0])
        with socket.socket() as thief:
            thief.bind(("0.0.0.0", port))
            thief.listen()
            with open(go, "w"):
                pass
            out, err = proc.communicate(timeout=120)
        text = (line + out).decode()
        self.assertEqual(proc.returncode, 0, text + err.decode())
        self.assertIn("formed on", text)
        self.assertNotIn(f"formed on {port} ", text)
        self.assertEqual(text.count("sum 2"), 2, text)

    def test_python_script_runs_unbuffered_under_python_exec(self):
        script = self.path("show.py")
        with open(script, "w") as f:
            f.write("import os, sys\nprint(os.environ['RANK'], int('-u' in sys.orig_argv), sys.argv[1:])\n")
        self.env["PYTHON_EXEC"] = sys.executable
        r = self.run_ddprun("--nproc-per-node", 2, script, "--lr", "0.1")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(sorted(r.stdout.decode().splitlines()),
                         ["[rank0]: 0 1 ['--lr', '0.1']", "[rank1]: 1 1 ['--lr', '0.1']"])

    def test_module_runs_with_dash_m(self):
        pkg = self.path("mymod.py")
        with open(pkg, "w") as f:
            f.write("import os\nprint('module', os.environ['LOCAL_RANK'])\n")
        self.env["PYTHON_EXEC"] = sys.executable
        self.env["PYTHONPATH"] = self.tmp
        r = self.run_ddprun("--nproc-per-node", 2, "-m", "mymod")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(sorted(r.stdout.decode().splitlines()), ["[rank0]: module 0", "[rank1]: module 1"])

    def test_no_python_executes_a_py_file_directly(self):
        script = self.path("run.py")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho direct $RANK\n")
        os.chmod(script, 0o755)
        r = self.run_ddprun("--nproc-per-node", 1, "--no-python", script)
        self.assertEqual(r.code, 0, r)
        self.assertEqual(r.stdout.decode(), "[rank0]: direct 0\n")

    def test_workers_start_with_stdin_at_dev_null(self):
        r = self.run_ddprun("--nproc-per-node", 1, "sh", "-c", "readlink /proc/self/fd/0")
        self.assertEqual(r.stdout.decode(), "[rank0]: /dev/null\n")
