"""Real etcd for the etcd rendezvous tests: Debian's etcd-server (etcd 3.4, installed by scripts/setup), one member
or a cluster of three on loopback, each member with its own data directory under the test's temp dir and free
ports. The members are fixture processes (harness.FIXTURE_PIDS): a test's "nothing left behind" check does not count
them, and stop() ends them. The tests talk to etcd the way ddprun does, over its v3 JSON gateway (stdlib HTTP)."""
import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import unittest
import urllib.request

from harness import FIXTURE_PIDS
from ports import free_port
from wait import wait_until

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def skip_unless_etcd():
    if not os.access(ETCD, os.X_OK):
        raise unittest.SkipTest("no etcd binary (Debian's etcd-server; scripts/setup installs it)")


def b64(text):
    return base64.b64encode(text.encode()).decode()


def make_certificates(directory, ca_name="ca"):
    """A test CA (`ca_name`.pem) and, signed by it, a server certificate for 127.0.0.1 and localhost (server.pem,
    server.key) and a client certificate (client.pem, client.key), with openssl's command line (P-256 keys)."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
        f"{ca_name}.key", "-out", f"{ca_name}.pem", "-days", "2", "-subj", f"/CN=ddprun test {ca_name}")
    for name, usage in (("server", "serverAuth,clientAuth"), ("client", "clientAuth")):
        with open(os.path.join(directory, f"{name}.ext"), "w") as f:
            f.write(f"subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage={usage}\n")
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca_name}.pem", "-CAkey", f"{ca_name}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")


class EtcdCluster:
    def __init__(self, base_dir, members=1, tls=False, v2=False, lab=None):
        """`tls`: client URLs over https with a CA of the fixture's own (make_certificates), etcd asking every
        client for a certificate signed by it (--client-cert-auth). `v2`: etcd's v2 API too (--enable-v2), which
        torch's etcd back-ends speak through python3-etcd (the benchmark's peer). `lab`: a netns_lab.NetnsStar
        with at least `members` hosts: member i runs on host i, at its address, so that cutting a host cuts its
        member too (the partition tests); the fixture then talks to a member from inside its host."""
        self.base_dir = base_dir
        self.tls = tls
        self.v2 = v2
        self.lab = lab
        self.names = [f"m{i}" for i in range(members)]
        self.hosts = [lab.addr[i] for i in range(members)] if lab else ["127.0.0.1"] * members
        self.client_ports = [free_port() for _ in self.names]
        self.peer_ports = [free_port() for _ in self.names]
        self.procs = [None] * members
        self.logs = [os.path.join(base_dir, f"etcd-{n}.log") for n in self.names]

    @property
    def endpoints(self):
        """The --rdzv-endpoint list: every member's client URL."""
        if self.tls:
            return ",".join(self.url(i) for i in range(len(self.names)))
        return ",".join(f"{h}:{p}" for h, p in zip(self.hosts, self.client_ports))

    def url(self, i):
        return f"{'https' if self.tls else 'http'}://{self.hosts[i]}:{self.client_ports[i]}"

    def cert(self, name):
        return os.path.join(self.base_dir, name)

    def _ssl_context(self):
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.cert("ca.pem"))
        context.load_cert_chain(self.cert("client.pem"), self.cert("client.key"))
        return context

    def start(self, timeout=30):
        initial = ",".join(f"{n}=http://{h}:{p}" for n, h, p in zip(self.names, self.hosts, self.peer_ports))
        tls_args = []
        if self.tls:
            make_certificates(self.base_dir)
            tls_args = ["--cert-file", self.cert("server.pem"), "--key-file", self.cert("server.key"),
                        "--trusted-ca-file", self.cert("ca.pem"), "--client-cert-auth"]
        for i, name in enumerate(self.names):
            peer = f"http://{self.hosts[i]}:{self.peer_ports[i]}"
            client = self.url(i)
            with open(self.logs[i], "ab") as log:
                self.procs[i] = subprocess.Popen(
                    [*(self.lab.inside(i) if self.lab else []), ETCD, *tls_args, *(["--enable-v2"] if self.v2 else []), "--name", name, "--data-dir", os.path.join(self.base_dir, f"data-{name}"),
                     "--listen-client-urls", client, "--advertise-client-urls", client,
                     "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                     "--initial-cluster", initial, "--initial-cluster-state", "new",
                     "--initial-cluster-token", os.path.basename(self.base_dir),
                     # a dead leader is replaced in about a second, not etcd's default 5 heartbeats x 100 ms x 10
                     "--heartbeat-interval", "50", "--election-timeout", "500"],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            FIXTURE_PIDS.add(self.procs[i].pid)
        wait_until(lambda: all(self.healthy(i) for i in range(len(self.names))),
                   lambda: f"etcd healthy on {self.endpoints} ({self.log_tail()})", timeout, interval=0.1)

    def healthy(self, i):
        if self.lab:
            try:
                return self.call("/v3/maintenance/status", {}, member=i).get("header") is not None
            except (OSError, ValueError):
                return False
        try:
            with urllib.request.urlopen(self.url(i) + "/health", timeout=1, context=self._ssl_context()) as r:
                return json.load(r).get("health") == "true"
        except (OSError, ValueError):
            return False

    def call(self, path, body, member=None):
        """POST to the gateway of `member` (default: the first one alive); returns the JSON answer."""
        order = [member] if member is not None else [i for i, p in enumerate(self.procs) if p and p.poll() is None]
        last = None
        for i in order:
            if self.lab:  # the member's address is inside the lab: ask from its host
                try:
                    return self._call_inside(i, path, body)
                except (OSError, ValueError) as e:
                    last = e
                    continue
            req = urllib.request.Request(self.url(i) + path, data=json.dumps(body).encode(), method="POST")
            try:
                with urllib.request.urlopen(req, timeout=3, context=self._ssl_context()) as r:
                    return json.load(r)
            except OSError as e:
                last = e
        raise last

    def _call_inside(self, i, path, body):
        script = ("import json, sys, urllib.request\n"
                  "req = urllib.request.Request(sys.argv[1], data=sys.stdin.buffer.read(), method='POST')\n"
                  "sys.stdout.write(urllib.request.urlopen(req, timeout=3).read().decode())\n")
        done = subprocess.run([*self.lab.inside(i), sys.executable, "-c", script, self.url(i) + path],
                              input=json.dumps(body).encode(), capture_output=True, timeout=10)
        if done.returncode != 0:
            raise OSError(f"member {i}: {done.stderr.decode().strip()[-300:]}")
        return json.loads(done.stdout)

    def keys(self, prefix):
        """Every key under `prefix` now (decoded)."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        reply = self.call("/v3/kv/range", {"key": b64(prefix), "range_end": b64(end)})
        return [base64.b64decode(kv["key"]).decode() for kv in reply.get("kvs", [])]

    def value(self, key):
        kvs = self.call("/v3/kv/range", {"key": b64(key)}).get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def leader(self):
        """The index of the member that leads now."""
        for i, p in enumerate(self.procs):
            if p and p.poll() is None:
                status = self.call("/v3/maintenance/status", {}, member=i)
                if status.get("leader") == status["header"]["member_id"]:
                    return i
        raise AssertionError("no etcd member leads")

    def kill(self, i):
        os.kill(self.procs[i].pid, signal.SIGKILL)
        self.procs[i].wait()
        FIXTURE_PIDS.discard(self.procs[i].pid)

    def stop(self):
        for p in self.procs:
            if p and p.poll() is None:
                p.terminate()
        for p in self.procs:
            if not p:
                continue
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            FIXTURE_PIDS.discard(p.pid)

    def log_tail(self):
        out = []
        for path in self.logs:
            try:
                with open(path, "rb") as f:
                    out.append(f.read()[-800:].decode(errors="replace"))
            except OSError:
                pass
        return "\n".join(out)
