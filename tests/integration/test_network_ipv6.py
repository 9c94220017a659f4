"""IPv6 and dual-stack names (issue 37): a rendezvous host named by an IPv6 literal or by a name with AAAA
records formed nowhere before (every node exited 75 after the rendezvous timeout) because the server listened
on 0.0.0.0 only and the client tried the first address of a name and nothing else.

Three rooms, from the cheapest: ::1 on this machine's loopback; names in a hosts file of a private mount namespace
(unshare -m, a bind mount over /etc/hosts that only the test's processes see); and two network namespaces joined
by a veth pair that carries IPv6 only (fd42:... addresses, names in /etc/netns/NS/hosts, which `ip netns exec`
mounts over /etc/hosts). Each room skips, saying why, where it cannot be made."""
import os
import socket
import subprocess
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import DDPRUN, RENDEZVOUS, WORKER
from multinode import MultiNodeCase, TIMEOUT
from netns_lab import NetnsPair
from python_env import HELPERS, NO_TORCH, torch_python

PYTHON_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../python"))


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class IPv6Case(MultiNodeCase):
    def setUp(self):
        super().setUp()
        if not ipv6_loopback():
            self.skipTest("this machine has no IPv6 loopback (::1 cannot be bound)")

    def agents(self, nnodes, make):
        return self.wait_all([make(r) for r in range(nnodes)])

    def static(self, rank, master, *steps, prefix=(), nnodes=2, extra=()):
        return self.launch(prefix, "--nnodes", nnodes, "--node-rank", rank, "--master-addr", master, "--rdzv-port",
                           self.port, "--nproc-per-node", 1, "--rdzv-timeout", 20, *extra, WORKER, *steps)

    def dynamic(self, endpoint, *steps, prefix=(), extra=()):
        return self.launch(prefix, "--nnodes", 2, "--rdzv-endpoint", endpoint, "--rdzv-id", "v6job",
                           "--nproc-per-node", 1, "--rdzv-timeout", 20, *extra, WORKER, *steps)

    def launch(self, prefix, *args):
        """ddprun with `args`, under `prefix` (unshare ..., ip netns exec NS) when given."""
        return subprocess.Popen([*prefix, os.path.abspath(DDPRUN), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                                start_new_session=True)

    def server(self, host, prefix=()):
        proc = subprocess.Popen([*prefix, RENDEZVOUS, "--rdzv-id", "v6job", "--nnodes", "2", "--host", host,
                                 "--port", str(self.port), "--rdzv-timeout", "20"], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.addCleanup(self.stop, proc)
        self.stderr_until(proc, b"listening on", 10, why="the rendezvous server never listened")
        return proc

    def stop(self, proc):
        if proc.poll() is None:
            proc.kill()
        proc.communicate()

    def assert_all_ok(self, results, master=None):
        for res in results:
            self.assertEqual(res.code, 0, res)
            if master is not None:
                self.assertIn(f"MASTER_ADDR={master}\n", res.stdout.decode(), res)


class IPv6Loopback(IPv6Case):
    def test_static_job_with_an_ipv6_master_addr(self):
        # The issue's own lines: both nodes waited silently until killed.
        self.assert_all_ok(self.agents(2, lambda r: self.static(r, "::1", "env=MASTER_ADDR")), master="::1")

    def test_a_bracketed_master_addr_reaches_workers_bare(self):
        # TCPStore and gloo take "::1", not "[::1]": the brackets are the user's way of writing, not the address.
        results = self.agents(2, lambda r: self.static(r, "[::1]" if r == 0 else "::1", "env=MASTER_ADDR"))
        self.assert_all_ok(results, master="::1")
        self.assertIn(f"master [::1]:", results[0].stderr.decode(), results[0])  # logs bracket it, as endpoints

    def test_dynamic_job_at_a_bracketed_endpoint(self):
        self.assert_all_ok(self.agents(2, lambda r: self.dynamic(f"[::1]:{self.port}", "env=MASTER_ADDR")),
                           master="::1")

    def test_torch_gloo_ranks_over_an_ipv6_master_addr(self):
        # Debian's python3-torch: TCPStore at MASTER_ADDR=::1, a gloo all_reduce across two nodes' ranks.
        if torch_python() is None:
            self.skipTest(NO_TORCH)
        self.env["PYTHON_EXEC"] = torch_python()
        self.env["PYTHONPATH"] = PYTHON_DIR
        script = os.path.join(HELPERS, "gloo_steps.py")
        procs = [self.launch((), "--nnodes", 2, "--node-rank", r, "--master-addr", "::1", "--rdzv-port", self.port,
                             "--nproc-per-node", 1, script, "--seconds", 0, "--step-ms", 1) for r in range(2)]
        self.assert_all_ok(self.wait_all(procs, timeout=120))


class DualStackNames(IPv6Case):
    """Names with both families, and one family only, from a hosts file only the test's processes see."""
    HOSTS = ("::1 rdzv-dual\n127.0.0.1 rdzv-dual\n"
             "::1 rdzv-six\n")

    def setUp(self):
        super().setUp()
        self.hosts = self.path("hosts")
        with open(self.hosts, "w") as f:
            f.write(self.HOSTS)
        # The wrapper: a private mount namespace where /etc/hosts is ours, then exec the command.
        self.ns = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', self.hosts]
        probe = subprocess.run([*self.ns, "getent", "ahosts", "rdzv-dual"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        if probe.returncode != 0 or b"::1" not in probe.stdout or b"127.0.0.1" not in probe.stdout:
            self.skipTest(f"cannot give the test's processes their own /etc/hosts (unshare -m and mount --bind, as "
                          f"root): {probe.stderr.decode().strip() or probe.stdout.decode().strip()}")

    def test_a_dual_stack_name_whose_ipv6_address_is_refused(self):
        # A ddprun-rendezvous told 127.0.0.1: ::1 refuses, the name's second address answers.
        self.server("127.0.0.1")
        self.assert_all_ok(self.agents(2, lambda r: self.dynamic(f"rdzv-dual:{self.port}", "exit=0", prefix=self.ns,
                                                                 extra=("--rdzv-conf", "is_host=false"))))

    def test_a_dual_stack_name_whose_ipv4_address_is_refused(self):
        self.server("::1")
        self.assert_all_ok(self.agents(2, lambda r: self.dynamic(f"rdzv-dual:{self.port}", "exit=0", prefix=self.ns,
                                                                 extra=("--rdzv-conf", "is_host=false"))))

    def test_static_node_0_hosts_for_ipv6_and_ipv4_names(self):
        # Node 0 listens on every address, both families: a node given the IPv6-only name and one given the
        # dual-stack name both find it.
        results = self.agents(2, lambda r: self.static(r, "rdzv-dual" if r == 0 else "rdzv-six", "exit=0",
                                                       prefix=self.ns))
        self.assert_all_ok(results)
        self.assertIn("(every address, IPv6 and IPv4)", results[0].stderr.decode(), results[0])

    def test_dynamic_host_on_a_dual_stack_name(self):
        self.assert_all_ok(self.agents(2, lambda r: self.dynamic(f"rdzv-dual:{self.port}", "exit=0", prefix=self.ns)))

    def test_a_node_that_finds_no_server_says_what_each_address_answered(self):
        proc = self.launch(self.ns, "--nnodes", 2, "--rdzv-endpoint", f"rdzv-dual:{self.port}", "--rdzv-id", "v6job",
                           "--rdzv-conf", "is_host=false", "--rdzv-timeout", 5, WORKER, "exit=0")
        res = self.wait_all([proc])[0]
        self.assertEqual(res.code, TIMEOUT, res)
        err = res.stderr.decode()
        # After a few seconds, once, at the default level; and again in the final line.
        self.assertIn(f"the rendezvous server at rdzv-dual:{self.port} has not answered for", err, res)
        for address in (f"[::1]:{self.port} refused", f"127.0.0.1:{self.port} refused"):
            self.assertIn(address, err, res)
        self.assertIn("could not reach the rendezvous server", err, res)


class IPv6OnlyHosts(IPv6Case):
    """Two hosts whose only link carries IPv6: network namespaces joined by a veth pair, fd42:: addresses, names in
    /etc/netns/NS/hosts. Nothing leaves the namespaces the test made."""

    @classmethod
    def setUpClass(cls):
        cls.pair = NetnsPair(f"ddp6{os.getpid() % 100000}", ipv6=True, names=("v6-node0", "v6-node1"))

    @classmethod
    def tearDownClass(cls):
        cls.pair.remove()

    def inside(self, node):
        return self.pair.inside(node)

    def test_static_job_across_ipv6_only_hosts(self):
        # Static: MASTER_ADDR is --master-addr as given (torchrun's rule), the name, resolved by the workers.
        results = self.agents(2, lambda r: self.static(r, "v6-node0", "env=MASTER_ADDR", prefix=self.inside(r)))
        self.assert_all_ok(results, master="v6-node0")

    def test_dynamic_job_across_ipv6_only_hosts(self):
        # Dynamic: node 0's address as the server saw it, an IPv6 address the workers take bare.
        results = self.agents(2, lambda r: self.dynamic(f"v6-node0:{self.port}", "env=MASTER_ADDR",
                                                        prefix=self.inside(r)))
        self.assert_all_ok(results, master=self.pair.addr[0])


if __name__ == "__main__":
    unittest.main()
