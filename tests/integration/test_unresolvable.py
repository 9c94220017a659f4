"""A rendezvous host that does not resolve (a typo, a misread node list) is said at once, at the default log
level, naming the host and the option to fix it, once; ddprun still retries until --rdzv-timeout (the name may
yet resolve) and then exits 75, the rendezvous timeout's code (docs/MULTINODE.md), at the deadline: the last
back-off wait is cut to it (rendezvous/client.cpp), not given up one back-off step early."""
import os
import select
import signal
import time

import subprocess

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import RDZV_TIMEOUT as TIMEOUT  # RDZV_TIMEOUT here: the seconds it is given
from harness import DDPRUN, DdprunTestCase, WORKER

HOST = "no-such-node.invalid"  # RFC 6761: never resolves
RDZV_TIMEOUT = 3


class UnresolvableHost(DdprunTestCase):
    def test_said_at_once_and_once_then_the_rendezvous_timeout(self):
        self.env["DDPRUN_TOKEN"] = "test-token"
        t0 = time.monotonic()
        proc = self.start("--nnodes", 2, "--node-rank", 1, "--master-addr", HOST, "--rdzv-timeout", RDZV_TIMEOUT,
                          "--nproc-per-node", 1, WORKER, "exit=0")
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        # Plain os.read on the pipe as it comes: the warning must not wait for the deadline.
        err, said_at = b"", None
        while said_at is None and time.monotonic() - t0 < RDZV_TIMEOUT + 5:
            if not select.select([proc.stderr], [], [], 0.05)[0]:
                continue
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                break
            err += chunk
            if HOST.encode() in err and b"--master-addr" in err:
                said_at = time.monotonic() - t0
        self.assertIsNotNone(said_at, err)
        self.assertLess(said_at, 1.0, err)
        out, rest = proc.communicate(timeout=RDZV_TIMEOUT + 10)
        elapsed = time.monotonic() - t0
        err = (err + rest).decode()
        self.assertEqual(proc.returncode, TIMEOUT, (out, err))
        self.assertGreaterEqual(elapsed, RDZV_TIMEOUT - 0.1, err)
        self.assertLess(elapsed, RDZV_TIMEOUT + 1, err)
        warnings = [line for line in err.splitlines() if f'cannot resolve the rendezvous host "{HOST}"' in line]
        self.assertEqual(len(warnings), 1, err)
        self.assertIn("--master-addr", warnings[0])
        # Issue 54: the end said "the server has not answered": no server was ever asked, the name is the cause.
        root = [line for line in err.splitlines() if "root cause" in line]
        self.assertEqual(len(root), 1, err)
        self.assertIn(f'could not resolve the rendezvous host "{HOST}" within {RDZV_TIMEOUT}.0 s (--rdzv-timeout)',
                      root[0])
        self.assertNotIn("has not answered", err)


class FakeDns:
    """A name server on 127.0.0.1:53 that answers 'no such name' (NXDOMAIN) for `answer_for` seconds, then
    never again: a DNS that fails, then stops answering (glibc then waits its time-out on each look-up)."""

    def __init__(self, answer_for):
        import socket
        import threading
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 53))
        self.until = time.monotonic() + answer_for
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        self.sock.settimeout(0.1)
        while not self.stop:
            try:
                query, peer = self.sock.recvfrom(4096)
            except OSError:
                continue
            if time.monotonic() < self.until and len(query) >= 12:
                # Same id and question; QR, RD, RA set; rcode 3 (NXDOMAIN); no answers.
                reply = query[:2] + bytes([0x81, 0x83]) + query[4:6] + b"\0\0\0\0\0\0" + query[12:]
                self.sock.sendto(reply, peer)

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def in_namespace_with_resolv_conf(case, args):
    """ddprun's command line, run in a private mount namespace whose /etc/resolv.conf names 127.0.0.1."""
    resolv = case.path("resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver 127.0.0.1\noptions timeout:5 attempts:2\n")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount --bind {resolv} /etc/resolv.conf && exec "$@"', "sh"] + args


class SlowNameService(DdprunTestCase):
    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("needs root: a private mount namespace and port 53 for a fake name server")
        import socket
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            probe.bind(("127.0.0.1", 53))
        except OSError as e:
            self.skipTest(f"127.0.0.1:53 is taken here ({e}): no fake name server")
        finally:
            probe.close()

    def run_against(self, dns_answers_for, signal_after=None, rdzv_timeout=60):
        dns = FakeDns(dns_answers_for)
        self.addCleanup(dns.close)
        self.env["DDPRUN_TOKEN"] = "test-token"
        args = in_namespace_with_resolv_conf(self, [os.path.abspath(DDPRUN), "--nnodes", "2", "--node-rank", "1", "--master-addr",
                                                    "no-such-node.example", "--rdzv-timeout", str(rdzv_timeout),
                                                    "--nproc-per-node", "1", WORKER, "exit=0"])
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=self.env, start_new_session=True)
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        if signal_after is not None:
            time.sleep(signal_after)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)  # sh exec'd ddprun: the same pid
            out, err = proc.communicate(timeout=30)
            return proc.returncode, err.decode(), time.monotonic() - t0
        out, err = proc.communicate(timeout=rdzv_timeout + 30)
        return proc.returncode, err.decode(), None

    def test_a_stop_signal_is_answered_at_once_while_a_look_up_waits_on_a_silent_name_server(self):
        # Before: Asio's resolver thread was joined at exit, so ddprun waited for glibc's DNS time-out (~3 s).
        code, err, took = self.run_against(dns_answers_for=0, signal_after=1.5)
        self.assertEqual(code, 128 + signal.SIGTERM, err)
        self.assertLess(took, 0.5, err)

    def test_the_resolvers_reason_is_kept_to_the_end_when_later_look_ups_time_out(self):
        # The first look-ups say "no such name", the later ones get no answer: the final root cause says both.
        code, err, _ = self.run_against(dns_answers_for=0.5, rdzv_timeout=5)
        self.assertEqual(code, TIMEOUT, err)
        root = [line for line in err.splitlines() if "root cause" in line]
        self.assertEqual(len(root), 1, err)
        self.assertIn('could not resolve the rendezvous host "no-such-node.example"', root[0])
        self.assertIn("; the last look-up: no answer within", root[0])
