"""Heartbeats and stack dumps for a Python worker under `ddprun --hang-timeout SEC` (stdlib only, one file).

    import ddprun_heartbeat          # also asks for Python stacks when ddprun finds the worker hung
    for step, batch in enumerate(loader):
        ...
        ddprun_heartbeat.beat(step)  # a store into shared memory: no system call, safe to call every step
    with ddprun_heartbeat.quiet(600):  # evaluation, a checkpoint save: silent for at most 10 minutes
        evaluate(model)

Installed with ddprun (<prefix>/share/ddprun/python), it needs no set-up: ddprun adds its directory to the
end of a Python worker's PYTHONPATH. Outside ddprun, or without --hang-timeout, both do nothing. The channel
(README "Hang detection"): the descriptor DDPRUN_HEARTBEAT_FD is a shared page; the worker's slot at byte
DDPRUN_HEARTBEAT_OFFSET holds int64 step, then int64 CLOCK_MONOTONIC nanoseconds (time.monotonic_ns()),
written last; at +16 the end of a quiet phase (CLOCK_MONOTONIC nanoseconds, 0: none), written before the beat
that opens it.
"""
import contextlib
import faulthandler
import mmap
import os
import struct
import time

_page = None
_offset = 0
_step = -1
_stacks = None  # faulthandler keeps writing to this file object: it must stay open


def _setup():
    global _page, _offset, _stacks
    fd = os.environ.get("DDPRUN_HEARTBEAT_FD")
    if fd is None:
        return
    _page = mmap.mmap(int(fd), 0)
    _offset = int(os.environ["DDPRUN_HEARTBEAT_OFFSET"])
    if "DDPRUN_STACKS_FILE" in os.environ:
        _stacks = open(os.environ["DDPRUN_STACKS_FILE"], "w")
        faulthandler.register(int(os.environ["DDPRUN_STACKS_SIGNAL"]), file=_stacks, all_threads=True)


def beat(step=-1):
    """Tells ddprun this worker is alive, at training step `step` (-1: none)."""
    global _step
    _step = step
    if _page is not None:
        # Native 'q': one 8-byte store per field, in order, so the time (second) is written last.
        struct.pack_into("qq", _page, _offset, step, time.monotonic_ns())


@contextlib.contextmanager
def quiet(seconds):
    """A phase silent on purpose (evaluation, a checkpoint save, loading data): not hung while it lasts, for
    at most `seconds` from now (past that, a hang is still found). Nests; its end beats."""
    if _page is None:
        yield
        return
    previous = struct.unpack_from("q", _page, _offset + 16)[0]
    struct.pack_into("q", _page, _offset + 16, max(previous, time.monotonic_ns() + int(seconds * 1e9)))
    beat(_step)
    try:
        yield
    finally:
        struct.pack_into("q", _page, _offset + 16, previous)
        beat(_step)


_setup()
