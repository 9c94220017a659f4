"""A delay line between two TAP devices, for the fault lab (netns_lab.NetnsStar): the kernels these tests run on
have no netem, so a link's delay is made here, in user space. Every Ethernet frame read from one TAP is written to
the other `delay` ms later, in order (a later frame never overtakes an earlier one, also when the delay shrinks),
or dropped with probability `loss` %. A queue of more than MAX_QUEUED frames one way drops the newest, as a
switch's full buffer would.

    python3 delay_line.py TAP_A TAP_B

creates both TAP devices in the current network namespace (the lab then moves one into a host's namespace: the
open descriptor follows the device), prints "ready", and reads commands from stdin, one per line:
    delay MS        every frame read from now on waits MS milliseconds
    loss PERCENT    every frame read from now on is dropped with this probability
It ends when stdin closes; its devices go with it."""
import collections
import fcntl
import os
import random
import selectors
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000
MAX_QUEUED = 20000  # frames one way: 30 MB of full-size frames, far more than a TCP window in flight


def open_tap(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


class Direction:
    """Frames read from `source`, waiting for their time to be written to `sink`."""

    def __init__(self, source, sink):
        self.source, self.sink = source, sink
        self.queue = collections.deque()  # (due, frame), due never decreasing
        self.dropped = 0

    def read(self, now, delay, loss):
        while True:
            try:
                frame = os.read(self.source, 65536)
            except BlockingIOError:
                return
            if loss and random.random() * 100 < loss:
                continue
            if len(self.queue) >= MAX_QUEUED:
                self.dropped += 1
                continue
            due = now + delay
            if self.queue and self.queue[-1][0] > due:
                due = self.queue[-1][0]
            self.queue.append((due, frame))

    def write_due(self, now):
        while self.queue and self.queue[0][0] <= now:
            _, frame = self.queue.popleft()
            try:
                os.write(self.sink, frame)
            except OSError:
                pass  # the other side's device is down (a cut, or the lab going away): the frame is lost

    def next_due(self):
        return self.queue[0][0] if self.queue else None


def main():
    a, b = open_tap(sys.argv[1]), open_tap(sys.argv[2])
    directions = {a: Direction(a, b), b: Direction(b, a)}
    delay, loss = 0.0, 0.0
    sel = selectors.DefaultSelector()
    for fd in directions:
        sel.register(fd, selectors.EVENT_READ)
    sel.register(sys.stdin, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        dues = [d for d in (x.next_due() for x in directions.values()) if d is not None]
        timeout = max(0.0, min(dues) - time.monotonic()) if dues else None
        for key, _ in sel.select(timeout):
            if key.fileobj is sys.stdin:
                line = sys.stdin.readline()
                if not line:
                    return
                word, value = line.split()
                if word == "delay":
                    delay = float(value) / 1000
                elif word == "loss":
                    loss = float(value)
                print("ok", flush=True)
            else:
                directions[key.fileobj].read(time.monotonic(), delay, loss)
        now = time.monotonic()
        for d in directions.values():
            d.write_due(now)


if __name__ == "__main__":
    main()
