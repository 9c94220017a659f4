"""A gloo training loop that re-forms in place as the Python example does (examples/python/fashion_mnist_ddp.py,
python/ddprun_heartbeat.py), with real torch.distributed: each step an all_reduce that also carries "a new round
is pending" (so every rank leaves at the same step boundary), then a beat. A broken group (a peer lost) or a
pending round: destroy the group, take the next round up, init_process_group again; an init that fails because a
peer of that round was lost before the group was up waits for the round after it, as the example does. For every
round it trains in it writes DIR/round.<RANK>.<RESTART> holding "pid world" (and DIR/taken.<RANK>.<RESTART> as it
takes a round up, before its init_process_group); it exits 0 once DIR/go exists.

    reform_torch.py DIR [start-delay=SEC]

start-delay=SEC: sleeps SEC s before its first init_process_group (a joiner still importing torch, or starting
slowly on a loaded node), so a node killed meanwhile is lost before the new round's group is up."""
import gc
import os
import sys
import time

import torch
import torch.distributed as dist

import ddprun_heartbeat

out_dir = sys.argv[1]
flags = dict(a.partition("=")[::2] for a in sys.argv[2:])
go = os.path.join(out_dir, "go")


def mark_round():
    env = os.environ
    path = os.path.join(out_dir, f"round.{env['RANK']}.{env['TORCHELASTIC_RESTART_COUNT']}")
    with open(path + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {env['WORLD_SIZE']}\n")
    os.replace(path + ".tmp", path)


def join_next_round():
    """Leaves this round's group and joins the next one ddprun hands over, however many are lost meanwhile."""
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    while True:
        assert ddprun_heartbeat.take_reform() is not None, "not under ddprun"
        env = os.environ
        with open(os.path.join(out_dir, f"taken.{env['RANK']}.{env['TORCHELASTIC_RESTART_COUNT']}"), "w"):
            pass  # taken up: from here it waits in init_process_group for the round's peers
        try:
            ddprun_heartbeat.init_round_group("gloo")
            return
        except RuntimeError as e:
            print(f"pid {os.getpid()}: round {os.environ['TORCHELASTIC_RESTART_COUNT']} did not form ({e})",
                  flush=True)
        gc.collect()


torch.set_num_threads(1)
time.sleep(float(flags.get("start-delay", "0")))
dist.init_process_group("gloo")
assert ddprun_heartbeat.offer_reforms(), "not under ddprun"
mark_round()
step = 0
while True:
    flags_now = torch.tensor([1.0 if ddprun_heartbeat.reform_pending() else 0.0,
                              1.0 if os.path.exists(go) else 0.0])
    try:
        dist.all_reduce(flags_now)
    except RuntimeError:
        flags_now = torch.tensor([1.0, 0.0])  # a peer is gone: its node's loss re-forms the job
    if flags_now[1] > 0:
        break
    if flags_now[0] > 0:
        join_next_round()
        mark_round()
        continue
    step += 1
    ddprun_heartbeat.beat(step)
    time.sleep(0.05)
print(f"rank {os.environ['RANK']} pid {os.getpid()} done", flush=True)
dist.destroy_process_group()
