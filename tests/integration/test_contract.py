"""The job's contract (common/contract/worker_contract.hpp, dumped as JSON by tests/bin/contract_dump) against the
sides that cannot include it: the Python helper (python/ddprun_heartbeat.py: the variables it reads, the heartbeat
slot it writes, the error file it writes) and a real worker's environment."""
import json
import mmap
import os
import re
import socket
import subprocess
import sys
import time
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
import event_schema
from harness import DdprunTestCase

HERE = os.path.dirname(os.path.abspath(__file__))
HELPER = os.path.join(HERE, "../../python/ddprun_heartbeat.py")
CONTRACT_DUMP = os.environ.get("CONTRACT_DUMP", os.path.join(HERE, "../../build/tests/bin/contract_dump"))


def contract():
    return json.loads(subprocess.run([CONTRACT_DUMP], check=True, capture_output=True).stdout)


class Contract(DdprunTestCase):
    def setUp(self):
        super().setUp()
        self.c = contract()

    def test_every_variable_the_python_helper_reads_is_in_the_contract(self):
        with open(HELPER) as f:
            source = f.read()
        read = set(re.findall(r'os\.environ(?:\.get\(|\[)"([A-Z_]+)"', source))
        self.assertTrue(read, "the helper reads no variable: the pattern is out of date")
        self.assertEqual(read - set(self.c["worker_env"]), set())

    def test_the_python_helper_beats_and_declares_quiet_phases_in_the_contract_slot_layout(self):
        hb = self.c["heartbeat"]
        fd = os.memfd_create("contract-test")
        try:
            os.ftruncate(fd, 4096)
            slot = 3 * hb["slot_bytes"]  # local rank 3's slot
            code = (f"import sys, mmap, os; sys.path.insert(0, {os.path.dirname(HELPER)!r}); import ddprun_heartbeat; "
                    "ddprun_heartbeat.beat(41)\n"
                    f"page = mmap.mmap({fd}, 4096)\n"
                    f"q = lambda: str(int.from_bytes(page[{slot + hb['quiet_until_offset']}:"
                    f"{slot + hb['quiet_until_offset'] + 8}], sys.byteorder))\n"
                    "with ddprun_heartbeat.quiet(100):\n"
                    "    sys.stdout.write(q())\n"
                    "sys.stdout.write(' ' + q())\n")
            env = dict(os.environ, DDPRUN_HEARTBEAT_FD=str(fd), DDPRUN_HEARTBEAT_OFFSET=str(slot))
            before = time.monotonic_ns()
            inside, after_phase = map(int, subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                                          pass_fds=(fd,), capture_output=True).stdout.split())
            after = time.monotonic_ns()
            page = mmap.mmap(fd, 4096)
            step = int.from_bytes(page[slot + hb["step_offset"]:slot + hb["step_offset"] + 8], sys.byteorder, signed=True)
            stamp = int.from_bytes(page[slot + hb["time_offset"]:slot + hb["time_offset"] + 8], sys.byteorder, signed=True)
            quiet = hb["quiet_until_offset"]
            at_exit = int.from_bytes(page[slot + quiet:slot + quiet + 8], sys.byteorder, signed=True)
            page.close()
        finally:
            os.close(fd)
        self.assertEqual(step, 41)
        self.assertTrue(before <= stamp <= after, (before, stamp, after))  # the exit phase's beat
        # Inside the quiet phase, its end (now + 100 s) was at +16; after it, 0 again; at exit, the exit phase's end
        # (now + EXIT_QUIET_S).
        self.assertTrue(before + 100 * 10**9 <= inside <= after + 100 * 10**9, (before, inside, after))
        self.assertEqual(after_phase, 0)
        self.assertTrue(before + 30 * 10**9 <= at_exit <= after + 30 * 10**9, (before, at_exit, after))

    def test_the_python_helper_re_forms_in_place_in_the_contract_slot_layout(self):
        """offer_reforms() writes 1 at the taken offset; an announcement at the announced offset makes
        reform_pending() true; take_reform() reads DDPRUN_REFORM_FILE into os.environ, forgets the beat and writes
        announced + 1."""
        hb = self.c["heartbeat"]
        fd = os.memfd_create("contract-test")
        reform_file = os.path.join(self.tmp, "reform.env")
        with open(reform_file, "w") as f:
            f.write("RANK=5\nWORLD_SIZE=6\nMASTER_PORT=29999\n")
        try:
            os.ftruncate(fd, 4096)
            slot = 2 * hb["slot_bytes"]
            page = mmap.mmap(fd, 4096)
            announced, taken = slot + hb["reforms_announced_offset"], slot + hb["reforms_taken_offset"]
            code = (f"import sys, os, mmap; sys.path.insert(0, {os.path.dirname(HELPER)!r}); import ddprun_heartbeat as h\n"
                    "print(h.reform_pending(), h.offer_reforms(), h.reform_pending(), flush=True)\n"
                    "h.beat(7)\n"
                    "sys.stdin.readline()\n"  # the test announces re-form 1 meanwhile
                    "pending = h.reform_pending()\n"
                    "taken = h.take_reform(timeout=5, wait_for_master=False)\n"
                    f"beat_time = int.from_bytes(h._page[{slot + hb['time_offset']}:{slot + hb['time_offset'] + 8}], "
                    "sys.byteorder)\n"
                    "print(pending, taken, os.environ['RANK'], h.reform_pending(), beat_time, flush=True)\n")
            env = dict(os.environ, DDPRUN_HEARTBEAT_FD=str(fd), DDPRUN_HEARTBEAT_OFFSET=str(slot),
                       DDPRUN_REFORM_FILE=reform_file, RANK="1")
            p = subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=(fd,), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            self.assertEqual(p.stdout.readline(), "False True False\n")
            self.assertEqual(int.from_bytes(page[taken:taken + 8], sys.byteorder, signed=True), 1)
            page[announced:announced + 8] = (1).to_bytes(8, sys.byteorder, signed=True)
            out, _ = p.communicate("go\n", timeout=30)
            self.assertEqual(p.returncode, 0)
            # Taking the round up forgets the last round's beat (0 at the time offset).
            self.assertEqual(out, "True {'RANK': '5', 'WORLD_SIZE': '6', 'MASTER_PORT': '29999'} 5 False 0\n")
            self.assertEqual(int.from_bytes(page[taken:taken + 8], sys.byteorder, signed=True), 2)
            page.close()
        finally:
            os.close(fd)

    def test_a_lost_node_makes_the_python_helper_leave_its_group(self):
        """Issue 32, a frozen node: after offer_reforms(), ddprun's group-lost number at +48 (the next re-form's)
        makes the helper shut down the connections opened for the round's group (between the import and the
        first beat), so a collective waiting on the lost node fails. Left alone: a connection the program had
        before the import, the store's connection (MASTER_PORT) and a listening socket."""
        hb = self.c["heartbeat"]
        fd = os.memfd_create("contract-test")
        listeners = {name: socket.create_server(("127.0.0.1", 0)) for name in ("own", "peer", "store")}
        for lst in listeners.values():
            self.addCleanup(lst.close)
        port = {name: lst.getsockname()[1] for name, lst in listeners.items()}
        try:
            os.ftruncate(fd, 4096)
            slot = hb["slot_bytes"]
            page = mmap.mmap(fd, 4096)
            code = (f"import os, socket, sys; own = socket.create_connection(('127.0.0.1', {port['own']}))\n"
                    f"sys.path.insert(0, {os.path.dirname(HELPER)!r}); import ddprun_heartbeat as h\n"
                    f"peer = socket.create_connection(('127.0.0.1', {port['peer']}))\n"
                    f"store = socket.create_connection(('127.0.0.1', {port['store']}))\n"
                    "listening = socket.create_server(('127.0.0.1', 0))\n"
                    "print(h.offer_reforms(), flush=True); h.beat(0)\n"
                    "sys.stdin.readline()\n"  # the test's sides are accepted; it writes +48 next
                    "print(repr(peer.recv(10)), own.recv(10).decode(), store.recv(10).decode(), flush=True)\n"
                    "print(listening.getsockname()[1] > 0, flush=True)\n")
            env = dict(os.environ, DDPRUN_HEARTBEAT_FD=str(fd), DDPRUN_HEARTBEAT_OFFSET=str(slot),
                       DDPRUN_REFORM_FILE=self.path("reform.env"), MASTER_PORT=str(port["store"]))
            p = subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=(fd,), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.addCleanup(lambda: p.poll() is None and p.kill())
            self.assertEqual(p.stdout.readline(), "True\n")
            sides = {name: lst.accept()[0] for name, lst in listeners.items()}
            for side in sides.values():
                self.addCleanup(side.close)
            p.stdin.write("go\n")
            p.stdin.flush()
            lost = slot + hb["group_lost_offset"]
            page[lost:lost + 8] = (1).to_bytes(8, sys.byteorder, signed=True)  # re-form 1's old group lost a node
            sides["peer"].settimeout(30)
            self.assertEqual(sides["peer"].recv(10), b"", "the group's connection was not shut down")
            sides["own"].sendall(b"own")  # still open both ways: the process reads these after the peer's EOF
            sides["store"].sendall(b"store")
            out, err = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 0, err)
            self.assertEqual(out, "b'' own store\nTrue\n")
            self.assertIn("ddprun_heartbeat: a node of this round was lost: shutting down the 1 connections", err)
            page.close()
        finally:
            os.close(fd)

    def test_a_node_lost_before_the_rounds_first_beat_ends_the_wait_in_the_store(self):
        """Issue 32, goodput: a joiner lost while it started left the survivors waiting in init_process_group (in the
        store, for a peer that never came) until --term-timeout replaced them. Before the round's first beat, the
        helper also shuts this rank's client connections to the round's store (MASTER_PORT), so that wait fails;
        a store this rank hosts keeps its side: a connection it accepted still works both ways."""
        hb = self.c["heartbeat"]
        fd = os.memfd_create("contract-test")
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        try:
            os.ftruncate(fd, 4096)
            slot = hb["slot_bytes"]
            page = mmap.mmap(fd, 4096)
            code = (f"import os, socket, sys; sys.path.insert(0, {os.path.dirname(HELPER)!r}); import ddprun_heartbeat as h\n"
                    "srv = socket.create_server(('127.0.0.1', 0)); os.environ['MASTER_PORT'] = str(srv.getsockname()[1])\n"
                    "client = socket.create_connection(srv.getsockname()); own_side, _ = srv.accept()\n"
                    f"peer = socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}))\n"
                    "print(h.offer_reforms(), os.environ['MASTER_PORT'], flush=True)\n"  # no beat: the group is not up
                    "hosted, _ = srv.accept()\n"  # the test's connection to the store this rank hosts
                    "sys.stdin.readline()\n"
                    "print(repr(client.recv(10)), repr(peer.recv(10)), hosted.recv(10).decode(), flush=True)\n"
                    "hosted.sendall(b'ok')\n")
            env = dict(os.environ, DDPRUN_HEARTBEAT_FD=str(fd), DDPRUN_HEARTBEAT_OFFSET=str(slot),
                       DDPRUN_REFORM_FILE=self.path("reform.env"))
            p = subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=(fd,), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.addCleanup(lambda: p.poll() is None and p.kill())
            offered, store_port = p.stdout.readline().split()
            self.assertEqual(offered, "True")
            outside = socket.create_connection(("127.0.0.1", int(store_port)))
            self.addCleanup(outside.close)
            peer_side = listener.accept()[0]
            self.addCleanup(peer_side.close)
            p.stdin.write("go\n")
            p.stdin.flush()
            lost = slot + hb["group_lost_offset"]
            page[lost:lost + 8] = (1).to_bytes(8, sys.byteorder, signed=True)  # the round just taken lost a node
            peer_side.settimeout(30)
            self.assertEqual(peer_side.recv(10), b"", "the group's connection was not shut down")
            outside.sendall(b"store")
            outside.settimeout(30)
            self.assertEqual(outside.recv(10), b"ok", "the hosted store's side was shut down")
            out, err = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 0, err)
            self.assertEqual(out, "b'' b'' store\n")  # the store's client side shut, the group's too
            self.assertIn("ddprun_heartbeat: a node of this round was lost: shutting down the 2 connections", err)
            page.close()
        finally:
            os.close(fd)

    def test_the_python_helpers_error_file_has_the_contract_keys(self):
        keys = self.c["error_file"]
        path = os.path.join(self.tmp, "error.json")
        code = (f"import sys; sys.path.insert(0, {os.path.dirname(HELPER)!r}); import ddprun_heartbeat\n"
                "@ddprun_heartbeat.record\n"
                "def main():\n"
                "    raise RuntimeError('broken on purpose')\n"
                "main()\n")
        r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TORCHELASTIC_ERROR_FILE=path),
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1, r.stderr)
        with open(path) as f:
            data = json.load(f)
        self.assertEqual(set(data), {keys["message"]})
        message = data[keys["message"]]
        self.assertEqual(set(message), {keys["message"], keys["extra_info"]})
        self.assertEqual(message[keys["message"]], "RuntimeError: broken on purpose")
        self.assertEqual(set(message[keys["extra_info"]]), {keys["callstack"], keys["timestamp"]})

    def test_a_worker_under_ddprun_gets_exactly_the_contract(self):
        names = self.c["worker_env"] + self.c["never_in_worker_env"] + self.c["embedded_only"]
        r = self.worker(*[f"env={n}" for n in names], nproc=2, extra=("--hang-timeout", "30"))
        self.assertEqual(r.code, 0, r)
        seen = {}
        for line in r.stdout.decode().splitlines():
            prefix, _, kv = line.partition(": ")
            seen.setdefault(prefix, []).append(kv)
        self.assertEqual(len(seen), 2, r)
        absent = set(self.c["never_in_worker_env"] + self.c["embedded_only"] + ["DDPRUN_CONSOLE_TTY"])  # not a tty here
        for lines in seen.values():
            for n, kv in zip(names, lines):
                if n in absent:
                    self.assertEqual(kv, f"{n} unset")
                else:
                    self.assertTrue(kv.startswith(f"{n}="), kv)

    def test_the_flight_recorder_variables_point_into_each_workers_private_directory(self):
        fr = self.c["flight_recorder"]
        names = [fr["pipe_file"], fr["dump_file"], fr["buffer_size"], fr["dump_on_timeout"], "DDPRUN_STACKS_FILE",
                 fr["newer_dump_file"], fr["newer_buffer_size"]]
        r = self.worker(*[f"env={n}" for n in names], nproc=2, extra=("--hang-timeout", "30"))
        self.assertEqual(r.code, 0, r)
        for rank in (0, 1):
            got = dict(line.split(": ", 1)[1].split("=", 1) for line in r.stdout.decode().splitlines()
                       if line.startswith(f"[rank{rank}]") and "=" in line)
            prefix = os.path.join(os.path.dirname(got["DDPRUN_STACKS_FILE"]), "nccl_trace_rank_")
            self.assertEqual(got[fr["pipe_file"]], prefix)  # torch makes <prefix><RANK>.pipe there
            self.assertEqual(got[fr["dump_file"]], prefix)  # and dumps to <prefix><RANK>
            self.assertEqual(got[fr["buffer_size"]], fr["entries"])
            self.assertEqual(got[fr["dump_on_timeout"]], "1")
            self.assertNotIn(fr["newer_dump_file"], got)  # read from the user, never set by ddprun
            self.assertNotIn(fr["newer_buffer_size"], got)
        # The user's own values are kept, under either of torch's names.
        self.env.update({fr["pipe_file"]: "/mine/p_", fr["newer_dump_file"]: "/mine/d_", fr["buffer_size"]: "0",
                         fr["dump_on_timeout"]: "0"})
        r = self.worker(*[f"env={n}" for n in names[:4]], "env=" + fr["newer_dump_file"], nproc=1,
                        extra=("--hang-timeout", "30"))
        out = r.stdout.decode()
        for kv in ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/mine/p_", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE unset",
                   "TORCH_FR_DUMP_TEMP_FILE=/mine/d_", "TORCH_NCCL_TRACE_BUFFER_SIZE=0", "TORCH_NCCL_DUMP_ON_TIMEOUT=0"):
            self.assertIn(kv, out)

    def test_the_error_file_keys_are_torchelastics(self):
        # What torch's @record writes (torch/distributed/elastic/multiprocessing/errors): the contract must not drift.
        self.assertEqual(self.c["error_file"], {"message": "message", "extra_info": "extraInfo",
                                                "callstack": "py_callstack", "timestamp": "timestamp"})

    def test_every_kind_of_event_is_built_to_the_schema(self):
        # One constructor per kind (agent/event_kinds.hpp): a sample of each, against docs/events.schema.json; a
        # kind the schema declares that no constructor builds, or one built that it does not declare, fails.
        out = subprocess.run([CONTRACT_DUMP, "--events"], check=True, capture_output=True, text=True).stdout
        events = [json.loads(line) for line in out.splitlines()]
        event_schema.check(events, "agent/event_kinds.hpp")
        self.assertEqual(sorted(e["event"] for e in events), sorted(event_schema.KINDS))


if __name__ == "__main__":
    unittest.main()
