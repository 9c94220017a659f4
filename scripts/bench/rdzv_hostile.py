#!/usr/bin/env python3
"""Rendezvous under attack: what a flood of strangers and a node that never reads cost the server, and
what they cost a legitimate job running through it at the same time. Everything on 127.0.0.1.

  scripts/bench/rdzv_hostile.py [--build build] [--runs 3] [--strangers 5000] [--frame-bytes 4096]

Per run, one `ddprun-rendezvous --nnodes 2` (a token file, dynamic node ranks):
  attack    a separate process opens --strangers connections, each sending a frame header announcing
            --frame-bytes and then all of that frame but its last byte (the most a peer without credentials
            may make the server hold), and reopens every connection the server closes until the job is
            over (--no-churn: opens them once). Then a peer joins with the real token and sends heartbeats as fast as the
            socket takes them without ever reading a reply, until the server closes it (it frees its
            place: the job has not started). Then the legitimate job starts, the flood still running.
  job       two `ddprun --nnodes 2 --rdzv-endpoint ...` agents running /bin/true: time until both exited 0.
The same job through a fresh server with no attack is the baseline. Reported: medians over --runs of the
job's time (with and without attack) and the server's peak RSS (VmHWM, sampled; and its own ru_maxrss).
Every process is bounded in time and killed at the end.
"""
import argparse
import json
import os
import resource
import select
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))
import rdzv_wire  # noqa: E402  (the agent's side of the protocol, written apart from ddprun's)

RUN_ID = "hostile"
TOKEN = "bench-" + os.urandom(16).hex()


def raise_fd_limit(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ---- the attacker process: strangers that never finish their first frame ----

class Strangers:
    """`count` connections that each send a frame header announcing `frame_bytes` and then all of that frame
    but its last byte. Whatever the server sends (the challenge) is read and dropped; a connection the server
    closes is replaced at once, so the pressure lasts as long as the attack."""

    def __init__(self, port, count, frame_bytes, churn):
        self.port, self.payload = port, struct.pack(">I", frame_bytes) + b"x" * (frame_bytes - 1)
        self.churn = churn
        self.ep = select.epoll()
        self.conns = {}  # fd -> [socket, bytes still to send]
        self.opened = 0
        for _ in range(count):
            self.open()

    def open(self):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", self.port))
        self.conns[s.fileno()] = [s, self.payload]
        self.ep.register(s.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP)
        self.opened += 1

    def close(self, fd):
        self.ep.unregister(fd)
        self.conns.pop(fd)[0].close()

    def step(self):
        for fd, ev in self.ep.poll(0.05):
            if fd not in self.conns:
                continue
            s, pending = self.conns[fd]
            alive = True
            try:
                if ev & select.EPOLLOUT and pending:
                    self.conns[fd][1] = pending[s.send(pending):]
                    if not self.conns[fd][1]:
                        self.ep.modify(fd, select.EPOLLIN | select.EPOLLRDHUP)
                if ev & (select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR):
                    alive = bool(s.recv(65536)) and not ev & (select.EPOLLHUP | select.EPOLLERR)
            except BlockingIOError:
                pass
            except OSError:
                alive = False
            if not alive:
                self.close(fd)
                if self.churn:
                    self.open()


def attack(port, count, frame_bytes, churn):
    """Runs until SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    strangers = Strangers(port, count, frame_bytes, churn)
    report = time.monotonic()
    while True:
        strangers.step()
        if time.monotonic() - report > 1:
            print(f"attacker: {strangers.opened} connections opened, {len(strangers.conns)} open", file=sys.stderr,
                  flush=True)
            report = time.monotonic()


# ---- a joined node that never reads ----

def deaf_node(port, limit_s=20):
    """Joins with the real token, then sends heartbeats without reading. Returns (seconds until the server
    closed it, bytes sent), or (None, bytes) if it was still open at the limit."""
    s = socket.socket()
    # A default receive buffer: with a tiny one (SO_RCVBUF 4096) the kernel, its buffer full, sometimes
    # dropped the server's window updates too, and this peer's own sending stalled for good (seen with ss).
    s.connect(("127.0.0.1", port))
    deadline = time.monotonic() + limit_s
    def exactly(n):
        buf = b""
        while len(buf) < n:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed during the handshake")
            buf += chunk
        return buf
    _, seal, _ = rdzv_wire.join(s.sendall, exactly, TOKEN, RUN_ID, {"nproc": 1, "host": "deaf", "master_port": 29999})
    beat = json.dumps({"type": "heartbeat"}).encode()
    burst = lambda: b"".join(rdzv_wire.frame(seal.seal(beat)) for _ in range(4096))  # noqa: E731  (each its own tag)
    s.setblocking(False)
    sent, start, pending = 0, time.monotonic(), b""
    while time.monotonic() < deadline:
        try:
            select.select([], [s], [], 0.05)
            pending = pending or burst()  # continue a partly sent burst: frames must stay whole
            n = s.send(pending)
            pending, sent = pending[n:], sent + n
        except BlockingIOError:
            continue
        except OSError:
            s.close()
            return time.monotonic() - start, sent
    s.close()
    return None, sent


# ---- server, job, measurement ----

class Server:
    def __init__(self, build, work):
        port_file = os.path.join(work, "port")
        token_file = os.path.join(work, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        self.log = open(os.path.join(work, "server.log"), "w+")
        self.proc = subprocess.Popen(
            [os.path.join(build, "rendezvous/ddprun-rendezvous"), "--rdzv-id", RUN_ID, "--nnodes", "2",
             "--host", "127.0.0.1", "--port", "0", "--port-file", port_file, "--token-file", token_file,
             "--rdzv-timeout", "60", "--log-level", os.environ.get("RDZV_LOG", "warning")],
            stdout=self.log, stderr=self.log, start_new_session=True)
        deadline = time.monotonic() + 10
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("ddprun-rendezvous did not start")
            time.sleep(0.01)
        self.port = int(open(port_file).read())
        self.hwm_kib = 0

    def sample(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        self.hwm_kib = max(self.hwm_kib, int(line.split()[1]))
        except OSError:
            pass

    def finish(self):
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.seek(0)
        text = self.log.read()
        maxrss = [int(w) for line in text.splitlines() if "peak RSS" in line for w in line.split() if w.isdigit()]
        return max(self.hwm_kib, maxrss[-1] if maxrss else 0), text


def run_job(build, server, timeout=60):
    """Two agents through `server`; returns seconds until both exited, or raises."""
    cmd = [os.path.join(build, "launcher/ddprun"), "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{server.port}",
           "--rdzv-id", RUN_ID, "--nproc-per-node", "1", "--rdzv-timeout", "30", "/bin/true"]
    env = dict(os.environ, DDPRUN_TOKEN=TOKEN)
    start = time.monotonic()
    agents = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
              for _ in range(2)]
    codes, errs = [], []
    for a in agents:
        while a.poll() is None and time.monotonic() - start < timeout:
            server.sample()
            time.sleep(0.002)
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
        out, err = a.communicate()
        codes.append(a.returncode)
        errs.append(err.decode(errors="replace"))
    took = time.monotonic() - start
    if codes != [0, 0]:
        raise RuntimeError(f"job failed: exit codes {codes}\n" + "\n".join(errs))
    return took


def one_run(args, attacked):
    with tempfile.TemporaryDirectory() as work:
        server = Server(args.build, work)
        attacker = None
        deaf = (None, 0)
        try:
            if attacked:
                attacker = subprocess.Popen([sys.executable, __file__, "--attacker", str(server.port),
                                             str(args.strangers), str(args.frame_bytes), str(int(args.churn))],
                                            start_new_session=True)
                t0 = time.monotonic()
                while time.monotonic() - t0 < args.flood_s:  # let the flood build up first
                    server.sample()
                    time.sleep(0.01)
                deaf = deaf_node(server.port)
                server.sample()
            took = run_job(args.build, server)
        finally:
            if attacker:
                os.killpg(attacker.pid, signal.SIGTERM)
                try:
                    attacker.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(attacker.pid, signal.SIGKILL)
                    attacker.wait()
            peak, log = server.finish()
        return took, peak, deaf, log


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--strangers", type=int, default=5000)
    ap.add_argument("--frame-bytes", type=int, default=4096, help="announced by each stranger (server's pre-auth limit)")
    ap.add_argument("--flood-s", type=float, default=2.0, help="seconds of flood before the job starts")
    ap.add_argument("--no-churn", dest="churn", action="store_false",
                    help="open the strangers once instead of replacing every one the server closes")
    ap.add_argument("--attacker", nargs=4, type=int, metavar=("PORT", "N", "FRAME", "CHURN"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.attacker:
        raise_fd_limit(args.attacker[1] + 64)
        return attack(*args.attacker[:3], bool(args.attacker[3]))
    limit = raise_fd_limit(args.strangers + 256)
    if limit < args.strangers + 64:
        sys.exit(f"rdzv_hostile: RLIMIT_NOFILE is {limit}; {args.strangers + 64} descriptors needed")

    base, attacked, base_rss, attacked_rss, deaf_s = [], [], [], [], []
    for r in range(args.runs):
        took, peak, _, _ = one_run(args, attacked=False)
        base.append(took)
        base_rss.append(peak)
        took, peak, deaf, log = one_run(args, attacked=True)
        attacked.append(took)
        attacked_rss.append(peak)
        deaf_s.append(deaf[0])
        print(f"run {r}: job {base[-1] * 1000:.0f} ms alone, {took * 1000:.0f} ms under attack; server peak RSS "
              f"{base_rss[-1] / 1024:.1f} MiB alone, {peak / 1024:.1f} MiB under attack; deaf node closed after "
              f"{'never' if deaf[0] is None else f'{deaf[0]:.2f} s'} ({deaf[1] / 1e6:.1f} MB of heartbeats sent)",
              flush=True)
        if r == 0:
            print("  server warnings:", " | ".join(l.split("] ", 1)[-1] for l in log.splitlines() if "WARNING" in l)[:600])
    med = statistics.median
    print(f"median of {args.runs}: job {med(base) * 1000:.0f} ms alone, {med(attacked) * 1000:.0f} ms under attack "
          f"({med(attacked) / med(base):.2f}x); server peak RSS {med(base_rss) / 1024:.1f} MiB alone, "
          f"{med(attacked_rss) / 1024:.1f} MiB under attack ({args.strangers} strangers x {args.frame_bytes} B "
          f"frames{', reconnecting' if args.churn else ', opened once'} + 1 deaf node)")


if __name__ == "__main__":
    main()
