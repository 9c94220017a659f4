"""A free TCP port on loopback, and whether a port listens, for the tests and the benchmarks (scripts/bench put
tests/support on their path for it). No side effect on import: unlike harness.py, importing this does not make the caller a subreaper."""
import socket


def listening(port):
    """Whether something listens on TCP `port` (from /proc/net/tcp: no probe connection to disturb the server)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
