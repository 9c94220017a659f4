"""A relay on 127.0.0.1 between agents and their rendezvous server that passes every frame whole, through a hook
that may change it: the man in the middle of issue 55, who passed the challenge and the proofs through untouched
(holding no token) and rewrote what came after them. One thread per direction of each connection; close() ends
them all and closes every socket."""
import socket
import struct
import threading


class FrameRelay:
    def __init__(self, target_port, to_agent=None, to_server=None):
        """to_agent(payload) / to_server(payload): the payload (bytes) of each frame that way, returned as it is
        to pass or changed; None: passed as it is."""
        self.target_port = target_port
        self.hooks = {"agent": to_agent or (lambda p: p), "server": to_server or (lambda p: p)}
        self.changed = {"agent": 0, "server": 0}  # frames the hooks changed, each way
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets, self.open = [], True
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while self.open:
            try:
                agent, _ = self.listener.accept()
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                return
            with self.lock:
                self.sockets += [agent, server]
            threading.Thread(target=self.pump, args=(agent, server, "server"), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, agent, "agent"), daemon=True).start()

    def pump(self, source, sink, toward):
        def exactly(n):
            data = b""
            while len(data) < n:
                chunk = source.recv(n - len(data))
                if not chunk:
                    raise EOFError
                data += chunk
            return data
        try:
            while True:
                (length,) = struct.unpack(">I", exactly(4))
                payload = exactly(length)
                changed = self.hooks[toward](payload)
                if changed != payload:
                    self.changed[toward] += 1
                sink.sendall(struct.pack(">I", len(changed)) + changed)
        except (OSError, EOFError):
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.open = False
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                try:
                    s.close()
                except OSError:
                    pass
