"""A free TCP port on loopback, for the tests and the benchmarks (scripts/bench put tests/integration on their
path for it). No side effect on import: unlike harness.py, importing this does not make the caller a subreaper."""
import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
