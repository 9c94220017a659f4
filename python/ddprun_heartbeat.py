"""What a Python worker under ddprun can ask of it, as the C++ SDK offers (stdlib only, one file, no torch):
heartbeats and quiet phases for hang detection, a stop request for preemption, and the error file of @record.

    import ddprun_heartbeat          # also asks for Python stacks when ddprun finds the worker hung

    @ddprun_heartbeat.record         # an uncaught exception becomes the root cause's message in ddprun's summary
    def main():
        ddprun_heartbeat.handle_stop_signals()   # SIGTERM/SIGUSR1 now ask the loop to stop instead of killing
        for step, batch in enumerate(loader):
            ...
            ddprun_heartbeat.beat(step)  # a store into shared memory: no system call, safe to call every step
            if ddprun_heartbeat.stop_requested():  # agree across ranks first (below), then save and exit 0
                save_checkpoint(step)
                return 0
        with ddprun_heartbeat.quiet(600):  # evaluation, a checkpoint save: silent for at most 10 minutes
            evaluate(model)

Installed with ddprun (<prefix>/share/ddprun/python), it needs no set-up: ddprun adds its directory to the
end of a Python worker's PYTHONPATH.

Importing it changes nothing in the process but one thing, and only under `ddprun --hang-timeout`: faulthandler
is registered for DDPRUN_STACKS_SIGNAL (the real-time signal ddprun sends for the stacks). No other signal's
disposition changes until the program calls handle_stop_signals() or a function decorated with record().

Heartbeats (README "Hang detection"). Outside ddprun beat(), quiet() and work() do nothing. Under ddprun the
beats feed the live view (ddprun-status) and straggler naming; only --hang-timeout judges a silent worker.
The channel: the descriptor DDPRUN_HEARTBEAT_FD is a shared page; the worker's slot at byte
DDPRUN_HEARTBEAT_OFFSET holds int64 step, then int64 CLOCK_MONOTONIC nanoseconds (time.monotonic_ns()),
written last; at +16 the end of a quiet phase (CLOCK_MONOTONIC nanoseconds, 0: none), written before the beat
that opens it; at +24 the worker's own work so far (nanoseconds), added before a beat.

Stragglers (docs/MONITORING.md "Stragglers"). In a job whose ranks step in lockstep, every rank's step takes as long as the
slowest rank's, so the beats alone cannot tell which rank is slow. Wrap the part of a step that is this rank's
own work, and not a wait for the others, in work(): loading the batch, the forward pass, a backward without
DDP's gradient reduction. ddprun compares each rank's work per step with the other ranks' median:

    for step, batch in enumerate(loader):
        with ddprun_heartbeat.work():
            batch = batch.to(device)
            loss = model(batch)        # DDP reduces gradients inside backward(): leave it out
        loss.backward()
        opt.step()
        ddprun_heartbeat.beat(step)

Stop requests (preemption; the C++ SDK's worker_sdk/stop_request.hpp). A scheduler that wants the nodes back
warns before it kills: SLURM's `--signal=B:USR1@120` sends SIGUSR1, scancel and most schedulers SIGTERM followed
by SIGKILL after a grace period. ddprun forwards both to every worker: SIGUSR1 as a notice (the job goes on),
SIGTERM as the start of a teardown (SIGKILL after --term-timeout, 30 s by default). By default either kills a
Python worker. After handle_stop_signals() they only set a flag that stop_requested() reads, and the training
loop stops at a step boundary: save a checkpoint, return, exit 0 within the grace period. The ranks get the
signal at slightly different moments, so a loop in which every step is a collective must agree before it stops
(a rank that stopped alone would leave the others waiting in the next allreduce); with torch.distributed:

    flag = torch.tensor([1.0 if ddprun_heartbeat.stop_requested() else 0.0])
    dist.all_reduce(flag)            # every rank, at the same point of every step
    if flag.item() > 0: ...          # every rank stops after the same step

What ddprun then exits with (README "Exit codes"): in a SLURM job (SLURM_JOB_ID set), 79 "preempted" when a
SIGUSR1/SIGUSR2 notice or SIGTERM reached ddprun and every worker then exited 0, so the batch script requeues;
outside SLURM, 128+15 = 143 after a SIGTERM (the job was stopped), 0 after a SIGUSR1 (a notice only).

The handlers are installed only by handle_stop_signals(), never by the import nor by stop_requested(), which
until then returns False: a program that never checks the flag must keep dying by SIGTERM, or ddprun's teardown
would wait the whole grace period for it. Call it first in the worker, from the main thread (Python runs signal
handlers there, between bytecodes: while the main thread is inside a long C call, a collective say, the flag is
set once the call returns). It replaces any handler the program had for SIGTERM and SIGUSR1. A child forked
later (a DataLoader worker) never checks the flag: there the handler puts the default action back and lets the
signal do what it would have done.

Re-forming in place (docs/MULTINODE.md "Re-forming in place"). When an elastic job re-forms because a node joined
or was lost (no worker failed), ddprun keeps the workers that offered it instead of restarting them:

    dist.init_process_group("gloo")
    in_place = ddprun_heartbeat.offer_reforms()       # False outside ddprun
    ...                                               # before each step, every rank votes on
    ddprun_heartbeat.reform_pending()                 #   "ddprun handed me a new round" (with the stop request)
    ...                                               # if any rank said so, all leave at the same step:
    dist.destroy_process_group()
    ddprun_heartbeat.take_reform()                    # the round's RANK, WORLD_SIZE, MASTER_* into os.environ
    dist.init_process_group("gloo")                   # the new round's group; then share the newest state

The slot's +32 is ddprun's count of rounds handed over in place, +40 the worker's: 0 none offered, 1 + the rounds
taken up. A round must be taken up within ddprun's --term-timeout.

A node can be lost without dying: frozen (SIGSTOP, a hung kernel) or cut off, its connections still open. Every
collective of the old group waits on it and none fails by itself, so no rank reaches its next step boundary.
ddprun then writes at +48 the number of the re-form whose old group lost the node, and after offer_reforms() a
thread of this module leaves that group at once: it shuts down the process's TCP connections opened for the
group (between the import, or take_reform(), and the first beat() after it; neither a listening socket nor one
of the store at MASTER_PORT), so the waiting collective fails as if the peer had died ("Connection closed by
peer"). The loop's "group broke" path then takes the round up with the last completed step's state: nothing is
saved, loaded or lost. Import this module before init_process_group so that it can tell the group's connections
from the program's own.

Importing it also tells ddprun (the slot's +56) that this worker is past its imports and can meet its peers. When
a node joins a running job whose workers re-form in place, theirs go on training until the joiner's workers say
so, instead of waiting in the new group while the joiner's interpreter starts and imports torch (seconds). So
import it after torch and after slow set-up that needs no peer (the data set, reading the checkpoint file), just
before the process group, and make the first group with init_round_group(), which waits for MASTER_PORT without
torch's one-second retry.

The error file (README "Python": failures). record() is the stdlib counterpart of torch's
torch.distributed.elastic.multiprocessing.errors.record, for the main function: an exception escaping it is
written to TORCHELASTIC_ERROR_FILE (each worker's own path, set by ddprun) in torchelastic's layout,
    {"message": {"message": "<Type>: <text>", "extraInfo": {"py_callstack": "<traceback>", "timestamp": "<unix s>"}}}
and raised again, so the process exits 1 with its traceback on stderr as Python's own handler prints it; ddprun's
summary then shows "root cause error: <Type>: <text>" and the traceback's last frames. The file is replaced if it
exists, as torch's @record and the SDK's run_main do: ddprun gives each worker of each attempt a file of its own
in a new directory, so anything there was written by this process, and the last exception recorded is the one
that ended it (with nested @record, the outer one's traceback, which is the longer). SystemExit and
KeyboardInterrupt pass through unrecorded, as with torch's. Without TORCHELASTIC_ERROR_FILE (outside a launcher)
nothing is written. Like torch's, the decorated function enables faulthandler for fatal signals (SIGSEGV, SIGABRT,
...) when it is called, so a crash in native code prints the Python stacks of every thread. Unlike torch's, the
call stack leaves out the decorator's own frame.
"""
import atexit
import contextlib
import faulthandler
import functools
import json
import mmap
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback

_page = None
_offset = 0
_step = -1
_stacks = None  # faulthandler keeps writing to this file object: it must stay open


def _setup():
    global _page, _offset, _stacks, _sockets_before
    fd = os.environ.get("DDPRUN_HEARTBEAT_FD")
    if fd is None:
        return
    _sockets_before = _tcp_sockets()
    _page = mmap.mmap(int(fd), 0)
    _offset = int(os.environ["DDPRUN_HEARTBEAT_OFFSET"])
    struct.pack_into("q", _page, _offset + _READY_TO_MEET, 1)  # past its imports: it can meet its peers
    atexit.register(_exit_quiet)
    if "DDPRUN_STACKS_FILE" in os.environ:
        _stacks = open(os.environ["DDPRUN_STACKS_FILE"], "w")
        faulthandler.register(int(os.environ["DDPRUN_STACKS_SIGNAL"]), file=_stacks, all_threads=True)


def beat(step=-1):
    """Tells ddprun this worker is alive, at training step `step` (-1: none)."""
    global _step, _group
    _step = step
    if _group is None and _watcher is not None and _watcher == os.getpid():
        _group = _group_connections()  # the round's first beat: its process group is up
    if _page is not None:
        # Native 'q': one 8-byte store per field, in order, so the time (second) is written last.
        struct.pack_into("qq", _page, _offset, step, time.monotonic_ns())


# A rank that finished is not hung while it exits: the handlers registered before this import (torch's), the
# interpreter's finalisation and the process group's destructors run with no beat, and under a short
# --hang-timeout they may outlast it. Bounded, so that an exit that deadlocks is still judged (the C++ SDK's
# kExitQuiet is the same 30 s).
EXIT_QUIET_S = 30


def _open_quiet_phase(seconds):
    """A quiet phase of at most `seconds` from now (never shortening one already open), published by a beat;
    returns the bound it replaced, for the phase's end to restore."""
    previous = struct.unpack_from("q", _page, _offset + 16)[0]
    struct.pack_into("q", _page, _offset + 16, max(previous, time.monotonic_ns() + int(seconds * 1e9)))
    beat(_step)
    return previous


def _exit_quiet():
    if _page is not None:
        _open_quiet_phase(EXIT_QUIET_S)


@contextlib.contextmanager
def quiet(seconds):
    """A phase silent on purpose (evaluation, a checkpoint save, loading data): not hung while it lasts, for
    at most `seconds` from now (past that, a hang is still found). Nests; its end beats.

    The ranks that wait for this one meanwhile (rank 0 saves, the others wait in a barrier or in the next
    step's backward) are not hung either: ddprun's job-wide verdict sees the phase and leaves every silent
    rank alone until it ends or its bound runs out, on every node."""
    if _page is None:
        yield
        return
    previous = _open_quiet_phase(seconds)
    try:
        yield
    finally:
        struct.pack_into("q", _page, _offset + 16, previous)
        beat(_step)


@contextlib.contextmanager
def work():
    """This rank's own work (not waiting for other ranks): its time is added to the slot, published by the next
    beat, for ddprun's straggler naming. Nesting counts the inner time once per level: don't nest."""
    if _page is None:
        yield
        return
    start = time.monotonic_ns()
    try:
        yield
    finally:
        done = struct.unpack_from("q", _page, _offset + 24)[0] + time.monotonic_ns() - start
        struct.pack_into("q", _page, _offset + 24, done)


# The stop request. The signals are the C++ SDK's: SIGUSR1 (SLURM's notice) and SIGTERM (scancel, a teardown).
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_stop_owner = None  # the pid that called handle_stop_signals(); a forked child has another
_stop_by = None     # the signal that asked first, None: no request


def _on_stop_signal(signum, frame):
    global _stop_by
    if os.getpid() != _stop_owner:  # a forked child, which never looks at the flag: the default action
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _stop_by is None:  # the first request wins
        _stop_by = signal.Signals(signum)


def handle_stop_signals():
    """From now on SIGTERM and SIGUSR1 set the stop request (stop_requested()) instead of killing the process.
    Call it from the main thread, first in the worker. Idempotent."""
    global _stop_owner
    if _stop_owner == os.getpid():
        return
    _stop_owner = os.getpid()
    for s in _STOP_SIGNALS:
        signal.signal(s, _on_stop_signal)


def stop_requested():
    """True once SIGTERM or SIGUSR1 arrived after handle_stop_signals(): stop at the next step boundary (save a
    checkpoint, exit 0). Always False before handle_stop_signals()."""
    return _stop_by is not None


def stop_signal():
    """The signal that asked first (signal.SIGTERM or signal.SIGUSR1; `.name` for a log line), None when none."""
    return _stop_by


# Re-forming in place (docs/MULTINODE.md "Re-forming in place"). The slot's +32 is ddprun's count of the in-place re-forms
# it announced; +40 this worker's: 0 none offered, 1 + the re-forms taken up.
_REFORMS_ANNOUNCED = 32
_REFORMS_TAKEN = 40
_GROUP_LOST = 48
_READY_TO_MEET = 56
_sockets_before = None  # {fd: "socket:[inode]"}: this process's TCP sockets before its round's process group
_group = None           # the same for the connections of the round's group, once known (its first beat)
_watcher = None         # the pid whose thread watches for a lost node (a forked child has none)


def _tcp_sockets(connected_only=False, skip_port=None, to_port=None):
    """{fd: "socket:[inode]"} of this process's TCP sockets (the link names an open file: an fd closed and
    reused names another); if asked, connected ones only, and none with `skip_port` at either end, or only those
    whose peer is at `to_port` (not the accepted side of a server at that port)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
            if not link.startswith("socket:"):
                continue
            with socket.socket(fileno=os.dup(int(name))) as s:  # the duplicate only: closing it leaves the fd
                if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM:
                    continue
                if connected_only:
                    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                        continue
                    if skip_port in (s.getsockname()[1], s.getpeername()[1]):  # OSError when not connected
                        continue
                    if to_port is not None and (s.getpeername()[1] != to_port or s.getsockname()[1] == to_port):
                        continue
        except OSError:
            continue
        found[int(name)] = link
    return found


def _store_port():
    """The round's store port (MASTER_PORT; 0 when not set)."""
    return int(os.environ.get("MASTER_PORT", "0") or 0)


def _opened_for_round(**filters):
    """This process's connected TCP sockets opened since _sockets_before, filtered as _tcp_sockets(**filters)."""
    return {fd: link for fd, link in _tcp_sockets(connected_only=True, **filters).items()
            if _sockets_before.get(fd) != link}


def _group_connections():
    """The connections of the round's process group: none of the store's (its server thread aborts the process
    on a socket shut under it)."""
    return _opened_for_round(skip_port=_store_port())


def _store_client_connections():
    """This rank's connections to the round's store: the client side only, never the side of a store this rank
    hosts."""
    return _opened_for_round(to_port=_store_port())


def _leave_group():
    """Shuts the round's group connections down (the fds stay open: the group closes them), after saying so:
    the waiting collective fails at once, and the line must come before whatever that failure makes the program
    print (or its exit). Before the round's first beat the group may not be up yet: init_process_group waits in the
    store for a peer that will never come (a joiner lost while it started, issue 32: the survivors sat there until
    --term-timeout replaced them, ~37 s); then this rank's client connections to the store go too, so that wait
    fails and the program takes the next round up. A store this rank hosts keeps its own side: its server is
    destroyed with the failed init."""
    live = []
    connections = _group if _group is not None else {**_group_connections(), **_store_client_connections()}
    for fd, link in connections.items():
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == link:  # not closed since (the fd would be another file)
                live.append(fd)
        except OSError:
            continue
    print(f"ddprun_heartbeat: a node of this round was lost: shutting down the {len(live)} connections of this "
          "rank's process group, so that no collective waits for the lost node", file=sys.stderr, flush=True)
    for fd in live:
        try:
            with socket.socket(fileno=os.dup(fd)) as s:
                s.shutdown(socket.SHUT_RDWR)
        except OSError:
            continue


def _watch_for_a_lost_node():
    """A thread: when ddprun says a node of this round was lost (+48 reaches the next re-form's number), leaves
    the round's group so that a collective waiting on the lost node fails now."""
    left = 0
    while True:
        time.sleep(0.1)
        lost = struct.unpack_from("q", _page, _offset + _GROUP_LOST)[0]
        taken = struct.unpack_from("q", _page, _offset + _REFORMS_TAKEN)[0]
        if 0 < taken <= lost and lost != left:
            left = lost
            _leave_group()


def offer_reforms():
    """Tells ddprun that this worker can take a new round up without a restart: when an elastic job re-forms
    because nodes joined or were lost (no worker failed), ddprun then keeps it, and hands it the new round's
    RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ... instead (reform_pending(), take_reform()). Call it once the
    process can do so: after init_process_group, with a loop that checks reform_pending(). True under ddprun;
    False elsewhere (torchrun: every re-form restarts the worker, as before)."""
    if _page is None or "DDPRUN_REFORM_FILE" not in os.environ:
        return False
    global _watcher
    if struct.unpack_from("q", _page, _offset + _REFORMS_TAKEN)[0] == 0:
        struct.pack_into("q", _page, _offset + _REFORMS_TAKEN, 1)
    if _watcher != os.getpid() and _sockets_before is not None:
        _watcher = os.getpid()
        threading.Thread(target=_watch_for_a_lost_node, name="ddprun_heartbeat lost node", daemon=True).start()
    return True


def reform_pending():
    """True when ddprun handed this worker a new round it has not taken up yet: leave the current process group
    at the next step boundary (all ranks agree first, as for a stop request), then take_reform(). A shared-memory
    read: cheap enough for every step."""
    if _page is None:
        return False
    announced, taken = struct.unpack_from("qq", _page, _offset + _REFORMS_ANNOUNCED)
    return 0 < taken <= announced


def take_reform(timeout=None, stop=stop_requested, poll=0.01, wait_for_master=True):
    """Waits until ddprun hands over the next round (a rank whose peer is gone waits here for the re-formed
    round; so does one whose peers agreed to re-form before its own agent told it), puts the round's variables in
    os.environ and returns them as a dict; init_process_group("env://") then joins the new round. None when
    `stop()` turns true first (ddprun stops or restarts the job the usual way: SIGTERM), after `timeout` seconds,
    or outside ddprun. Taking a round up is acknowledged to ddprun, which replaces a worker that has not taken it up
    within --term-timeout.

    With wait_for_master, a rank other than 0 then waits until MASTER_ADDR:MASTER_PORT accepts a connection (rank 0
    hosts the store there once it calls init_process_group): torch's store client, refused, tries again only a
    second later (torch 1.13), which would cost up to a second at every re-form."""
    if _page is None or not offer_reforms():
        return None
    deadline = None if timeout is None else time.monotonic() + timeout
    if not _wait_until(reform_pending, stop, deadline, poll):
        return None
    announced = struct.unpack_from("q", _page, _offset + _REFORMS_ANNOUNCED)[0]
    values = {}
    with open(os.environ["DDPRUN_REFORM_FILE"]) as f:  # written whole before the announcement
        for line in f:
            name, _, value = line.rstrip("\n").partition("=")
            if name:
                values[name] = value
    os.environ.update(values)
    global _sockets_before, _group
    _sockets_before, _group = _tcp_sockets(), None  # the new round's group: what opens from here to its first beat
    # The new round starts without a beat, as a new worker's does: until this worker's first beat in it (after
    # init_process_group, which may wait for a joiner's start), --hang-timeout does not judge it.
    struct.pack_into("qq", _page, _offset, -1, 0)
    struct.pack_into("q", _page, _offset + _REFORMS_TAKEN, announced + 1)
    if wait_for_master and os.environ.get("RANK", "0") != "0" and \
            not _wait_until(_master_listens, stop, deadline, min(poll, 0.005)):
        return None
    return values


def init_round_group(backend="gloo", timeout=None):
    """init_process_group for the round take_reform() put in os.environ, in a way a lost node can end. torch's own
    env:// set-up waits for every rank inside the store's constructor on rank 0, holding the GIL (torch 1.13):
    this helper's thread cannot run there, and a joiner lost while it starts leaves the survivors in that wait
    until --term-timeout replaces them (issue 32). Here rank 0's store is made without that wait, so the ranks
    meet in the group's own set-up, where other threads run and a lost node's announcement ends the wait: a
    RuntimeError, after which the caller takes the next round up (take_reform(), then this again). The ranks of a
    joining node, which start with a plain init_process_group("gloo") (env://), meet these ones. `timeout`: a
    datetime.timedelta for the store and the group (torch's default, 30 minutes, when None).

    Also for the first group of a worker: a rank other than 0 waits here until MASTER_PORT accepts, polling every
    5 ms, instead of in torch's store client, which tries again only a second after a refusal (torch 1.13). A
    joiner's workers come to a store that the ranks already running open only once told to meet."""
    import datetime
    import torch.distributed as dist
    env = os.environ
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    timeout = timeout or datetime.timedelta(minutes=30)
    if rank != 0:
        _wait_until(_master_listens, stop_requested, time.monotonic() + timeout.total_seconds(), 0.005)
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), world, rank == 0, timeout,
                          wait_for_workers=False)
    # The keys env:// would use ("default_pg/..."): a joiner's first init_process_group("gloo") meets this rank.
    dist.init_process_group(backend, store=dist.PrefixStore("default_pg", store), rank=rank, world_size=world,
                            timeout=timeout)


def _wait_until(ready, stop, deadline, poll):
    """True once `ready()`; False when `stop()` or the deadline (monotonic seconds, None: none) comes first."""
    while not ready():
        if (stop is not None and stop()) or (deadline is not None and time.monotonic() >= deadline):
            return False
        time.sleep(poll)
    return True


def _master_listens():
    """MASTER_ADDR:MASTER_PORT accepts a connection (closed at once: the store drops it)."""
    where = (os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "0")))
    try:
        socket.create_connection(where, timeout=1).close()
        return True
    except OSError:
        return False


def _error_file_json(error):
    """torchelastic's error file for `error`, being handled in a record() wrapper whose frame is left out."""
    tb = error.__traceback__.tb_next if error.__traceback__ is not None else None
    return json.dumps({"message": {
        "message": f"{type(error).__name__}: {error}",
        "extraInfo": {
            "py_callstack": "".join(traceback.format_exception(type(error), error, tb)),
            "timestamp": str(int(time.time())),
        },
    }})


def record(fn):
    """Decorates the main function: an exception escaping it is written to TORCHELASTIC_ERROR_FILE (when set) in
    torchelastic's layout, as torch's @record writes it, then raised again (exit code 1)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            faulthandler.enable(all_threads=True)
        except Exception:  # no usable stderr (closed, not a file): the error file still works
            pass
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            path = os.environ.get("TORCHELASTIC_ERROR_FILE")
            if path:
                try:
                    text = _error_file_json(error)
                    with open(path, "w") as f:
                        f.write(text)
                except Exception as failure:  # never hide the exception that ends the worker behind this one
                    print(f"ddprun_heartbeat: could not write the error file {path}: {type(failure).__name__}: "
                          f"{failure}", file=sys.stderr, flush=True)
            raise
    return wrapper


_setup()
