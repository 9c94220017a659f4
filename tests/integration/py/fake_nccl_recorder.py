"""A worker that keeps ProcessGroupNCCL's side of the Flight Recorder's dump-on-demand contract, stdlib only (no GPU,
no NCCL here): from the variables ddprun set, it makes the FIFO TORCH_NCCL_DEBUG_INFO_PIPE_FILE + RANK + ".pipe",
holds it open O_RDONLY | O_NONBLOCK, reads it once a second from a thread of its own and, on any byte, writes its
"dump" to TORCH_FR_DUMP_TEMP_FILE (else TORCH_NCCL_DEBUG_INFO_TEMP_FILE) + RANK. torch's lines it copies are in
tests/integration/test_hang_nccl.py's docstring.

argv: what this rank does after beating steps 0-2, `--hung-rank R` ranks (the others keep beating), and
`--dump-delay SEC` (0): how long the dump takes once asked for (torch 2.11 on an H100 took 4.4 s for 20 entries):
  hang        stop beating and wait (the hung rank), the recorder still listening
  gone        close the FIFO's read end first: the FIFO stays, its reader is gone (what a dead process leaves)
"""
import os
import pickle
import sys
import threading
import time

import ddprun_heartbeat


def listen(pipe, dump, rank, keep_reader, delay):
    # DumpPipe's constructor: unlink(filename) unless ENOENT; mkfifo(filename, 0666); open(O_RDONLY | O_NONBLOCK).
    try:
        os.unlink(pipe)
    except FileNotFoundError:
        pass
    os.mkfifo(pipe, 0o666)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    if not keep_reader:
        os.close(fd)
        return

    def monitor():
        while True:
            time.sleep(1.0)  # TORCH_NCCL_COORD_CHECK_MILSEC's 1000 ms, with TORCH_NCCL_DUMP_ON_TIMEOUT on
            try:
                got = os.read(fd, 128)  # shouldDump(): read(fd_, &buf, 128) > 0
            except BlockingIOError:
                got = b""
            if got:
                time.sleep(delay)  # dump_nccl_trace: the ring buffer and its entries' stacks, pickled
                # DebugInfoWriter::write: one ofstream over the file, the pickled ring buffer in it.
                with open(dump, "wb") as f:
                    f.write(pickle.dumps({"version": "2.x", "rank": rank, "pipe": pipe, "entries": []}))

    threading.Thread(target=monitor, daemon=True).start()


def main():
    mode = sys.argv[1]
    hung = {int(r) for r in sys.argv[sys.argv.index("--hung-rank") + 1].split(",")}
    delay = float(sys.argv[sys.argv.index("--dump-delay") + 1]) if "--dump-delay" in sys.argv else 0.0
    rank = int(os.environ["RANK"])
    prefix = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
    dump_prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE", os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                                                                           "/tmp/nccl_trace_rank_"))
    if prefix and int(os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")) > 0:
        listen(f"{prefix}{rank}.pipe", f"{dump_prefix}{rank}", rank, keep_reader=mode != "gone", delay=delay)
    for step in range(3):
        ddprun_heartbeat.beat(step)
        time.sleep(0.05)
    while True:
        if rank not in hung:
            ddprun_heartbeat.beat(3)
        time.sleep(0.1)


main()
