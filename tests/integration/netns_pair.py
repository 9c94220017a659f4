"""Two hosts for multi-node tests: network namespaces joined by a veth pair, with addresses that exist only inside
them (IPv4 10.231.x.y, or IPv6 fd42:x::y alone), and optionally names in /etc/netns/NS/hosts, which `ip netns exec`
mounts over /etc/hosts for the processes it starts. Nothing leaves the namespaces. Made per test class; where they
cannot be made (not root, no CAP_SYS_ADMIN, no iproute2) the class is skipped, saying why."""
import os
import subprocess
import unittest


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
