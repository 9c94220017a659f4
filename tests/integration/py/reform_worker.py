"""A worker that re-forms in place, stdlib only (python/ddprun_heartbeat.py): it offers, beats every 50 ms, and
takes each new round up when ddprun hands one over. For every round it runs in, it writes DIR/round.<RANK>.<RESTART>
holding "pid world group_rank master_port", then waits for more. It exits 0 once DIR/go exists.

    reform_worker.py DIR [no-offer] [never-take] [quiet-after-take=SEC] [exit-on=PATH] [slow-term=SEC]

no-offer: never offers (ddprun restarts it at a re-form, as any worker); never-take: offers but never takes a round
up (ddprun kills it after --term-timeout); quiet-after-take=SEC: after taking a round up, silent for SEC s before
its next beat (a rank waiting in init_process_group for a joiner that is still starting); exit-on=PATH: exits 3 once
PATH exists (local rank 0 only); slow-term=SEC: SIGTERM makes it exit 0 SEC s later; slow-start=SEC: SEC s
before it imports the helper (an interpreter importing torch), then it writes DIR/imported.<RANK>; hang-after-import:
once the helper is imported (it can meet its peers) it hangs before its first beat (stuck on a mount, in its data
loading)."""
import os
import signal
import sys
import time

out_dir = sys.argv[1]
flags = dict(a.partition("=")[::2] for a in sys.argv[2:])
if "slow-start" in flags:
    time.sleep(float(flags["slow-start"]))
    with open(os.path.join(out_dir, f"imported.{os.environ['RANK']}"), "w"):
        pass
import ddprun_heartbeat  # noqa: E402  (its import says this worker can meet its peers: after the slow start)

if "hang-after-import" in flags:
    while True:
        time.sleep(3600)


def mark_round():
    env = os.environ
    path = os.path.join(out_dir, f"round.{env['RANK']}.{env['TORCHELASTIC_RESTART_COUNT']}")
    with open(path + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {env['WORLD_SIZE']} {env['GROUP_RANK']} {env['MASTER_PORT']}\n")
    os.replace(path + ".tmp", path)


if "slow-term" in flags:
    signal.signal(signal.SIGTERM, lambda *_: (time.sleep(float(flags["slow-term"])), os._exit(0)))
mark_round()
if "no-offer" not in flags:
    assert ddprun_heartbeat.offer_reforms(), "not under ddprun"
step = 0
go = os.path.join(out_dir, "go")
while not os.path.exists(go):
    if "exit-on" in flags and os.environ["LOCAL_RANK"] == "0" and os.path.exists(flags["exit-on"]):
        sys.exit(3)
    if "never-take" not in flags and ddprun_heartbeat.reform_pending():
        taken = ddprun_heartbeat.take_reform(wait_for_master=False)  # no store here
        assert taken is not None and taken["RANK"] == os.environ["RANK"], taken
        mark_round()
        time.sleep(float(flags.get("quiet-after-take", "0")))
    step += 1
    ddprun_heartbeat.beat(step)
    time.sleep(0.05)
print(f"rank {os.environ['RANK']} pid {os.getpid()} done", flush=True)
