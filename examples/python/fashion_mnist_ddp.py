#!/usr/bin/env python3
"""Data-parallel training of a small CNN on Fashion-MNIST, written as a torchrun user writes it.

Runs unchanged under torchrun and under ddprun:
    ddprun   --nproc-per-node 2 examples/python/fashion_mnist_ddp.py --max-steps 200
    torchrun --nproc-per-node 2 examples/python/fashion_mnist_ddp.py --max-steps 200

The patterns it shows:
  - env:// initialisation: init_process_group("gloo") reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE
    from the environment the launcher sets; LOCAL_RANK (also from the environment) picks the device. Under ddprun
    the same group is made by ddprun_heartbeat.init_round_group("gloo"), after the data set and the checkpoint
    file are read and the helper imported: a node joining a running job then costs the others no wait for its
    start (docs/MULTINODE.md "Re-forming in place").
  - a DistributedSampler with set_epoch(), so every rank sees its own shard, reshuffled each epoch.
  - checkpoints written atomically (a temporary file of the writer's own, fsynced, renamed over the old one),
    so a crash in the middle of a save never leaves a half-written checkpoint. Rank 0 saves every
    --checkpoint-every steps, at the end of training, and when the ranks agree to stop.
  - re-forming in place, under ddprun (docs/MULTINODE.md "Re-forming in place"; off with --no-reform-in-place):
    when a node joins or is lost and no worker failed, ddprun keeps this process and hands it the new round. The
    ranks vote on it before a step (below), leave their process group together (a broken one after a loss), take
    the round up (ddprun_heartbeat.take_reform) and join the new group; the rank holding the newest step sends the
    model, optimizer and position to all, so a joiner that loaded an older checkpoint catches up. Nothing is saved
    or loaded for it, and no step is lost beyond the one under way when a node dies.
  - SIGTERM (what ddprun and torchrun send every worker when they restart it: a worker failed, or a re-form under
    torchrun) is a stop request: the handler only sets a flag; before each step the ranks vote (an all-reduce of
    the flag, so all stop after the same step), and on a stop rank 0 saves the last completed step and every
    rank exits 0. SIGUSR1, SLURM's notice before a preemption or the time limit, is the same stop request.
  - a collective that fails because a peer died (its node lost, its process killed): agreeing is impossible,
    but every replica holds the same state, so each surviving rank saves the last completed step alone, then
    exits (0 when a stop was requested as well, else with the error).
  - on start every rank resumes from the checkpoint when the file exists (a restart, a re-form, or a new run
    with the same --checkpoint), at the saved step: mid-epoch, the sampler skips the indices of the batches of
    that epoch already done (without loading them), with the sampler's epoch set as before.
The data is read straight from the Debian package dataset-fashion-mnist (gzipped IDX files): nothing is
downloaded. With --data-cache DIR it is decoded once and kept in DIR, so that a restarted or joining worker
starts sooner.
"""
import argparse
import contextlib
import gc
import gzip
import itertools
import os
import signal
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Sampler, TensorDataset

# ddprun's Python helper (on PYTHONPATH under ddprun): beats, quiet phases, re-forming in place. Absent elsewhere:
# not needed. Imported by main() once the slow set-up is done (import_helper).
ddprun_heartbeat = None


def import_helper():
    """Importing ddprun's helper tells ddprun this worker is past its imports and can meet its peers: when it
    joins a running job, the ranks already training go on until then, instead of waiting in the new group while
    this interpreter starts. So it comes after torch, the data set and the checkpoint file, just before the group."""
    global ddprun_heartbeat
    try:
        import ddprun_heartbeat as helper
    except ImportError:
        return
    ddprun_heartbeat = helper


def beat(step):
    """Alive at `step`: ddprun's hang detection (--hang-timeout), the live view's STEP column, stragglers."""
    if ddprun_heartbeat:
        ddprun_heartbeat.beat(step)


def quiet(seconds):
    """A phase silent on purpose (rank 0's checkpoint save): neither it nor the ranks waiting for it are hung."""
    return ddprun_heartbeat.quiet(seconds) if ddprun_heartbeat else contextlib.nullcontext()

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # of the Fashion-MNIST training images, scaled to [0, 1]


def read_idx(path, limit=0):
    """An IDX file (gzipped) as a uint8 tensor of the shape its header gives; only the first `limit` items
    when limit > 0 (the rest of the file is not even decompressed)."""
    with gzip.open(path, "rb") as f:
        zero, dtype, ndim = struct.unpack(">HBB", f.read(4))
        if zero != 0 or dtype != 0x08:
            raise ValueError(f"{path}: not an IDX file of unsigned bytes")
        shape = list(struct.unpack(f">{ndim}I", f.read(4 * ndim)))
        if limit:
            shape[0] = min(shape[0], limit)
        count = 1
        for n in shape:
            count *= n
        data = f.read(count)
    if len(data) != count:
        raise ValueError(f"{path}: truncated ({len(data)} of {count} bytes)")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(shape)


def save_atomically(obj, path):
    """torch.save, atomic on POSIX: `obj` goes to a temporary file of this process's own (host and pid in its name,
    so ranks or nodes that save at once, as after a peer died, never write the same file), is fsynced, then
    renamed over `path`; the directory is fsynced so that the rename lasts too."""
    tmp = f"{path}.tmp.{socket.gethostname()}.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_split(data_dir, split, limit, cache_dir=""):
    """A split as a TensorDataset. With cache_dir, decoded once: the tensors are kept there (one file per split
    and limit, written atomically: every node may write it at once) and read back by later starts, as long as
    the source files are the ones it was made from (their sizes and modification times). Inflating the .gz files
    is most of a start's CPU after `import torch` (0.38 s against 0.04 s for the decoded copy, measured on the
    project's VM), and a restarted or joining worker starts on cores its peers may be training on."""
    sources = [os.path.join(data_dir, f"{split}-{kind}-idx{dims}-ubyte.gz") for kind, dims in (("images", 3),
                                                                                            ("labels", 1))]
    stamp = [(os.path.abspath(p), st.st_size, st.st_mtime_ns) for p, st in ((p, os.stat(p)) for p in sources)]
    cached = os.path.join(cache_dir, f"{split}-{limit}.pt") if cache_dir else ""
    if cached and os.path.exists(cached):
        try:
            kept = torch.load(cached)
        except Exception as e:  # a cache is disposable: one that cannot be read is made again
            print(f"{cached}: unreadable ({e}); decoding the data set again", file=sys.stderr, flush=True)
            kept = {}
        if isinstance(kept, dict) and kept.get("sources") == stamp:
            return TensorDataset(kept["images"], kept["labels"])
    images, labels = read_idx(sources[0], limit), read_idx(sources[1], limit).long()
    if cached:
        os.makedirs(cache_dir, exist_ok=True)
        save_atomically({"sources": stamp, "images": images, "labels": labels}, cached)
    return TensorDataset(images, labels)


def to_input(images):
    return images.float().div_(255).sub_(MEAN).div_(STD).unsqueeze_(1)


class Net(nn.Module):
    """conv 1->20 5x5, max-pool, conv 20->50 5x5, max-pool, fc 800->500, fc 500->10 (the C++ example's)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.fc1 = nn.Linear(800, 500)
        self.fc2 = nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


class Position:
    """Where the last completed optimizer step left the model: what a checkpoint records. `step_in_epoch` counts
    batches of `global_batch` (per-rank batch x world size of the round that made them)."""

    def __init__(self, epoch, step_in_epoch, step, global_batch):
        self.epoch, self.step_in_epoch, self.step, self.global_batch = epoch, step_in_epoch, step, global_batch


def state_of(model, optimizer, at):
    """What a checkpoint holds, and what a re-formed round's newest rank sends the others."""
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": at.epoch,
            "step_in_epoch": at.step_in_epoch, "step": at.step, "global_batch": at.global_batch}


def restore(state, model, optimizer, default_global_batch):
    """The model and optimizer from `state` (state_of's), and its Position."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return Position(state["epoch"], state["step_in_epoch"], state["step"],
                    state.get("global_batch", default_global_batch))


def save_checkpoint(path, model, optimizer, at):
    save_atomically(state_of(model, optimizer, at), path)


# The signal that asked this rank to stop (0: none yet). The handler only records it; the loop acts on it at a
# step boundary. A rank busy in a collective runs the handler when the collective returns (or fails).
stop_signal = 0


def request_stop(signum, _frame):
    global stop_signal
    if not stop_signal:
        stop_signal = signum


# What the ranks agree on before each step (the vote): go on, re-form in place, or stop.
GO_ON, REFORM, STOP = 0, 1, 2
# The last vote's tensor, kept referenced from Python: gloo's thread drops its own reference after the call
# returns, and the last reference dropped there would need the GIL to free the Python object. Dropping a
# process group (at exit, at a re-form) joins that thread while holding the GIL: torch 1.13 deadlocked there.
last_vote = None


def vote():
    """A collective, called by every rank at the same point of its loop: STOP when any rank got a stop request,
    REFORM when ddprun handed any rank a new round (re-forming in place), else GO_ON. The ranks get SIGTERM (or
    the new round) at slightly different moments; deciding alone, one rank would leave while the others wait for
    it in the next step's all-reduce."""
    global last_vote
    mine = STOP if stop_signal else REFORM if ddprun_heartbeat and ddprun_heartbeat.reform_pending() else GO_ON
    last_vote = torch.tensor([mine], dtype=torch.int32)
    dist.all_reduce(last_vote, op=dist.ReduceOp.MAX)
    return int(last_vote.item())


class GroupBroke(Exception):
    """A collective failed: a peer is gone (its process died, its node was lost)."""


class NeedsPeers:
    """`with NeedsPeers():` around the calls that talk to the other ranks (the DDP forward and backward, the
    stop vote). Gloo reports a dead peer as a RuntimeError ("Connection closed by peer", "Connection reset by
    peer"); inside these blocks the model and the optimizer are untouched (the optimizer steps outside), so
    the state is still the last completed step's."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, _tb):
        if kind is not None and issubclass(kind, RuntimeError):
            lines = str(error).strip().splitlines()
            raise GroupBroke(lines[0] if lines else kind.__name__) from error
        return False


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=DEFAULT_DATA, help="directory of the gzipped IDX files")
    p.add_argument("--data-cache", default="",
                   help="directory to keep the decoded data set in: later starts (a restart, a joining node) read it "
                        "instead of inflating the .gz files (empty: none)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in all (0: no limit)")
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--train-limit", type=int, default=0, help="use only the first N training images (0: all)")
    p.add_argument("--checkpoint", default="", help="checkpoint file (empty: none)")
    p.add_argument("--checkpoint-every", type=int, default=50,
                   help="steps between rank 0's periodic checkpoints (it also saves on SIGTERM, when a peer dies and "
                        "at the end)")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--eval", action="store_true", help="rank 0 reports accuracy on the test set at the end")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (ranks share the cores)")
    # For demonstrating restarts: the last rank raises once, in the first attempt, after this many steps (the other
    # ranks' next collective fails: they save that step alone).
    p.add_argument("--crash-at-step", type=int, default=0)
    p.add_argument("--no-reform-in-place", action="store_true",
                   help="under ddprun too, restart at every re-form (save on SIGTERM, resume from the checkpoint) as "
                        "under torchrun, instead of taking the new round up in this process")
    return p.parse_args()


class ResumeSampler(Sampler):
    """The DistributedSampler's indices from `skip` on: resuming mid-epoch skips the done batches' indices
    without loading them."""

    def __init__(self, sampler):
        self.sampler, self.skip = sampler, 0

    def __iter__(self):
        return itertools.islice(iter(self.sampler), self.skip, None)

    def __len__(self):
        return len(self.sampler) - self.skip


def train(args, ddp, optimizer, loader, sampler, at, checkpoint, device, rank, crash_at):
    """The training loop, from `at` on; `at` follows every completed step. Returns what the ranks voted
    (GO_ON: trained to the end, REFORM, STOP) and the last step's loss on this rank; raises GroupBroke when a
    peer is gone."""
    loss = torch.zeros(())
    done = bool(args.max_steps) and at.step >= args.max_steps
    while at.epoch < args.epochs and not done:
        sampler.sampler.set_epoch(at.epoch)  # the same shuffle on every rank, a different one each epoch
        sampler.skip = at.step_in_epoch * args.batch_size
        for i, (images, labels) in enumerate(loader, start=at.step_in_epoch):
            if crash_at and at.step == crash_at:
                raise RuntimeError(f"rank {rank}: crash requested at step {at.step}")
            # A step boundary: every rank votes on stopping here, before the step, so a stop request costs nothing.
            with NeedsPeers():
                decided = vote()
            if decided != GO_ON:
                return decided, loss
            optimizer.zero_grad()
            with NeedsPeers():
                loss = F.nll_loss(ddp(to_input(images).to(device)), labels.to(device))
                loss.backward()  # the gradients' all-reduce
            optimizer.step()
            at.step, at.step_in_epoch = at.step + 1, i + 1
            beat(at.step)  # after the step, as the README's loop: a rank stuck anywhere in the next one is found
            if rank == 0 and at.step % args.log_every == 0:
                print(f"epoch {at.epoch} step {at.step} loss {loss.item():.4f}", flush=True)
            if rank == 0 and at.step % args.checkpoint_every == 0:
                with quiet(600):  # a slow disk is no hang, for rank 0 nor for the ranks waiting in the next vote
                    checkpoint()
            if args.max_steps and at.step >= args.max_steps:
                done = True
                break
        else:
            at.epoch, at.step_in_epoch = at.epoch + 1, 0
    return GO_ON, loss


def adopt_newest_state(model, optimizer, at, global_batch):
    """Every rank takes the newest state any rank holds, from the lowest rank holding it. After a re-form in
    place the ranks that stayed hold the last completed step in memory, while a rank that joined loaded the
    checkpoint, which may be older; at a plain start all ranks hold the same. The place in the epoch carries over
    in samples: DistributedSampler deals the shuffled order out strided, so the first k global batches are the
    first k * global_batch samples whatever the world size."""
    rank, world = dist.get_rank(), dist.get_world_size()
    newest = torch.tensor([at.step], dtype=torch.int64)
    dist.all_reduce(newest, op=dist.ReduceOp.MAX)
    holder = torch.tensor([rank if at.step == newest.item() else world], dtype=torch.int64)
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    state = [state_of(model, optimizer, at)]
    dist.broadcast_object_list(state, src=int(holder.item()))
    if rank != holder.item():
        at = restore(state[0], model, optimizer, global_batch)
    return Position(at.epoch, at.step_in_epoch * at.global_batch // global_batch, at.step, global_batch)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    # What needs no peer comes before the group (and the helper's import): a joiner's peers train on meanwhile.
    train_set = load_split(args.data, "train", args.train_limit, args.data_cache)
    saved = torch.load(args.checkpoint, map_location=device) \
        if args.checkpoint and os.path.exists(args.checkpoint) else None
    import_helper()
    # Everything made so far (torch's modules, the data set) lives as long as the process: out of the collector's
    # sight from here on, a re-form's gc.collect() below looks at this run's own objects only. With torch's ~100 000
    # objects in view a full collection took 64 ms (idle) to 150 ms (busy) of every re-form; frozen, microseconds.
    gc.freeze()
    if ddprun_heartbeat and "DDPRUN_REFORM_FILE" in os.environ:
        ddprun_heartbeat.init_round_group("gloo")  # env://'s group, meeting without torch's 1 s retry
    else:
        dist.init_process_group("gloo")  # env://
    rank, world = dist.get_rank(), dist.get_world_size()

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
    at = Position(0, 0, 0, args.batch_size * world)
    if saved is not None:
        at = restore(saved, model, optimizer, args.batch_size * world)
        del saved
        print(f"rank {rank}: resumed from {args.checkpoint} at step {at.step} (restart "
              f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}, world size {world})", flush=True)
    # From here on SIGTERM asks for a checkpoint instead of killing the rank. Not earlier: until the group has
    # formed there is nothing to save, and a rank waiting for a dead peer in init_process_group would only be
    # killed later, at the end of the launcher's grace period.
    signal.signal(signal.SIGTERM, request_stop)
    # SLURM's notice before a preemption or the time limit (sbatch --signal=B:USR1@120, scancel -s USR1;
    # examples/slurm/preemptible.sbatch): the same stop request, so the job saves, exits 0 and is requeued
    # (issue 34: by default SIGUSR1 ended every worker, exit 138, and nothing was requeued).
    signal.signal(signal.SIGUSR1, request_stop)
    # Under ddprun: a re-form because nodes joined or were lost keeps this process (it takes the new round up
    # below) instead of restarting it. Elsewhere every re-form restarts the worker, which resumes from the checkpoint.
    in_place = bool(ddprun_heartbeat) and not args.no_reform_in_place and ddprun_heartbeat.offer_reforms()
    saved_step = at.step if args.checkpoint and os.path.exists(args.checkpoint) else -1
    per_epoch = 0  # batches per epoch in this round

    def checkpoint():
        """Saves `at` unless this process knows the checkpoint holds it already; says which."""
        nonlocal saved_step
        if not args.checkpoint:
            return "no --checkpoint, nothing saved"
        what = "already holds"
        if at.step != saved_step:
            save_checkpoint(args.checkpoint, model, optimizer, at)
            saved_step, what = at.step, "saved at"
        return f"checkpoint {args.checkpoint} {what} step {at.step} (epoch {at.epoch}, batch {at.step_in_epoch} of " \
               f"{per_epoch})"

    def next_round(why):
        """Re-forming in place: leaves this round's group and joins the next one ddprun hands over. False when
        ddprun stops the job instead (SIGTERM: the usual restart, or the end)."""
        nonlocal rank, world
        print(f"rank {rank}: {why}; waiting for the next round", flush=True)
        # The old group must really go: its sockets close, so a peer still waiting in a collective on this rank
        # fails and comes to the new round too. DDP sits in reference cycles (its hooks): collect them first
        # (cheap: what main() made before its first group is frozen, gc.freeze above).
        gc.collect()
        dist.destroy_process_group()  # the vote's tensor is still referenced (last_vote): no deadlock here
        while True:
            if ddprun_heartbeat.take_reform(stop=lambda: bool(stop_signal)) is None:
                return False
            try:
                ddprun_heartbeat.init_round_group("gloo")  # the new round's MASTER_*, RANK, WORLD_SIZE
                break
            except RuntimeError as e:
                # A peer of the new round was lost before its group was up (a joiner that died while starting):
                # ddprun's helper ended the wait in the store, and the next round is on its way.
                print(f"rank {rank}: the new round's group did not form ({e}); waiting for the next round",
                      flush=True)
            gc.collect()  # out of the handler: the failure's traceback no longer holds the half-made store
        rank, world = dist.get_rank(), dist.get_world_size()
        return True

    t0 = time.monotonic()
    # For demonstrating restarts: the last rank raises once, in the first attempt, at --crash-at-step.
    crash_at = args.crash_at_step if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0" and rank == world - 1 \
        else 0
    reformed = False
    while True:  # one pass per round this process trains in
        broke, ddp = None, None
        try:
            # The round's set-up talks to the other ranks too: a node lost here (a joiner's start is the slow
            # part of a re-form, and the next loss may come during it) breaks the group as in a step, and the
            # rank takes the next round up instead of failing (a failure would restart every worker).
            with NeedsPeers():
                at = adopt_newest_state(model, optimizer, at, args.batch_size * world)
                ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters to every rank
            if reformed and rank == 0:
                print(f"rank 0: re-formed in place at step {at.step} (restart "
                      f"{os.environ['TORCHELASTIC_RESTART_COUNT']}, world size {world})", flush=True)
            sampler = ResumeSampler(DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True,
                                                       seed=0))
            loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
            per_epoch = len(sampler.sampler) // args.batch_size
            decided, loss = train(args, ddp, optimizer, loader, sampler, at, checkpoint, device, rank, crash_at)
        except GroupBroke as e:
            if not in_place or stop_signal:
                # Agreeing on who saves is impossible now, but every surviving replica holds the last completed
                # step: each saves it alone, so the next round resumes there and not at the last periodic checkpoint.
                print(f"rank {rank}: the group broke ({e}); {checkpoint()}", flush=True)
                if stop_signal:
                    return 0  # the launcher is stopping the job anyway: the checkpoint is what it asked for
                raise
            broke = str(e)  # not the exception: its traceback would keep `ddp`, so the old group, alive
        del ddp
        if broke is not None:
            # A peer is gone. Under ddprun its node's loss re-forms the job: wait for the new round in place.
            if next_round(f"the group broke ({broke})"):
                reformed = True
                continue
            print(f"rank {rank}: stopped while re-forming; {checkpoint()}", flush=True)
            return 0
        # Another rank stops but this one was not asked to: its node restarts its workers while this node's stay
        # (they offered, that one did not). The restarted ranks resume from the checkpoint: rank 0 saves it.
        if decided == STOP and in_place and not stop_signal:
            decided = REFORM
            if rank == 0:
                print(f"rank 0: another rank stops; {checkpoint()}", flush=True)
        if decided == REFORM:
            reformed = next_round("ddprun re-forms the job")
            if reformed:
                continue
            print(f"rank {rank}: stopped while re-forming; {checkpoint()}", flush=True)
            return 0
        break
    if decided == STOP:
        if rank == 0:
            what = checkpoint()
            print(f"rank 0: stop requested by {signal.Signals(stop_signal or signal.SIGTERM).name}: {what}; exiting",
                  flush=True)
        dist.destroy_process_group()
        return 0
    elapsed = time.monotonic() - t0
    if rank == 0:
        checkpoint()  # the end of training: a restart after this point has nothing to redo
    print(f"rank {rank}: finished at step {at.step}, loss {loss.item():.4f}, {elapsed:.2f} s", flush=True)

    if args.eval and rank == 0:
        test = load_split(args.data, "t10k", 0, args.data_cache)
        model.eval()
        with torch.no_grad():
            pred = model(to_input(test.tensors[0]).to(device)).argmax(1)
        accuracy = (pred.cpu() == test.tensors[1]).float().mean().item()
        print(f"test accuracy {accuracy:.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
