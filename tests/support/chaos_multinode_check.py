"""The checks of a multi-node chaos run (chaos_multinode.py runs it; its docstring lists what is checked):
rounds and restart counts, exit codes against the failures injected, orphans, output lines, time bounds."""
from chaos_multinode import (ENV_RE, HUNG_CODE, Injection, LINE_RE, LOST_NODE, LOST_SERVER, RDZV_TIMEOUT,
                             REFUSED, RUN_BOUND_S, signum)
from chaos_support import code_of, status_of


class Round:
    def __init__(self, e):
        self.rc = e["restart_count"]
        self.nnodes = e["nnodes"]
        self.world_size = e["world_size"]
        self.node_rank = e["node_rank"]
        self.rank_offset = e["rank_offset"]
        self.master_port = e.get("master_port")
        self.time_ms = e.get("time_ms", 0)
        self.started = {}         # lr -> started event
        self.exited = {}          # lr -> exited event
        self.hung = set()         # local ranks found hung
        self.reform = None        # the "restarting" event that ended this round, if one did


def rounds_of(events):
    rounds = []
    for e in events:
        kind = e.get("event")
        if kind == "rendezvous":
            rounds.append(Round(e))
        elif rounds and kind == "started":
            rounds[-1].started[e["local_rank"]] = e
        elif rounds and kind == "exited":
            rounds[-1].exited.setdefault(e["local_rank"], e)
        elif rounds and kind == "hung":
            rounds[-1].hung.add(e["local_rank"])
        elif rounds and kind == "restarting" and rounds[-1].reform is None:
            rounds[-1].reform = e
    return rounds


def worker_fates(plan, o, rounds):
    """The in-worker failures that happened: a worker reached its fate's step and ended as planned (a hang:
    reached it; it is hung if nothing ended the round first)."""
    found = []
    for (node, rc, lr), prog in plan.programs.items():
        if not prog.fate or o.counts.get((node, rc, lr)) != prog.fate[2]:
            continue
        rnd = next((r for r in rounds.get(node, []) if r.rc == rc), None)
        e = rnd.exited.get(lr) if rnd else None
        kind, value, _ = prog.fate
        if kind == "hang":
            found.append(Injection("hang", node, rc, lr))
        elif e is not None and status_of(e) == prog.expected_status():
            found.append(Injection(kind, node, rc, lr, value))
    return found


def check_run(plan, o):
    """The contract's violations in this run (empty: the run is fine)."""
    problems = []
    agents = o.agents
    for node, a in agents.items():
        if a.timed_out:
            problems.append(f"agent {node} did not end within {RUN_BOUND_S:.0f} s (SIGKILLed by the runner); "
                            "there were: " + "; ".join(a.hung_info))
    if o.left:
        problems.append("processes outlived every agent: " + "; ".join(o.left_info))
    if plan.host not in agents or (len(agents) < len(plan.initial) and agents[plan.host].code is not None):
        problems.append(f"the host agent ended before it listened: exit {agents[plan.host].code}")
        return problems
    for node, err in o.events_error.items():
        problems.append(f"agent {node}: events file unreadable: {err}")

    rounds = {node: rounds_of(o.events.get(node, [])) for node in agents}
    by_round = _injected_by_round(rounds, list(o.injections) + worker_fates(plan, o, rounds))
    found, per_rc, restarts_used = _check_rounds(plan, o, rounds, by_round)
    problems += found
    final_rc = max(per_rc) if per_rc else None
    final = {node for node, r in per_rc.get(final_rc, [])}
    survivors = [n for n in final if agents[n].signalled is None and not agents[n].timed_out]
    codes = {n: agents[n].code for n in survivors}
    problems += _check_agents(plan, o, rounds, final, final_rc, codes)
    problems += _check_outcome(plan, o, rounds, final, final_rc, survivors, codes, by_round, restarts_used)
    return problems + check_output(plan, o, rounds)


def _injected_by_round(rounds, injected):
    """Round -> the injections that may have caused its end."""
    by_round = {}
    for i in injected:
        targets = {i.rc}
        if i.kind.startswith("agent_"):
            # A signal to an agent lands in the round its node was in when it was sent (the trigger's round may
            # be over by then: a join or another failure re-formed the job), or in the next one if a re-form
            # was under way: both count.
            held = [r.rc for r in rounds.get(i.node, []) if r.time_ms <= i.wall_ms]
            now = max(held) if held else i.rc
            targets |= {now, now + 1}
        for rc in targets:
            by_round.setdefault(rc, []).append(i)

    return by_round


def _check_rounds(plan, o, rounds, by_round):
    """Rounds consecutive on every agent, the same picture on every node, each re-form explained; returns
    (problems, round -> [(node, Round)], restarts charged)."""
    problems = []
    agents = o.agents
    first_round = {}
    per_rc = {}
    for node, rs in rounds.items():
        if rs:
            first_round[node] = rs[0].rc
        for prev, cur in zip(rs, rs[1:]):
            if cur.rc != prev.rc + 1:
                problems.append(f"agent {node}: round {cur.rc} follows round {prev.rc}")
        if rs and rs[0].rc != 0 and not agents[node].joiner and not plan.elastic:
            problems.append(f"agent {node}: first round is {rs[0].rc}, not 0")
        for r in rs:
            per_rc.setdefault(r.rc, []).append((node, r))
            if not agents[node].killed and set(r.started) != set(r.exited):
                problems.append(f"agent {node} round {r.rc}: local ranks {sorted(r.started)} started, "
                                f"{sorted(r.exited)} exited")
            for lr, e in r.started.items():
                if e.get("rank") != r.rank_offset + lr or not 0 <= lr < plan.nproc[node]:
                    problems.append(f"agent {node} round {r.rc}: local rank {lr} started as rank {e.get('rank')}, "
                                    f"offset {r.rank_offset}")
    for rc, members in sorted(per_rc.items()):
        views = {(r.nnodes, r.world_size, r.master_port) for _, r in members}
        if len(views) != 1:
            problems.append(f"round {rc}: nodes disagree on (nnodes, world size, master port): "
                            + ", ".join(f"{n}: {(r.nnodes, r.world_size, r.master_port)}" for n, r in members))
            continue
        nnodes, world, _ = views.pop()
        ranks = sorted(r.node_rank for _, r in members)
        if len(set(ranks)) != len(ranks) or any(not 0 <= x < nnodes for x in ranks):
            problems.append(f"round {rc}: node ranks {ranks} of {nnodes} nodes")
        if not plan.min_nodes <= nnodes <= plan.max_nodes:
            problems.append(f"round {rc}: {nnodes} nodes, outside {plan.nnodes_arg()}")
        if len(members) == nnodes:
            offset = 0
            for node, r in sorted(members, key=lambda m: m[1].node_rank):
                if r.rank_offset != offset:
                    problems.append(f"round {rc}: node {node} (node rank {r.node_rank}) has rank offset "
                                    f"{r.rank_offset}, the nodes below it hold {offset} ranks")
                offset += plan.nproc[node]
            if offset != world:
                problems.append(f"round {rc}: world size {world}, the nodes hold {offset} workers")
        elif len(members) > nnodes or not any(a.killed for a in agents.values()):
            problems.append(f"round {rc}: {nnodes} nodes, but agents {[n for n, _ in members]} took part")

    final_rc = max(per_rc) if per_rc else None
    joins_at = {rc for node, rc in first_round.items() if rc > 0}
    restarts_used = 0
    for rc in range(1, (final_rc or 0) + 1):
        if rc not in per_rc:
            problems.append(f"round {rc} was never held, yet round {final_rc} was")
        # What re-formed the job after round rc-1: every node of that round says so in its "restarting" event
        # ("membership": a join, free; a node gone while MIN remain, free too: its reason says "no restart used";
        # else a failure, which costs a restart). Builds from before elastic membership do not say: a failure.
        reforms = [r.reform for _, r in per_rc.get(rc - 1, []) if r.reform is not None]
        kinds = {bool(e.get("membership")) for e in reforms}
        if len(kinds) > 1:
            problems.append(f"round {rc - 1}: nodes disagree on why the job re-formed: {reforms}")
        if kinds == {True}:
            if rc not in joins_at:
                problems.append(f"round {rc} re-formed for a membership change, yet no node joined in it")
            continue
        if not all("no restart used" in (e.get("reason") or "") for e in reforms):
            restarts_used += 1
        if not by_round.get(rc - 1):
            problems.append(f"round {rc} began with no failure injected into round {rc - 1}"
                            f"{' and no node joining' if plan.elastic else ''}: {reforms}")
    if restarts_used > plan.max_restarts:
        problems.append(f"{restarts_used} restarts charged (last round {final_rc}, joins at {sorted(joins_at)}), "
                        f"--max-restarts {plan.max_restarts}")

    return problems, per_rc, restarts_used


def _check_agents(plan, o, rounds, final, final_rc, codes):
    """Each agent's exit against its summary and its part in the job: the last round's, gone on a signal, a
    joiner refused or too late."""
    problems = []
    agents = o.agents
    for node, a in agents.items():
        evs = o.events.get(node, [])
        summary = evs[-1] if evs and evs[-1].get("event") == "summary" else None
        if a.killed:
            continue
        if summary is None:
            problems.append(f"agent {node} (exit {a.code}): its events file ends without a summary")
        elif summary.get("exit_code") != a.code:
            problems.append(f"agent {node} exited {a.code}, its summary says {summary.get('exit_code')}")
        if summary is not None and ("earlier_rounds" in summary or plan.elastic):
            # The story of the job as this node saw it: each of its rounds that ended in a re-form.
            told = [(x.get("round"), x.get("nnodes"), x.get("world_size")) for x in summary.get("earlier_rounds", [])]
            seen = [(r.rc, r.nnodes, r.world_size) for r in rounds[node] if r.reform is not None]
            if told != seen:
                problems.append(f"agent {node}: the summary's earlier rounds (round, nnodes, world size) {told}, "
                                f"its events show {seen}")
        if a.code is not None and a.code < 0:
            problems.append(f"agent {node} died of signal {-a.code}, which the runner did not send")
        if node not in final:
            if a.signalled:
                if a.code not in (128 + signum(a.signalled),):
                    problems.append(f"agent {node} left on SIG{a.signalled} but exited {a.code}")
            elif a.joiner and not rounds[node]:
                # Refused at MAX nodes, or the job ended before it got in.
                if a.code not in (REFUSED, LOST_SERVER, RDZV_TIMEOUT) and not (codes and a.code in codes.values()):
                    problems.append(f"joiner {node} never took part and exited {a.code}")
                if a.code == REFUSED:
                    problems += _check_refusal(plan, o, node)
            elif final_rc is not None:
                problems.append(f"agent {node} left after round {rounds[node][-1].rc if rounds[node] else None} "
                                f"(exit {a.code}) though nothing stopped it; the job went on to round {final_rc}")
    return problems


def _check_outcome(plan, o, rounds, final, final_rc, survivors, codes, by_round, restarts_used):
    """The job's exit code, the same on every node of its last round, explained by what was injected."""
    problems = []
    agents = o.agents
    if len(set(codes.values())) > 1:
        problems.append(f"the agents of the last round exited differently: {codes}")
    if final_rc is None:
        if not any(i.kind.startswith("agent_") for i in o.injections):
            problems.append("no round was ever held")
        return problems
    job_code = next(iter(codes.values()), None)
    for n in final:
        a = agents[n]
        if a.signalled and not a.killed and a.code not in (128 + signum(a.signalled), job_code):
            problems.append(f"agent {n} got SIG{a.signalled} and exited {a.code} (the job: {job_code})")
    if job_code is None:
        return problems
    cause = None
    for n in survivors:
        s = o.events[n][-1] if o.events.get(n) else {}
        cause = cause or s.get("root_cause")
    last = by_round.get(final_rc, [])
    if job_code == 0:
        if cause:
            problems.append(f"exit 0 with a root cause: {cause}")
        for n in final:
            r = next(r for r in rounds[n] if r.rc == final_rc)
            for lr in range(plan.nproc[n]):
                e = r.exited.get(lr)
                if e is None or status_of(e) != ("exit", 0):
                    problems.append(f"exit 0, but worker {n}/{lr} of round {final_rc} ended {e}")
        return problems
    if not cause:
        problems.append(f"exit {job_code} without a root cause in the summary")
        return problems
    ok, restartable = _explain(plan, o, rounds, final_rc, cause, job_code, last)
    if not ok:
        problems.append(f"round {final_rc} ended with exit {job_code}, root cause {cause.get('description', cause)}; "
                        f"injected into that round: {last}")
    elif restartable and restarts_used < plan.max_restarts:
        problems.append(f"the job ended on a restartable failure with {plan.max_restarts - restarts_used} "
                        f"restart(s) left: {cause.get('description', cause)}")
    return problems


def _check_refusal(plan, o, node):
    """A joiner refused (exit 77) must have come while MAX nodes ran: some round that held MAX nodes was the
    current one at some moment between its start and its exit."""
    start = next((i.wall_ms for i in o.injections if i.kind == "join" and i.node == node), None)
    a = o.agents[node]
    if start is None:
        return []
    end = start + (a.elapsed or 0) * 1000
    held = sorted((e["time_ms"], e["nnodes"]) for evs in o.events.values() for e in evs
                  if e.get("event") == "rendezvous")
    before = [n for t, n in held if t <= start]
    during = ([before[-1]] if before else []) + [n for t, n in held if start < t <= end]
    # Nodes that joined and wait for the next re-form count towards MAX too: the other agents alive then.
    alive = [n for n, b in o.agents.items() if n != node and b.code != REFUSED and b.wall0_ms <= start and
             b.wall0_ms + (b.elapsed or 0) * 1000 >= start]
    if plan.max_nodes not in during and len(alive) < plan.max_nodes:
        return [f"joiner {node} was refused (exit {REFUSED}) while the job held {sorted(set(during))} of at most "
                f"{plan.max_nodes} nodes, and {len(alive)} other agents ran ({', '.join(alive)})"]
    return []


def _explain(plan, o, rounds, rc, cause, code, injected):
    """Is `cause` (exit `code`) one of the failures injected into round `rc`? Returns (ok, restartable)."""
    node_of = {r.node_rank: n for n, rs in rounds.items() for r in rs if r.rc == rc}
    nnodes = next(r.nnodes for rs in rounds.values() for r in rs if r.rc == rc)
    node = node_of.get(cause.get("node_rank"))
    rank = cause.get("rank", -1)
    if rank is not None and rank >= 0 and node is not None:
        r = next(r for r in rounds[node] if r.rc == rc)
        lr = rank - r.rank_offset
        e = r.exited.get(lr)
        for i in injected:
            if i.node != node or i.local_rank != lr:
                continue
            if i.kind in ("hang", "worker_stop") and code == HUNG_CODE and lr in r.hung:
                return True, True
            if e is not None and code == code_of(status_of(e)) and i.kind in ("exit", "signal", "worker_signal"):
                if i.kind != "worker_signal" or status_of(e) == ("signal", signum(i.value)):
                    return True, True
        return False, True
    # A node-level cause: an agent stopped or lost, or the server gone with its host.
    for i in injected:
        if not i.kind.startswith("agent_"):
            continue
        remaining_ok = plan.elastic and nnodes - 1 >= plan.min_nodes
        if i.kind == "agent_kill":
            if i.node == plan.host and code == LOST_SERVER:
                return True, False
            if code == LOST_NODE and node in (i.node, None):
                return True, remaining_ok
        elif code == 128 + signum(i.value):
            return True, remaining_ok
    return False, False


def check_output(plan, o, rounds):
    problems = []
    for node, a in o.agents.items():
        if a.killed:
            continue
        rank_of = {(r.rc, lr): e.get("rank") for r in rounds.get(node, []) for lr, e in r.started.items()}
        round_of = {r.rc: r for r in rounds.get(node, [])}
        got, env = {}, {}
        for line in a.stdout.splitlines():
            m = ENV_RE.match(line)
            if m:
                prefix, n, rc, lr, rank, world, group, rc_env, port = \
                    [int(x) if x.isdigit() else x.decode() for x in m.groups()]
                r = round_of.get(rc)
                seen = (prefix, n, rank, world, group, rc_env, port)
                want = (rank_of.get((rc, lr)), node, rank_of.get((rc, lr)), r and r.world_size, r and r.node_rank,
                        rc, r and r.master_port)
                if seen != want or (rc, lr) in env:
                    problems.append(f"agent {node}: worker {lr} of round {rc} saw (prefix rank, node, RANK, "
                                    f"WORLD_SIZE, GROUP_RANK, TORCHELASTIC_RESTART_COUNT, MASTER_PORT) = {seen}, "
                                    f"the rendezvous said {want}{' (twice)' if (rc, lr) in env else ''}")
                env[(rc, lr)] = seen
                continue
            m = LINE_RE.match(line)
            if not m:
                problems.append(f"agent {node}: stdout line not whole or not a worker's: {line[:120]!r}")
                break
            rank, n, rc, lr, i = int(m.group(1)), m.group(2).decode(), int(m.group(3)), int(m.group(4)), \
                int(m.group(5))
            if n != node or rank_of.get((rc, lr)) != rank:
                problems.append(f"agent {node}: line {line[:80]!r} under rank {rank}; worker {n}/{lr} of round "
                                f"{rc} was rank {rank_of.get((rc, lr))} here")
                break
            got.setdefault((rc, lr), []).append(i)
        for (rc, lr), seq in got.items():
            if (rc, lr) not in env:
                problems.append(f"agent {node}: worker {lr} of round {rc} printed lines but not its environment")
            if seq != list(range(len(seq))):
                problems.append(f"agent {node}: worker {lr} of round {rc}: lines out of order or missing: "
                                f"{_gaps(seq)}")
        for (n, rc, lr), count in o.counts.items():
            if n != node:
                continue
            m = len(got.get((rc, lr), []))
            if not count <= m <= count + 1:
                problems.append(f"agent {node}: worker {lr} of round {rc} wrote {count} counted lines, "
                                f"{m} reached stdout")
    return problems


def _gaps(seq):
    for j, v in enumerate(seq):
        if v != j:
            return f"position {j} holds {v} ({len(seq)} lines)"
    return "?"


def injections_of(plan, o):
    """Every failure injected into the run, by kind (the figure's count): external ones as sent, in-worker
    ones as they happened. An agent stopped in an elastic run is a node leaving ("leave_kill", ...); a join
    is "join" (admitted to a round), "join_refused" (exit 77 at MAX nodes) or "join_late" (the job ended
    before it got in)."""
    rounds = {node: rounds_of(o.events.get(node, [])) for node in o.agents}
    out = []
    for i in list(o.injections) + worker_fates(plan, o, rounds):
        if i.kind == "join":
            out.append("join" if rounds.get(i.node) else
                       "join_refused" if o.agents[i.node].code == REFUSED else "join_late")
        elif i.kind.startswith("agent_") and plan.elastic:
            out.append("leave_" + i.kind[6:])
        else:
            out.append(i.kind)
    return out


def stats_of(plan, o):
    """What a run exercised: agents, rounds held, numbered lines checked on the agents' stdout."""
    rcs = {e.get("restart_count") for evs in o.events.values() for e in evs if e.get("event") == "rendezvous"}
    lines = sum(1 for a in o.agents.values() if not a.killed for line in a.stdout.splitlines()
                if LINE_RE.match(line))
    return {"elastic": int(plan.elastic), "agents": len(o.agents), "rounds": len(rcs), "lines": lines}
