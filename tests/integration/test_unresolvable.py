"""A rendezvous host that does not resolve (a typo, a misread node list) is said at once, at the default log
level, naming the host and the option to fix it, once; ddprun still retries until --rdzv-timeout (the name may
yet resolve) and then exits 75, the rendezvous timeout's code (docs/MULTINODE.md), at the deadline: the last
back-off wait is cut to it (rendezvous/client.cpp), not given up one back-off step early."""
import os
import select
import signal
import time

from harness import DdprunTestCase, WORKER

HOST = "no-such-node.invalid"  # RFC 6761: never resolves
RDZV_TIMEOUT = 3
TIMEOUT = 75


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
