"""A lab of hosts for multi-node tests, in network namespaces this test process makes; nothing leaves them. Made
per test class; where they cannot be made (not root, no CAP_SYS_ADMIN, no iproute2) the class is skipped, saying
why.
- NetnsPair: two hosts joined by a veth pair, IPv4 10.231.x.y, or IPv6 fd42:x::y alone, optionally with names in
  /etc/netns/NS/hosts, which `ip netns exec` mounts over /etc/hosts for the processes it starts.
- NetnsStar: hosts on one switch (a bridge), whose ports can be cut and healed, or lose a share of their frames;
  a host's link can be a delay line of our own (delay_line.py: the kernels here have no netem)."""
import os
import subprocess
import sys
import unittest

from harness import FIXTURE_PIDS


def sh(*args, check=True):
    return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=check)


class NetnsPair:
    def __init__(self, tag, ipv6=False, names=()):
        """`names`: host names for the two addresses, in order, written to each namespace's hosts file."""
        self.ns = [f"{tag}n0", f"{tag}n1"]
        self.veth = [f"{tag}v0", f"{tag}v1"]
        if ipv6:
            net = f"fd42:{os.getpid() % 65536:x}::"
            self.addr, prefix = [f"{net}1", f"{net}2"], 64
        else:
            octet = 1 + os.getpid() % 250
            self.addr, prefix = [f"10.231.{octet}.1", f"10.231.{octet}.2"], 24
        self.made = []
        try:
            for ns in self.ns:
                sh("ip", "netns", "add", ns)
                self.made.append(ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
                if names:
                    os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
                    with open(f"/etc/netns/{ns}/hosts", "w") as f:
                        f.writelines(f"{a} {n}\n" for a, n in zip(self.addr, names))
            sh("ip", "link", "add", self.veth[0], "netns", self.ns[0], "type", "veth", "peer", "name", self.veth[1],
               "netns", self.ns[1])
            for i in range(2):
                # nodad: an IPv6 address usable at once, not after duplicate address detection's second or so
                sh("ip", "-n", self.ns[i], "addr", "add", f"{self.addr[i]}/{prefix}", "dev", self.veth[i],
                   *(["nodad"] if ipv6 else []))
                sh("ip", "-n", self.ns[i], "link", "set", self.veth[i], "up")
        except (OSError, subprocess.CalledProcessError) as e:
            self.remove()
            why = e.stderr.decode().strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
            raise unittest.SkipTest(f"cannot create network namespaces here ({why})")

    def inside(self, node):
        """The prefix that runs a command on host `node`."""
        return ["ip", "netns", "exec", self.ns[node]]

    def remove(self):
        for ns in self.made:
            sh("ip", "netns", "del", ns, check=False)
            try:
                os.remove(f"/etc/netns/{ns}/hosts")
                os.rmdir(f"/etc/netns/{ns}")
            except OSError:
                pass
        self.made = []


class NetnsStar:
    """`count` hosts on one switch: a bridge in a namespace of its own, each host's namespace joined to it by a veth
    pair, addresses 10.232.X.1.. (one /24). cut(i) downs host i's port on the bridge: its packets vanish without a
    FIN or a RST, as when a cable is pulled or a switch port fails, and the other hosts still reach each other;
    heal(i) brings it back. The hosts in `delayed` are joined to the switch through a delay line instead of a veth
    pair (two TAP devices and delay_line.py between them); delay(i, ms) sets it. Skipped, saying why, where it cannot
    be made (also: no bridge support, no /dev/net/tun)."""

    def __init__(self, tag, count, delayed=()):
        self.tag = tag
        self.bridge_ns = f"{tag}sw"
        self.ns = [f"{tag}h{i}" for i in range(count)]
        octet = 1 + os.getpid() % 250
        self.addr = [f"10.232.{octet}.{i + 1}" for i in range(count)]
        self.made = []
        self.lines = {}
        try:
            for ns in [self.bridge_ns, *self.ns]:
                sh("ip", "netns", "add", ns)
                self.made.append(ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", self.bridge_ns, "link", "add", "sw", "type", "bridge")
            sh("ip", "-n", self.bridge_ns, "link", "set", "sw", "up")
            for i, ns in enumerate(self.ns):
                if i in delayed:
                    self.lines[i] = self.delay_line(self.link(i), self.port(i))
                    sh("ip", "-n", self.bridge_ns, "link", "set", self.link(i), "netns", ns)
                else:
                    sh("ip", "link", "add", self.link(i), "netns", ns, "type", "veth", "peer", "name",
                       self.port(i), "netns", self.bridge_ns)
                sh("ip", "-n", self.bridge_ns, "link", "set", self.port(i), "master", "sw", "up")
                sh("ip", "-n", ns, "addr", "add", f"{self.addr[i]}/24", "dev", self.link(i))
                sh("ip", "-n", ns, "link", "set", self.link(i), "up")
        except (OSError, subprocess.CalledProcessError) as e:
            self.remove()
            why = e.stderr.decode().strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
            raise unittest.SkipTest(f"cannot create network namespaces and a bridge here ({why})")

    def port(self, i):
        """Host i's port on the switch, in the switch's namespace."""
        return f"p{i}"

    def link(self, i):
        """Host i's interface, in its namespace. Every host has the machine's host name, which resolves to
        loopback: gloo picks its interface from that name unless GLOO_SOCKET_IFNAME says this one."""
        return f"{self.tag}e{i}"

    def delay_line(self, host_side, switch_side):
        """Starts delay_line.py in the switch's namespace with both of its TAP devices there."""
        line = subprocess.Popen(["ip", "netns", "exec", self.bridge_ns, sys.executable,
                                 os.path.join(os.path.dirname(os.path.abspath(__file__)), "delay_line.py"),
                                 host_side, switch_side],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        FIXTURE_PIDS.add(line.pid)
        if line.stdout.readline().strip() != "ready":
            line.stdin.close()
            raise OSError(f"the delay line did not start: {line.stderr.read().strip()}")
        return line

    def delay(self, host, ms):
        """From now on every frame to and from host `host` (one of `delayed`) waits `ms` milliseconds each way."""
        line = self.lines[host]
        line.stdin.write(f"delay {ms}\n")
        line.stdin.flush()
        assert line.stdout.readline().strip() == "ok"

    def inside(self, host):
        return ["ip", "netns", "exec", self.ns[host]]

    def cut(self, host):
        sh("ip", "-n", self.bridge_ns, "link", "set", self.port(host), "down")

    def heal(self, host):
        sh("ip", "-n", self.bridge_ns, "link", "set", self.port(host), "up")

    def lose(self, host, percent, ways=("from", "to")):
        """Drops `percent` % of the IPv4 packets from and/or to host `host` (`ways`), at the switch (nftables on
        the bridge; the kernel here has no netem). ARP passes: a lossy link, not a broken neighbour table. Raises
        unittest.SkipTest, saying why, without nft."""
        match = {"from": "iifname", "to": "oifname"}
        chance = "" if percent >= 100 else f"numgen random mod 100 < {percent} "
        drops = "".join(f"{match[w]} \"{self.port(host)}\" ether type ip {chance}drop; " for w in ways)
        rules = f"table bridge lab {{ chain drops {{ type filter hook forward priority 0; {drops}}}; }}"
        try:
            sh("ip", "netns", "exec", self.bridge_ns, "nft", rules)
        except (OSError, subprocess.CalledProcessError) as e:
            why = e.stderr.decode().strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
            raise unittest.SkipTest(f"cannot drop packets on the lab's switch (nftables: {why}); scripts/setup "
                                    f"installs Debian's nftables")

    def lossless(self):
        sh("ip", "netns", "exec", self.bridge_ns, "nft", "delete table bridge lab", check=False)

    def remove(self):
        for line in self.lines.values():
            try:
                line.stdin.close()  # its end
            except BrokenPipeError:
                pass
            line.wait(timeout=10)
            line.stdout.close()
            line.stderr.close()
            FIXTURE_PIDS.discard(line.pid)
        self.lines = {}
        for ns in self.made:
            sh("ip", "netns", "del", ns, check=False)
        self.made = []
