"""Output forwarding: complete, whole lines, prefixed, nothing lost at teardown; log files."""
import os
import socket

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import DdprunTestCase


class Forwarding(DdprunTestCase):
    def test_every_line_arrives_whole_and_in_order_per_rank(self):
        n = 20000
        r = self.worker(f"lines={n}", nproc=4)
        self.assertEqual(r.code, 0, r)
        per_rank = {i: [] for i in range(4)}
        for line in r.stdout.decode().splitlines():
            prefix, _, rest = line.partition(": ")
            rank = int(prefix[len("[rank"):-1])
            self.assertEqual(rest, f"rank {rank} line {len(per_rank[rank])}", "a line was mixed or reordered")
            per_rank[rank].append(rest)
        for rank in range(4):
            self.assertEqual(len(per_rank[rank]), n, f"rank {rank} lost lines")

    def test_output_written_just_before_a_failure_is_not_lost(self):
        # Rank 1 fails only once every rank has written its lines, so all of them were written before
        # the failure; then the teardown must not lose what sits in the pipes.
        ready = [self.path(f"ready.{i}") for i in range(3)]
        r = self.worker("lines=5000", f"ready={self.tmp}", *[f"@1:waitfile={p}" for p in ready], "@1:exit=3", "hang",
                        nproc=3)
        self.assertEqual(r.code, 3, r)
        lines = r.stdout.decode().splitlines()
        for rank in range(3):
            self.assertEqual(sum(1 for l in lines if l.startswith(f"[rank{rank}]: ")), 5000, f"rank {rank}")

    def test_stderr_goes_to_stderr_and_stdout_to_stdout(self):
        r = self.worker("print=out", "eprint=err", nproc=1)
        self.assertEqual(r.stdout.decode(), "[rank0]: out\n")
        self.assertIn("[rank0]: err\n", r.stderr.decode())

    def test_partial_last_line_is_passed_through_with_a_newline(self):
        r = self.worker("partial=no newline at the end", nproc=2)
        lines = sorted(r.stdout.decode().splitlines())
        self.assertEqual(lines, ["[rank0]: no newline at the end", "[rank1]: no newline at the end"])

    def test_without_a_prefix_lines_stay_whole_and_in_order(self):
        # --no-prefix frames in the read buffer itself (LineFramer::frame_in_place): a line cut by a read is
        # held back and sent whole with the next one, never mixed with another rank's.
        n = 200000
        r = self.worker(f"lines={n}", nproc=3, extra=("--no-prefix",))
        self.assertEqual(r.code, 0, r)
        per_rank = {i: 0 for i in range(3)}
        for line in r.stdout.decode().splitlines():
            rank = int(line.split()[1])
            self.assertEqual(line, f"rank {rank} line {per_rank[rank]}", "a line was mixed or reordered")
            per_rank[rank] += 1
        self.assertEqual(per_rank, {i: n for i in range(3)})

    def test_binary_output_passes_through_byte_for_byte(self):
        r = self.worker("binary=4", nproc=1, extra=("--no-prefix",))
        expected = bytes(range(256)) * 4
        # A '\n' is added after the partial last line; prefix insertion is off.
        self.assertEqual(r.stdout, expected + b"\n")

    def test_prefix_is_configurable(self):
        r = self.worker("print=x", nproc=2, extra=("--prefix", "<{role}:{local_rank}/{rank}> ", "--role", "trainer"))
        self.assertEqual(sorted(r.stdout.decode().splitlines()), ["<trainer:0/0> x", "<trainer:1/1> x"])

    def test_prefix_names_the_host(self):
        # {host} is the host name ddprun gives everywhere else (the summary's "host ..."): gethostname().
        r = self.worker("print=x", nproc=2, extra=("--prefix", "{host}/{node_rank}/{rank}| "))
        self.assertEqual(r.code, 0, r)
        host = socket.gethostname()
        self.assertEqual(sorted(r.stdout.decode().splitlines()), [f"{host}/0/0| x", f"{host}/0/1| x"])

    def test_local_ranks_filter_shows_only_those_ranks(self):
        r = self.worker("print=x", nproc=3, extra=("--local-ranks-filter", "0,2"))
        self.assertEqual(sorted(r.stdout.decode().splitlines()), ["[rank0]: x", "[rank2]: x"])


class LogFiles(DdprunTestCase):
    def run_dir(self, log_dir):
        entries = os.listdir(log_dir)
        self.assertEqual(len(entries), 1, entries)
        self.assertTrue(entries[0].startswith("myjob_"), entries)
        return os.path.join(log_dir, entries[0])

    def test_tee_keeps_per_rank_files_and_shows_the_console(self):
        log_dir = self.path("logs")
        r = self.worker("print=hello", "eprint=oops", nproc=2,
                        extra=("--log-dir", log_dir, "--tee", "3", "--run-id", "myjob"))
        self.assertEqual(r.code, 0, r)
        self.assertEqual(len(r.stdout.decode().splitlines()), 2)
        root = self.run_dir(log_dir)
        for lr in range(2):
            with open(os.path.join(root, "attempt_0", str(lr), "stdout.log")) as f:
                self.assertEqual(f.read(), "hello\n")
            with open(os.path.join(root, "attempt_0", str(lr), "stderr.log")) as f:
                self.assertEqual(f.read(), "oops\n")

    def test_a_teed_flood_is_kept_byte_for_byte_and_shown_prefixed(self):
        log_dir = self.path("logs")
        n = 150000
        r = self.worker(f"lines={n}", "partial=end", nproc=2,
                        extra=("--log-dir", log_dir, "--tee", "1", "--run-id", "myjob"))
        self.assertEqual(r.code, 0, r)
        root = self.run_dir(log_dir)
        for lr in range(2):
            want = "".join(f"rank {lr} line {i}\n" for i in range(n)) + "end"
            with open(os.path.join(root, "attempt_0", str(lr), "stdout.log")) as f:
                self.assertEqual(f.read(), want, f"rank {lr}'s file")
            shown = [l for l in r.stdout.decode().splitlines() if l.startswith(f"[rank{lr}]: ")]
            self.assertEqual(shown, [f"[rank{lr}]: {l}" for l in want.split("\n")], f"rank {lr}'s console lines")

    def test_redirects_send_streams_to_files_only(self):
        log_dir = self.path("logs")
        r = self.worker("print=hello", "eprint=oops", nproc=2,
                        extra=("--log-dir", log_dir, "--redirects", "0:1", "--run-id", "myjob"))
        self.assertEqual(r.code, 0, r)
        self.assertEqual(r.stdout.decode().splitlines(), ["[rank1]: hello"])
        root = self.run_dir(log_dir)
        with open(os.path.join(root, "attempt_0", "0", "stdout.log")) as f:
            self.assertEqual(f.read(), "hello\n")
        self.assertFalse(os.path.exists(os.path.join(root, "attempt_0", "1", "stdout.log")))

    def test_error_files_live_in_the_log_dir_when_given(self):
        log_dir = self.path("logs")
        r = self.worker("@0:errorfile=RuntimeError: x", "@0:exit=1", "hang", nproc=2,
                        extra=("--log-dir", log_dir, "--run-id", "myjob"))
        self.assertEqual(r.code, 1, r)
        root = self.run_dir(log_dir)
        self.assertTrue(os.path.exists(os.path.join(root, "attempt_0", "0", "error.json")))
        self.assertIn(f"logs in {root}", r.stderr.decode())

    def test_temporary_error_file_directory_is_removed(self):
        self.env["TMPDIR"] = self.path("tmp")
        os.mkdir(self.env["TMPDIR"])
        r = self.worker("env=TORCHELASTIC_ERROR_FILE", nproc=1)
        self.assertEqual(r.code, 0, r)
        path = r.stdout.decode().split("=", 1)[1].strip()
        self.assertTrue(path.startswith(self.env["TMPDIR"]), path)
        self.assertEqual(os.listdir(self.env["TMPDIR"]), [])

    def test_without_tmpdir_the_run_directory_is_on_a_ram_file_system(self):
        if not os.access("/dev/shm", os.W_OK):
            self.skipTest("/dev/shm is not writable here")
        self.env.pop("TMPDIR")
        self.env.pop("XDG_RUNTIME_DIR", None)
        r = self.worker("env=TORCHELASTIC_ERROR_FILE", nproc=1)
        self.assertEqual(r.code, 0, r)
        path = r.stdout.decode().split("=", 1)[1].strip()
        self.assertTrue(path.startswith("/dev/shm/ddprun-none_"), path)
        self.assertFalse(os.path.exists(path.split("/attempt_")[0]), "the run directory was not removed")
