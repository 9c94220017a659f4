"""A stranger holding connections open to a rendezvous port without ever saying hello (issue 55): `count` idle
connections, each opened again as soon as the server closes it, until stop(). Loopback only."""
import errno
import resource
import selectors
import socket
import threading


class StrangerFlood:
    def __init__(self, port, count, host="127.0.0.1"):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < count + 256:
            raise OSError(f"RLIMIT_NOFILE's hard limit {hard} is below the {count} connections asked")
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, count + 256), hard))
        self.address = (host, port)
        self.count = count
        self.opened = 0  # connections opened in all (the first `count`, and each one again after a close)
        self.selector = selectors.DefaultSelector()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        for _ in range(self.count):
            self._open()
        self.thread.start()
        return self

    def _open(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        code = s.connect_ex(self.address)
        if code not in (0, errno.EINPROGRESS):
            s.close()
            return
        self.selector.register(s, selectors.EVENT_READ)
        self.opened += 1

    def _run(self):
        while not self.stopping.is_set():
            for key, _ in self.selector.select(timeout=0.05):
                s = key.fileobj
                try:
                    data = s.recv(4096)  # the challenge, read and ignored
                except OSError:
                    data = b""
                if not data:  # closed by the server: another one in its place
                    self.selector.unregister(s)
                    s.close()
                    self._open()

    def stop(self):
        self.stopping.set()
        self.thread.join()
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()
        self.selector.close()
