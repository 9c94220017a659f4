"""Elastic membership (--nnodes MIN:MAX, issue 10): several ddprun agents on loopback share one dynamic
rendezvous (--rdzv-endpoint 127.0.0.1:PORT; the first agent to bind it hosts the server in-process). A node
lost or stopped re-forms the job without it while MIN remain and a restart is left; a late joiner re-forms
it with itself (no restart used); MAX in refuses a further node; the hosting node's departure ends the job.

Rounds are told apart by TORCHELASTIC_RESTART_COUNT: each worker prints it, WORLD_SIZE, RANK and
TORCHELASTIC_MAX_RESTARTS first thing, so a node's output holds, per rank prefix, one block of four lines
per worker it ran (a round's workers are all gone before the next round starts). The agents and the reading
of their output (ElasticCase, worker_runs) are in elastic_fixture.py."""
import json
import os
import signal
import socket
import subprocess
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from elastic_fixture import BOUND, ElasticCase, LAST_CALL, REFUSED, worker_runs
from exit_codes import RDZV_LOST, RDZV_TIMEOUT, USAGE
from harness import DDPRUN, RENDEZVOUS, pid_alive
from ports import listening
from wait import wait_until


class Elastic(ElasticCase):
    # The steps of a worker that waits for the test's word, then succeeds (a round that is re-formed kills it
    # while it waits).
    def waiting(self):
        return [f"ready={self.ready}", f"waitfile={self.go}", "exit=0"]

    def test_node_lost_the_others_reform_without_it(self):
        host = self.host_agent("2:3", *self.waiting(), name="a", max_restarts=1)
        b = self.agent("2:3", *self.waiting(), name="b", max_restarts=1)
        c = self.agent("2:3", *self.waiting(), name="c", max_restarts=1)
        self.wait_ready(range(6))
        first = {n: self.rounds(n) for n in "abc"}
        for n in "abc":
            self.assertEqual([r.world for r in first[n]], [(0, 3, 6)], n)
        self.assertEqual(sorted(first[n][0].node_rank for n in "abc"), [0, 1, 2])
        lost_rank, lost_offset = first["b"][0].node_rank, first["b"][0].rank_offset
        lost_workers = self.worker_pids([lost_offset, lost_offset + 1])
        self.clear_ready()
        os.kill(b.pid, signal.SIGKILL)
        self.assertEqual(self.wait_all([b])[0].code, -signal.SIGKILL)
        self.assert_gone_within(lost_workers, BOUND)  # the job guard ends the workers of a SIGKILLed ddprun
        self.wait_ready(range(4))
        self.release()
        results = dict(zip("ac", self.wait_all([host, c])))
        for n, res in results.items():
            self.assertEqual(res.code, 0, res)

        # Round 1: two nodes, kept in their order, contiguous ranks 0..3, each worker saw the new world.
        survivors = sorted("ac", key=lambda n: first[n][0].node_rank)
        second = []
        for i, n in enumerate(survivors):
            rounds = self.rounds(n)
            self.assertEqual(rounds, [first[n][0], (1, 2, 4, i, 2 * i)], n)
            runs = worker_runs(results[n].stdout)
            self.assertEqual(sorted((r["TORCHELASTIC_RESTART_COUNT"], r["WORLD_SIZE"], r["RANK"]) for r in runs),
                             sorted([(0, 6, first[n][0].rank_offset), (0, 6, first[n][0].rank_offset + 1),
                                     (1, 4, 2 * i), (1, 4, 2 * i + 1)]), results[n])
            self.assertTrue(all(r["prefix"] == r["RANK"] and r["TORCHELASTIC_MAX_RESTARTS"] == 1 for r in runs), runs)
            second += [r["RANK"] for r in runs if r["TORCHELASTIC_RESTART_COUNT"] == 1]
        self.assertEqual(sorted(second), [0, 1, 2, 3])
        self.assertEqual(self.rounds("b"), first["b"])  # the lost node saw only the first round

        for n in "ac":
            cause = f"node {lost_rank} (host {socket.gethostname()}) lost: connection closed"
            restarting = self.of_event(n, "restarting")
            self.assertEqual(len(restarting), 1, restarting)
            self.assertFalse(restarting[0]["membership"])
            self.assertTrue(restarting[0]["cause"].startswith(cause), restarting)
            self.assertIn(f"re-forming the job without node {lost_rank} (host", restarting[0]["reason"])
            self.assertIn("2 nodes left (a node gone while --nnodes MIN remain: no restart used)", restarting[0]["reason"])
            summary = self.of_event(n, "summary")
            self.assertEqual(len(summary), 1)
            self.assertEqual(summary[0]["exit_code"], 0)
            self.assertEqual(summary[0]["earlier_rounds"],
                             [{"round": 0, "nnodes": 3, "world_size": 6, "cause": restarting[0]["cause"]}])
            err = results[n].stderr.decode()
            self.assertIn("earlier rounds (1), each ended by a re-form:", err, results[n])
            self.assertIn(f"round 0 (3 nodes, world size 6): {cause}", err, results[n])

    def test_late_joiner_is_admitted_without_a_restart(self):
        a = self.host_agent("1:3", *self.waiting(), name="a", last_call=LAST_CALL)
        b = self.agent("1:3", *self.waiting(), name="b", last_call=LAST_CALL)
        self.wait_ready(range(4))
        for n in "ab":
            self.assertEqual(self.worlds(n), [(0, 2, 4)], n)
        self.clear_ready()
        c = self.agent("1:3", *self.waiting(), name="c", last_call=LAST_CALL)
        self.wait_ready(range(6))
        self.release()
        results = dict(zip("abc", self.wait_all([a, b, c])))
        for n, res in results.items():
            self.assertEqual(res.code, 0, res)
            runs = worker_runs(res.stdout)
            last = [r for r in runs if r["TORCHELASTIC_RESTART_COUNT"] == 1]
            self.assertEqual(len(last), 2, res)
            self.assertTrue(all(r["WORLD_SIZE"] == 6 and r["TORCHELASTIC_MAX_RESTARTS"] == 0 for r in last), runs)
            self.assertTrue(all(r["prefix"] == r["RANK"] for r in runs), runs)
        # The joiner ran only the second round, as node 2 with ranks 4 and 5; the others kept their places.
        self.assertEqual(sorted(r["RANK"] for r in worker_runs(results["c"].stdout)), [4, 5])
        self.assertEqual(len(worker_runs(results["c"].stdout)), 2)
        self.assertEqual(self.rounds("c"), [(1, 3, 6, 2, 4)])
        for n in "ab":
            first = self.first_round(n)
            self.assertEqual(self.rounds(n), [first, (1, 3, 6, first[3], first[4])], n)
            restarting = self.of_event(n, "restarting")
            self.assertEqual(len(restarting), 1, restarting)
            self.assertTrue(restarting[0]["membership"])
            self.assertIn("joined, 3 nodes in the next round (a membership change: no restart used)",
                          restarting[0]["reason"])
            self.assertEqual(self.of_event(n, "summary")[0]["earlier_rounds"],
                             [{"round": 0, "nnodes": 2, "world_size": 4, "cause": restarting[0]["reason"]}])
            self.assertIn("round 0 (2 nodes, world size 4): re-forming the job: host", results[n].stderr.decode())
        self.assertEqual(self.of_event("c", "restarting"), [])
        self.assertNotIn("earlier_rounds", self.of_event("c", "summary")[0])

    def test_fewer_than_min_left_stops_the_job(self):
        a = self.host_agent("2:3", f"ready={self.ready}", "hang", name="a", max_restarts=3, last_call=0.5)
        b = self.agent("2:3", f"ready={self.ready}", "hang", name="b", max_restarts=3, last_call=0.5)
        self.wait_ready(range(4))
        lost = self.first_round("b").node_rank
        os.kill(b.pid, signal.SIGKILL)
        res = self.wait_all([a])[0]
        self.wait_all([b])
        self.assertEqual(res.code, 1, res)  # a lost node
        err = res.stderr.decode()
        self.assertIn("1 node left, fewer than the 2 that --nnodes 2:3 needs", err, res)
        self.assertIn(f"root cause: node {lost} (host {socket.gethostname()}) lost", err, res)
        summary = self.of_event("a", "summary")[0]
        self.assertEqual(summary["exit_code"], 1)
        self.assertEqual(summary["root_cause"]["node_rank"], lost)
        self.assertEqual(self.of_event("a", "restarting"), [])  # no re-form was tried
        self.assertEqual(len(self.rounds("a")), 1)

    def test_restart_budget_spent_ends_with_the_root_cause(self):
        # Node 1's first worker (rank 2) exits 3 in every round, a moment after it started.
        steps = [f"ready={self.ready}", "@2:sleep=0.3", "@2:exit=3", "hang"]
        a = self.host_agent("1:2", *steps, name="a", max_restarts=2)
        b = self.agent("1:2", *steps, name="b", max_restarts=2)
        results = dict(zip("ab", self.wait_all([a, b])))
        host = socket.gethostname()
        for n, res in results.items():
            self.assertEqual(res.code, 3, res)
            rounds = self.rounds(n)
            self.assertEqual([r.world for r in rounds], [(0, 2, 4), (1, 2, 4), (2, 2, 4)], n)
            self.assertEqual(len({r.node_rank for r in rounds}), 1, rounds)  # same node rank every round
            err = res.stderr.decode()
            self.assertIn("earlier rounds (2), each ended by a re-form:", err, res)
            for i in range(2):
                self.assertRegex(err, rf"round {i} \(2 nodes, world size 4\): rank 2 \(local rank 0, node 1, "
                                      rf"host {host}, pid \d+\) exited with code 3\n")
            self.assertRegex(err, rf"root cause: rank 2 \(local rank 0, node 1, host {host}")
            restarting = self.of_event(n, "restarting")
            self.assertEqual([e["reason"] for e in restarting],
                             ["restarting the job (restart 1 of 2)", "restarting the job (restart 2 of 2)"])
            summary = self.of_event(n, "summary")[0]
            self.assertEqual(summary["exit_code"], 3)
            self.assertEqual([(e["round"], e["nnodes"], e["world_size"]) for e in summary["earlier_rounds"]],
                             [(0, 2, 4), (1, 2, 4)])

    def leave_by_signal(self, sig):
        """Three nodes under 1:3, --max-restarts 1; a non-host node's ddprun gets `sig`: it exits 128+sig, the
        other two re-form without it and succeed. Returns the departed node's result."""
        a = self.host_agent("1:3", *self.waiting(), name="a", max_restarts=1)
        b = self.agent("1:3", *self.waiting(), name="b", max_restarts=1)
        c = self.agent("1:3", *self.waiting(), name="c", max_restarts=1)
        self.wait_ready(range(6))
        first = self.first_round("b")
        stopped, offset = first.node_rank, first.rank_offset
        gone = self.worker_pids([offset, offset + 1])
        self.clear_ready()
        os.kill(b.pid, sig)
        res_b = self.wait_all([b])[0]
        self.assertEqual(res_b.code, 128 + sig, res_b)
        self.assertEqual([p for p in gone if pid_alive(p)], [])  # its ddprun ended its workers before exiting
        self.assertIn(f"root cause: ddprun on node {stopped} (host {socket.gethostname()}) received "
                      f"{signal.Signals(sig).name}", res_b.stderr.decode(), res_b)
        self.wait_ready(range(4))
        self.release()
        for n, res in zip("ac", self.wait_all([a, c])):
            self.assertEqual(res.code, 0, res)
            rounds = self.rounds(n)
            self.assertEqual([r.world for r in rounds], [(0, 3, 6), (1, 2, 4)], n)
            restarting = self.of_event(n, "restarting")
            self.assertEqual([e["cause"] for e in restarting],
                             [f"ddprun on node {stopped} (host {socket.gethostname()}) received "
                              f"{signal.Signals(sig).name}"])
            self.assertIn("(a node gone while --nnodes MIN remain: no restart used)", restarting[0]["reason"])
            self.assertEqual(sorted((r["RANK"], r["WORLD_SIZE"]) for r in worker_runs(res.stdout)
                                    if r["TORCHELASTIC_RESTART_COUNT"] == 1),
                             [(2 * rounds[1].node_rank, 4), (2 * rounds[1].node_rank + 1, 4)])
        self.assertEqual(len(self.rounds("b")), 1)
        return res_b

    # Found by this file: the agent dropped the stop's reason; a node stopped by a signal now hears that the rest
    # of the job goes on without it.
    def test_a_node_that_leaves_is_told_the_job_goes_on(self):
        res = self.leave_by_signal(signal.SIGTERM)
        self.assertIn("this node left; the job re-forms without it", res.stderr.decode(), res)

    def test_a_node_beyond_max_is_refused_job_undisturbed(self):
        a = self.host_agent("1:2", *self.waiting(), name="a")
        b = self.agent("1:2", *self.waiting(), name="b")
        self.wait_ready(range(4))
        c = self.agent("1:2", "exit=5", name="c")
        res = self.wait_all([c])[0]
        self.assertEqual(res.code, REFUSED, res)
        # One line says why (the rest is the usual summary, which repeats it); nothing ran on that node.
        err_lines = res.stderr.decode().splitlines()
        why = "the rendezvous server refused this node: the job already has 2 nodes, the most --nnodes 1:2 allows"
        self.assertEqual([line for line in err_lines if "ERROR" in line], [f"[ddprun pid {c.pid}] ERROR: {why}"], res)
        self.assertIn(f"ddprun: root cause: {why} at ", res.stderr.decode(), res)
        self.assertEqual(err_lines[-1], "ddprun: exit code 77", res)
        self.assertEqual(res.stdout, b"", res)
        self.assertEqual([e["event"] for e in self.events_of("c")], ["summary"])
        with open(self.pids) as f:
            self.assertEqual(len(f.readlines()), 4)  # no worker was restarted
        self.release()
        for n, r in zip("ab", self.wait_all([a, b])):
            self.assertEqual(r.code, 0, r)
            self.assertEqual(self.worlds(n), [(0, 2, 4)], n)
            self.assertEqual(self.of_event(n, "restarting"), [])

    def test_host_agent_stopped_ends_every_node(self):
        a = self.host_agent("1:3", f"ready={self.ready}", "hang", name="a", max_restarts=3)
        b = self.agent("1:3", f"ready={self.ready}", "hang", name="b", max_restarts=3)
        c = self.agent("1:3", f"ready={self.ready}", "hang", name="c", max_restarts=3)
        self.wait_ready(range(6))
        t0 = time.monotonic()
        os.kill(a.pid, signal.SIGTERM)
        results = dict(zip("abc", self.wait_all([a, b, c])))
        self.assertLess(time.monotonic() - t0, BOUND)
        self.assertEqual(results["a"].code, 128 + signal.SIGTERM, results["a"])
        for n in "bc":
            self.assertEqual(results[n].code, 128 + signal.SIGTERM, results[n])
            self.assertIn(f"root cause: ddprun on node {self.rounds('a')[0].node_rank} (host {socket.gethostname()}) "
                          "received SIGTERM", results[n].stderr.decode(), results[n])
            self.assertEqual(self.of_event(n, "restarting"), [])
            self.assertEqual(len(self.rounds(n)), 1)
        # The server, in the host's ddprun, says why the job could not re-form without it.
        self.assertIn("stopping the job (a node was stopped; it hosts the rendezvous server, without which the job "
                      "cannot re-form)", results["a"].stderr.decode(), results["a"])

    # Found by this file: only the hosting node said why the job could not re-form; every node now logs the
    # stop's reason with its root cause.
    def test_fewer_than_min_reason_reaches_every_node(self):
        results = self.third_node_killed_ends_the_job("3:4", [f"ready={self.ready}", "hang"], max_restarts=3,
                                                      last_call=0.5)
        self.assertIn("2 nodes left, fewer than the 3 that --nnodes 3:4 needs", results["a"].stderr.decode())
        self.assertIn("2 nodes left, fewer than the 3 that --nnodes 3:4 needs", results["b"].stderr.decode(),
                      results["b"])


# One test per stop signal (a fresh cluster each): they differ only in the signal.
for _signal in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    setattr(Elastic, f"test_node_stopped_by_{_signal.name.lower()}_leaves_the_others_reform",
            lambda self, sig=_signal: self.leave_by_signal(sig))


class ElasticEdges(ElasticCase):
    def waiting(self):
        return [f"ready={self.ready}", f"waitfile={self.go}", "exit=0"]

    def test_a_node_lost_uses_no_restart_even_with_none_to_spend(self):
        # --max-restarts 0 (the default): a node gone while MIN remain is no failure of the job; it re-forms.
        a = self.host_agent("1:3", *self.waiting(), name="a", last_call=LAST_CALL)
        b = self.agent("1:3", *self.waiting(), name="b", last_call=LAST_CALL)
        c = self.agent("1:3", *self.waiting(), name="c", last_call=LAST_CALL)
        self.wait_ready(range(6))
        self.clear_ready()
        os.kill(c.pid, signal.SIGKILL)
        self.wait_all([c])
        self.wait_ready(range(4))
        self.release()
        for n, res in zip("ab", self.wait_all([a, b])):
            self.assertEqual(res.code, 0, res)
            self.assertEqual(self.worlds(n), [(0, 3, 6), (1, 2, 4)], n)
            self.assertIn("(a node gone while --nnodes MIN remain: no restart used)", self.of_event(n, "restarting")[0]["reason"])

    def test_a_flapping_spare_costs_no_restart_and_is_refused_after_max_departures(self):
        # --max-restarts 0 and max_departures=2: a spare joins and dies twice (each a free re-form), the third
        # time it is refused (77, naming the rule); the two healthy nodes finish their job.
        conf = "max_departures=2"
        a = self.host_agent("1:3", *self.waiting(), name="a", last_call=LAST_CALL, rdzv_conf=conf)
        b = self.agent("1:3", *self.waiting(), name="b", last_call=LAST_CALL, rdzv_conf=conf)
        self.wait_ready(range(4))
        for i, n in enumerate("cd"):
            self.clear_ready()
            spare = self.agent("1:3", *self.waiting(), name=n, rdzv_conf=conf)
            self.wait_ready(range(6))
            self.clear_ready()
            os.kill(spare.pid, signal.SIGKILL)
            self.wait_all([spare])
            self.wait_ready(range(4))
        refused = self.agent("1:3", *self.waiting(), name="e", rdzv_conf=conf)
        res_e = self.wait_all([refused])[0]
        self.assertEqual(res_e.code, REFUSED, res_e)
        self.assertIn("left this job 2 times: it is not admitted again", res_e.stderr.decode(), res_e)
        self.release()
        for n, res in zip("ab", self.wait_all([a, b])):
            self.assertEqual(res.code, 0, res)
            self.assertEqual(self.worlds(n), [(0, 2, 4), (1, 3, 6), (2, 2, 4), (3, 3, 6), (4, 2, 4)], n)
            self.assertEqual([e["membership"] for e in self.of_event(n, "restarting")], [True, False, True, False])

    def test_a_node_joining_during_a_reform_is_placed_in_the_next_round(self):
        # Rank 0 is killed once every worker is ready; they all ignore SIGTERM, so the restart's teardown waits out
        # --term-timeout (5 s): the third node starts then, and the restart round includes it.
        steps = ["ignore=TERM", f"ready={self.ready}", f"waitfile={self.go}", "exit=0"]
        a = self.host_agent("1:3", *steps, name="a", max_restarts=1, last_call=LAST_CALL, term_timeout=5)
        b = self.agent("1:3", *steps, name="b", max_restarts=1, last_call=LAST_CALL, term_timeout=5)
        self.wait_ready(range(4))
        self.clear_ready()
        os.kill(self.worker_pids([0])[0], signal.SIGKILL)
        wait_until(lambda: self.of_event("a", "restarting"), "a's restarting event (a re-form)", BOUND)
        c = self.agent("1:3", f"ready={self.ready}", f"waitfile={self.go}", "exit=0", name="c", max_restarts=1)
        self.wait_ready(range(6))
        self.release_all_ok([a, b, c])
        for n in "ab":
            self.assertEqual(self.worlds(n), [(0, 2, 4), (1, 3, 6)], n)
            self.assertEqual([e["membership"] for e in self.of_event(n, "restarting")], [False])
        self.assertEqual(self.rounds("c"), [(1, 3, 6, 2, 4)])

    def joiner_waits_in_a_finishing_job(self):
        """Node a's workers exit 0 at once, b's wait for `go`: the job is finishing. Node c then starts and must
        be told to wait for a next round rather than re-form the job. Returns (a, b, c), all running."""
        a = self.host_agent("1:3", f"ready={self.ready}", "exit=0", name="a", last_call=LAST_CALL, log_file=True)
        b = self.agent("1:3", *self.waiting(), name="b", last_call=LAST_CALL)
        self.wait_ready(range(4))
        wait_until(lambda: len(self.of_event("a", "exited")) >= 2, "a's two exited events", BOUND)
        time.sleep(1)  # a's "done" reaches the server (loopback, milliseconds)
        c = self.agent("1:3", "exit=5", name="c")
        finishing = "; it waits for the next round (the job is finishing)"
        self.assertEqual(self.wait_for_log(a, finishing, "re-forming the job: host"), finishing)
        return a, b, c

    def test_a_node_joining_a_finishing_job_runs_nothing_and_exits_0(self):
        # A node starting in a finishing job waits, and is told the job completed.
        a, b, c = self.joiner_waits_in_a_finishing_job()
        first_a = self.first_round("a")
        self.assertIsNone(c.poll())
        self.release()
        results = dict(zip("abc", self.wait_all([a, b, c])))
        for n, res in results.items():
            self.assertEqual(res.code, 0, res)
        self.assertIn("the job completed before the rendezvous placed this node in a round: nothing ran here",
                      results["c"].stderr.decode(), results["c"])
        self.assertIn("the job completed after", results["c"].stderr.decode(), results["c"])
        self.assertIn("; no worker ran on this node", results["c"].stderr.decode(), results["c"])
        self.assertEqual(results["c"].stdout, b"")
        self.assertEqual(self.rounds("c"), [])
        self.assertEqual(self.rounds("a"), [first_a])

    # Found by this file: a node dropped for missed heartbeats heard nothing and took the closed connection for
    # a lost server (exit 74); it now gets a stop saying why. Issue 19: it then comes back as a late joiner by
    # itself (it may only have been paused), instead of ending with its own loss as the root cause.
    def test_a_stopped_agent_is_dropped_after_its_heartbeats_and_rejoins_as_a_new_node_when_resumed(self):
        """Three nodes under 1:3, --max-restarts 1; a non-host agent is SIGSTOPped: after --heartbeat-timeout the
        others re-form without it (round 1). Resumed, it reads why, ends its stale workers, joins again with a
        fresh hello and is placed in round 2 (3 nodes again); every node then succeeds, no restart used."""
        runtime = self.path("runtime")
        os.mkdir(runtime, 0o700)
        self.env.update(XDG_RUNTIME_DIR=runtime, DDPRUN_STATUS_PERIOD_MS="200")
        a = self.host_agent("1:3", *self.waiting(), name="a", max_restarts=1)
        b = self.agent("1:3", *self.waiting(), name="b", max_restarts=1)
        c = self.agent("1:3", *self.waiting(), name="c", max_restarts=1)
        self.wait_ready(range(6))
        offset = self.first_round("c").rank_offset
        stale = self.worker_pids([offset, offset + 1])
        self.clear_ready()
        os.kill(c.pid, signal.SIGSTOP)
        try:
            self.wait_ready(range(4))  # re-formed without c after --heartbeat-timeout (1 s)
            self.clear_ready()
        finally:
            os.kill(c.pid, signal.SIGCONT)
        self.assert_gone_within(stale, BOUND)
        self.wait_ready(range(6))  # round 2: c is back
        # Issue 32 reported a phantom row of c's old incarnation (a dead pid, "running") in the survivors' view after
        # a 60 s freeze. Here (a 1 s freeze) every node's view shows three nodes of round 2, each once, and no dead
        # pid: a guard, which the old server passed too in this shorter freeze.
        status = os.path.join(os.path.dirname(os.path.abspath(DDPRUN)), "ddprun-status")

        def views():  # one job per agent on this machine, each the whole job's view
            r = subprocess.run([status, "--json", "--run-id", "elastic"], env=self.env, capture_output=True,
                               text=True, timeout=20)
            return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []

        def round_2_everywhere():
            jobs = views()
            return jobs if len(jobs) == 3 and all(
                len(j["nodes"]) == 3 and all(n.get("restart_count") == 2 for n in j["nodes"]) for j in jobs) else None
        jobs = wait_until(round_2_everywhere, lambda: f"three views of round 2's three nodes: {views()}", BOUND,
                          interval=0.2)
        self.assertEqual(len(jobs), 3, jobs)
        for job in jobs:
            self.assertEqual(sorted(n["node_rank"] for n in job["nodes"]), [0, 1, 2], job)
            pids = [rank["pid"] for n in job["nodes"] for rank in n["ranks"]]
            self.assertEqual(len(pids), 6, job)
            self.assertFalse(set(pids) & set(stale), job)
        results = self.release_all_ok([a, b, c])
        err = results["c"].stderr.decode()
        self.assertIn("this node was dropped (missed heartbeats for 1.0 s); the job re-forms without it", err)
        self.assertIn("joining the job again as a new node", err)
        self.assertNotIn("lost the rendezvous server", err)
        for n in "ab":
            self.assertEqual(self.worlds(n), [(0, 3, 6), (1, 2, 4), (2, 3, 6)], n)
            self.assertIn("lost: missed heartbeats for 1", self.of_event(n, "restarting")[0]["cause"])
        self.assertEqual(self.worlds("c"), [(0, 3, 6), (2, 3, 6)])
        self.assertEqual([e["rejoin"] for e in self.of_event("c", "dropped")], [True])
        # Round 2's ranks are contiguous and every worker of it ran once.
        final = sorted(r["RANK"] for res in results.values() for r in worker_runs(res.stdout)
                       if r["TORCHELASTIC_RESTART_COUNT"] == 2)
        self.assertEqual(final, list(range(6)))

    def test_a_dropped_node_told_to_stop_as_it_wakes_does_not_rejoin(self):
        """As above, but SIGTERM reaches the frozen agent together with SIGCONT: it ends its stale workers and
        ends itself (143) instead of joining again; the other two finish their round without it."""
        a = self.host_agent("1:3", *self.waiting(), name="a", max_restarts=1)
        b = self.agent("1:3", *self.waiting(), name="b", max_restarts=1)
        c = self.agent("1:3", *self.waiting(), name="c", max_restarts=1)
        self.wait_ready(range(6))
        offset = self.first_round("c").rank_offset
        stale = self.worker_pids([offset, offset + 1])
        self.clear_ready()
        os.kill(c.pid, signal.SIGSTOP)
        try:
            self.wait_ready(range(4))
        finally:
            os.kill(c.pid, signal.SIGTERM)  # pending while stopped: delivered as it wakes
            os.kill(c.pid, signal.SIGCONT)
        res_c = self.wait_all([c])[0]
        self.assertEqual(res_c.code, 128 + signal.SIGTERM, res_c)
        self.assertNotIn("INFO: joining the job again as a new node", res_c.stderr.decode(), res_c)
        self.assert_gone_within(stale, BOUND)
        results = self.release_all_ok([a, b], names="ab")
        for n in "ab":
            self.assertEqual(self.worlds(n), [(0, 3, 6), (1, 2, 4)], (n, results[n]))
        self.assertEqual(self.worlds("c"), [(0, 3, 6)])

    def test_a_joiner_with_another_worker_count_gets_the_prefix_sum_ranks(self):
        a = self.host_agent("1:3", *self.waiting(), name="a", last_call=LAST_CALL)
        b = self.agent("1:3", *self.waiting(), name="b", nproc=1, last_call=LAST_CALL)
        self.wait_ready(range(3))
        self.clear_ready()
        c = self.agent("1:3", *self.waiting(), name="c", nproc=3)
        self.wait_ready(range(6))
        self.release()
        results = dict(zip("abc", self.wait_all([a, b, c])))
        final = []
        for n, res in results.items():
            self.assertEqual(res.code, 0, res)
            final += [(r["RANK"], r["WORLD_SIZE"]) for r in worker_runs(res.stdout)
                      if r["TORCHELASTIC_RESTART_COUNT"] == 1]
        self.assertEqual(sorted(final), [(r, 6) for r in range(6)])
        self.assertEqual(self.rounds("c"), [(1, 3, 6, 2, 3)])
        self.assertEqual(sorted(r["RANK"] for r in worker_runs(results["c"].stdout)), [3, 4, 5])

    def test_a_burst_of_joiners_ends_in_one_world(self):
        # Two nodes start at once: the first re-forms the job, the second joins it in the same re-form or
        # re-forms it again; either way the last round has all four nodes, the same restart count everywhere.
        a = self.host_agent("1:4", *self.waiting(), name="a", last_call=LAST_CALL, nproc=1)
        b = self.agent("1:4", *self.waiting(), name="b", last_call=LAST_CALL, nproc=1)
        self.wait_ready(range(2))
        c = self.agent("1:4", *self.waiting(), name="c", nproc=1)
        d = self.agent("1:4", *self.waiting(), name="d", nproc=1)
        wait_until(lambda: all(self.rounds(n) and self.rounds(n)[-1].nnodes == 4 for n in "abcd"),
                   lambda: f"a last round of four nodes everywhere: {[self.rounds(n) for n in 'abcd']}", BOUND)
        self.release()
        results = dict(zip("abcd", self.wait_all([a, b, c, d])))
        last = {n: self.rounds(n)[-1] for n in "abcd"}
        self.assertEqual({r.world for r in last.values()}, {(last["a"].restart_count, 4, 4)})
        self.assertIn(last["a"].restart_count, (1, 2))
        self.assertEqual(sorted(r.node_rank for r in last.values()), [0, 1, 2, 3])
        # a and b kept their places
        self.assertEqual([last[n].node_rank for n in "ab"], [self.first_round(n).node_rank for n in "ab"])
        final = []
        for n, res in results.items():
            self.assertEqual(res.code, 0, res)
            final += [r["RANK"] for r in worker_runs(res.stdout)
                      if r["TORCHELASTIC_RESTART_COUNT"] == last["a"].restart_count and r["WORLD_SIZE"] == 4]
            self.assertTrue(all(e["membership"] for e in self.of_event(n, "restarting")), n)
        self.assertEqual(sorted(final), [0, 1, 2, 3])

    def test_a_node_lost_during_a_reform_costs_no_second_restart(self):
        # A worker is killed (the one restart of --max-restarts 1); while the restart waits out --term-timeout
        # (the workers ignore SIGTERM), a third node's agent is SIGKILLed: the job goes on with two nodes.
        steps = ["ignore=TERM", f"ready={self.ready}", f"waitfile={self.go}", "exit=0"]
        a = self.host_agent("1:3", *steps, name="a", max_restarts=1, term_timeout=3, log_file=True)
        b = self.agent("1:3", *steps, name="b", max_restarts=1, term_timeout=3)
        c = self.agent("1:3", *steps, name="c", max_restarts=1, term_timeout=3)
        self.wait_ready(range(6))
        lost = self.first_round("c").node_rank
        self.clear_ready()
        os.kill(self.worker_pids([0])[0], signal.SIGKILL)
        wait_until(lambda: self.of_event("c", "restarting"), "c's restarting event (a re-form)", BOUND)
        os.kill(c.pid, signal.SIGKILL)
        self.wait_all([c])
        self.wait_ready(range(4))
        self.release()
        for n, res in zip("ab", self.wait_all([a, b])):
            self.assertEqual(res.code, 0, res)
            self.assertEqual(self.worlds(n), [(0, 3, 6), (1, 2, 4)], n)
            restarting = self.of_event(n, "restarting")
            self.assertEqual(len(restarting), 1, restarting)
            self.assertRegex(restarting[0]["cause"], r"^rank 0 \(local rank 0, node 0, .* was killed by signal 9")
        self.assertIn(f" left while the job re-formed (node {lost} (host", self.log_of(a))
        self.assertIn("2 nodes go on", self.log_of(a))

    def test_the_host_agent_killed_ends_every_node(self):
        a = self.host_agent("1:3", f"ready={self.ready}", "hang", name="a", max_restarts=3)
        b = self.agent("1:3", f"ready={self.ready}", "hang", name="b", max_restarts=3)
        c = self.agent("1:3", f"ready={self.ready}", "hang", name="c", max_restarts=3)
        self.wait_ready(range(6))
        host_workers = self.worker_pids([self.first_round("a").rank_offset, self.first_round("a").rank_offset + 1])
        os.kill(a.pid, signal.SIGKILL)
        results = dict(zip("abc", self.wait_all([a, b, c])))
        self.assertEqual(results["a"].code, -signal.SIGKILL)
        self.assert_gone_within(host_workers, BOUND)
        for n in "bc":
            self.assertEqual(results[n].code, RDZV_LOST, results[n])  # lost the rendezvous server
            self.assertIn("lost the rendezvous server at 127.0.0.1:", results[n].stderr.decode(), results[n])
            self.assertEqual(len(self.rounds(n)), 1)

    def test_a_node_gone_before_the_first_round_only_frees_its_place(self):
        # 2:3, last call 4 s: a and b joined, b is killed before the round starts, c joins: the round starts
        # with a and c.
        a = self.host_agent("2:3", f"ready={self.ready}", "exit=0", name="a", last_call=4, log_file=True,
                            extra=("-v",))
        b = self.agent("2:3", f"ready={self.ready}", "exit=0", name="b", last_call=4)
        self.wait_for_log(a, "), 2 of 3")  # the server's debug line "node joined: host ... 2 of 3"
        os.kill(b.pid, signal.SIGKILL)
        self.wait_for_log(a, "left before the rendezvous completed")
        c = self.agent("2:3", f"ready={self.ready}", "exit=0", name="c", last_call=4)
        results = dict(zip("ac", self.wait_all([a, c])))
        self.assertEqual(self.wait_all([b])[0].code, -signal.SIGKILL)
        for n, res in results.items():
            self.assertEqual(res.code, 0, res)
            self.assertEqual(self.worlds(n), [(0, 2, 4)], n)
        self.assertEqual(self.rounds("b"), [])

    def test_a_node_lost_after_another_finished_reruns_the_finished_one(self):
        # Node 0's workers (ranks 0, 1) exit 0 at once: it reports done. Then another node's agent is SIGKILLed:
        # the job re-forms with the other two, and node 0 runs its workers again in the new world.
        steps = [f"ready={self.ready}", "@0:exit=0", "@1:exit=0", f"waitfile={self.go}", "exit=0"]
        agents = {"a": self.host_agent("1:3", *steps, name="a", max_restarts=1),
                  "b": self.agent("1:3", *steps, name="b", max_restarts=1),
                  "c": self.agent("1:3", *steps, name="c", max_restarts=1)}
        self.wait_ready(range(6))
        first = {n: self.first_round(n) for n in "abc"}
        done = min("abc", key=lambda n: first[n].node_rank)
        victim = "c" if done != "c" else "b"  # not the host, not the node that finished
        wait_until(lambda: len(self.of_event(done, "exited")) >= 2, f"{done}'s two exited events", BOUND)
        time.sleep(1)  # its "done" reaches the server (loopback, milliseconds)
        self.clear_ready()
        os.kill(agents[victim].pid, signal.SIGKILL)
        self.wait_all([agents[victim]])
        self.wait_ready(range(4))
        self.release()
        survivors = [n for n in "abc" if n != victim]
        for n, res in zip(survivors, self.wait_all([agents[n] for n in survivors])):
            self.assertEqual(res.code, 0, res)
            self.assertEqual(self.worlds(n), [(0, 3, 6), (1, 2, 4)], n)
            self.assertEqual(sorted((r["TORCHELASTIC_RESTART_COUNT"], r["WORLD_SIZE"])
                                    for r in worker_runs(res.stdout)), [(0, 6), (0, 6), (1, 4), (1, 4)], res)
        self.assertEqual(self.rounds(done)[1].node_rank, 0)  # still node 0

    def test_a_waiting_joiner_that_is_stopped_leaves_the_job_alone(self):
        # The job is finishing, so a new node waits unplaced; SIGTERM ends it (143) and the job completes without it.
        a, b, c = self.joiner_waits_in_a_finishing_job()
        os.kill(c.pid, signal.SIGTERM)
        res_c = self.wait_all([c])[0]
        self.assertEqual(res_c.code, 128 + signal.SIGTERM, res_c)
        self.wait_for_log(a, "left while waiting for the next round")
        self.release()
        for n, res in zip("ab", self.wait_all([a, b])):
            self.assertEqual(res.code, 0, res)
            self.assertEqual(self.worlds(n), [(0, 2, 4)], n)
        self.assertEqual(self.rounds("c"), [])
        self.assertEqual(res_c.stdout, b"")

    def test_two_nodes_lost_at_once_one_reform(self):
        # 2:4 with four nodes, --max-restarts 1: two agents SIGKILLed together; the second loss comes while the
        # job re-forms (or at once with the first), which uses no second restart: the two left go on.
        agents = {"a": self.host_agent("2:4", *self.waiting(), name="a", max_restarts=1, nproc=1)}
        for n in "bcd":
            agents[n] = self.agent("2:4", *self.waiting(), name=n, max_restarts=1, nproc=1)
        self.wait_ready(range(4))
        self.clear_ready()
        # Together for the server: both stopped first, so neither can answer the re-form the other's loss starts
        # (killed one after the other, the second could report its workers stopped in between, be placed in the
        # next round, and then cost a second re-form).
        for n in "cd":
            os.kill(agents[n].pid, signal.SIGSTOP)
        for n in "cd":
            os.kill(agents[n].pid, signal.SIGKILL)
        self.wait_all([agents["c"], agents["d"]])
        self.wait_ready(range(2))
        self.release()
        for n, res in zip("ab", self.wait_all([agents["a"], agents["b"]])):
            self.assertEqual(res.code, 0, res)
            self.assertEqual(self.worlds(n), [(0, 4, 4), (1, 2, 2)], n)
            self.assertEqual(len(self.of_event(n, "restarting")), 1)
            self.assertEqual(sorted((r["TORCHELASTIC_RESTART_COUNT"], r["WORLD_SIZE"])
                                    for r in worker_runs(res.stdout)), [(0, 4), (1, 2)], res)

    # Found by this file: a node whose workers all exited 0 while the others still ran warned "worker output still
    # open" 2 s later, for pipes long drained (the drain timer was not cancelled once every stream finished).
    def test_a_node_that_finished_early_does_not_warn_about_open_output(self):
        a = self.host_agent("1:2", f"ready={self.ready}", "exit=0", name="a")
        b = self.agent("1:2", *self.waiting(), name="b")
        self.wait_ready(range(4))
        wait_until(lambda: len(self.of_event("a", "exited")) >= 2, "a's two exited events", BOUND)
        time.sleep(3)  # past the agent's 2 s drain limit
        self.release()
        res_a, res_b = self.wait_all([a, b])
        self.assertEqual((res_a.code, res_b.code), (0, 0), res_a)
        self.assertNotIn("worker output still open", res_a.stderr.decode(), res_a)

    def test_node_0_lost_under_a_separate_server_hands_the_master_on(self):
        # With ddprun-rendezvous hosting the job, node 0 (the master) may leave like any node: the next round's
        # node 0 is the former node 1, and MASTER_ADDR:MASTER_PORT become its own.
        server = subprocess.Popen([RENDEZVOUS, "--rdzv-id", "elastic", "--nnodes", "1:3", "--host", "127.0.0.1",
                                   "--port", str(self.port), "--max-restarts", "1", "--last-call", "10",
                                   "--heartbeat-interval", "0.2", "--heartbeat-timeout", "1", "--rdzv-timeout",
                                   str(BOUND)], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        server.name = "ddprun-rendezvous"
        server.log_file = None
        self.agents.append(server)
        def server_listens():
            if listening(self.port):
                return True
            self.assertIsNone(server.poll(), "ddprun-rendezvous exited")
            return False
        wait_until(server_listens, "ddprun-rendezvous to listen", BOUND)
        agents = {n: self.agent("1:3", *self.waiting(), name=n, max_restarts=1) for n in "abc"}
        self.wait_ready(range(6))
        first = {n: self.first_round(n) for n in "abc"}
        order = sorted("abc", key=lambda n: first[n].node_rank)
        self.assertEqual(len({self.events_of(n)[0]["master_port"] for n in "abc"}), 1)
        self.clear_ready()
        os.kill(agents[order[0]].pid, signal.SIGKILL)
        self.wait_all([agents[order[0]]])
        self.wait_ready(range(4))
        self.release()
        for i, (n, res) in enumerate(zip(order[1:], self.wait_all([agents[n] for n in order[1:]]))):
            self.assertEqual(res.code, 0, res)
            self.assertEqual(self.rounds(n), [first[n], (1, 2, 4, i, 2 * i)], n)
            self.assertEqual([e["cause"] for e in self.of_event(n, "restarting")],
                             [f"node 0 (host {socket.gethostname()}) lost: connection closed (end of stream)"])
        masters = {n: [e["master_port"] for e in self.of_event(n, "rendezvous")] for n in order[1:]}
        self.assertEqual(masters[order[1]], masters[order[2]])
        # Each agent offers a free port of its own (bound and released at start: two agents get the same one with a
        # chance of about 1 in 28000): the new master's, not the departed one's.
        self.assertNotEqual(masters[order[1]][0], masters[order[1]][1])
        res = self.wait_all([server])[0]
        self.assertEqual(res.code, 0, res)

    def test_a_node_stopped_during_a_reform_leaves_it(self):
        # A worker is killed (the one restart); while the restart waits out --term-timeout (the workers ignore
        # SIGTERM), a non-host agent gets SIGTERM: it exits 143, the other two go on without it.
        steps = ["ignore=TERM", f"ready={self.ready}", f"waitfile={self.go}", "exit=0"]
        agents = {"a": self.host_agent("1:3", *steps, name="a", max_restarts=1, term_timeout=3, log_file=True)}
        for n in "bc":
            agents[n] = self.agent("1:3", *steps, name=n, max_restarts=1, term_timeout=3)
        self.wait_ready(range(6))
        first = {n: self.first_round(n) for n in "abc"}
        leaving = "c" if first["c"].node_rank != 0 else "b"  # not node 0, whose rank 0 is killed
        self.clear_ready()
        os.kill(self.worker_pids([0])[0], signal.SIGKILL)
        wait_until(lambda: self.of_event(leaving, "restarting"), f"{leaving}'s restarting event (a re-form)", BOUND)
        os.kill(agents[leaving].pid, signal.SIGTERM)
        res = self.wait_all([agents[leaving]])[0]
        self.assertEqual(res.code, 128 + signal.SIGTERM, res)
        self.assertEqual(len(self.rounds(leaving)), 1)
        self.wait_ready(range(4))
        self.release()
        stay = [n for n in "abc" if n != leaving]
        for n, r in zip(stay, self.wait_all([agents[n] for n in stay])):
            self.assertEqual(r.code, 0, r)
            self.assertEqual(self.worlds(n), [(0, 3, 6), (1, 2, 4)], n)
            self.assertEqual(len(self.of_event(n, "restarting")), 1)
        left_rank = first[leaving].node_rank
        self.assertIn(f"node {left_rank} (host \"{socket.gethostname()}\") left while the job re-formed "
                      f"(ddprun on node {left_rank} (host {socket.gethostname()}) received SIGTERM); 2 nodes "
                      "go on", self.log_of(agents["a"]))

    def test_log_dirs_follow_the_restart_count(self):
        # --log-dir keeps attempt_N per round, N the round's TORCHELASTIC_RESTART_COUNT: the joiner's only round
        # is attempt_1, the others ran attempt_0 and attempt_1.
        logs = {n: self.path(f"logs_{n}") for n in "abc"}
        a = self.host_agent("1:3", "print=hello", *self.waiting(), name="a", last_call=LAST_CALL,
                            extra=("--log-dir", logs["a"], "--tee", "3"))
        b = self.agent("1:3", "print=hello", *self.waiting(), name="b", last_call=LAST_CALL,
                       extra=("--log-dir", logs["b"], "--tee", "3"))
        self.wait_ready(range(4))
        self.clear_ready()
        c = self.agent("1:3", "print=hello", *self.waiting(), name="c", extra=("--log-dir", logs["c"], "--tee", "3"))
        self.wait_ready(range(6))
        self.release()
        for n, res in zip("abc", self.wait_all([a, b, c])):
            self.assertEqual(res.code, 0, res)
            runs = os.listdir(logs[n])
            self.assertEqual(len(runs), 1, runs)
            root = os.path.join(logs[n], runs[0])
            self.assertEqual(sorted(os.listdir(root)), ["attempt_0", "attempt_1"], n)
            if n == "c":  # the joiner ran no round 0: its attempt_0 (made at start) holds nothing
                self.assertEqual([f for _, _, files in os.walk(os.path.join(root, "attempt_0")) for f in files], [])
            for attempt in ["attempt_1"] if n == "c" else ["attempt_0", "attempt_1"]:
                for lr in (0, 1):
                    with open(os.path.join(root, attempt, str(lr), "stdout.log")) as f:
                        text = f.read()
                    self.assertIn(f"TORCHELASTIC_RESTART_COUNT={attempt[-1]}\n", text, (n, attempt, lr))
                    self.assertIn("hello\n", text)

    def test_a_failure_after_a_join_stops_the_job_when_no_restart_is_left(self):
        # --max-restarts 0: the join re-forms for free; then the joiner's rank 5 exits 7: no restart, the job
        # stops with exit 7 on every node, and the summaries name the round that the join ended.
        steps = [f"ready={self.ready}", "@5:exit=7", f"waitfile={self.go}", "exit=0"]
        a = self.host_agent("1:3", *steps, name="a", last_call=LAST_CALL)
        b = self.agent("1:3", *steps, name="b", last_call=LAST_CALL)
        self.wait_ready(range(4))
        c = self.agent("1:3", *steps, name="c")
        results = dict(zip("abc", self.wait_all([a, b, c])))
        host = socket.gethostname()
        for n, res in results.items():
            self.assertEqual(res.code, 7, res)
            err = res.stderr.decode()
            self.assertRegex(err, rf"root cause: rank 5 \(local rank 1, node 2, host {host}, pid \d+\) exited with "
                                  r"code 7", res)
            self.assertEqual(self.of_event(n, "summary")[0]["exit_code"], 7)
        for n in "ab":
            self.assertEqual(self.worlds(n), [(0, 2, 4), (1, 3, 6)], n)
            err = results[n].stderr.decode()
            self.assertIn("ddprun: earlier rounds (1), each ended by a re-form:\n", err, results[n])
            self.assertIn("ddprun:   round 0 (2 nodes, world size 4): re-forming the job: host", err, results[n])
        self.assertNotIn("earlier rounds", results["c"].stderr.decode())

    def test_a_long_story_lists_the_last_20_rounds(self):
        steps = ["@2:sleep=0.05", "@2:exit=3", "hang"]
        a = self.host_agent("1:2", *steps, name="a", max_restarts=21, nproc=2)
        b = self.agent("1:2", *steps, name="b", max_restarts=21, nproc=2)
        for n, res in zip("ab", self.wait_all([a, b], timeout=60)):
            self.assertEqual(res.code, 3, res)
            self.assertEqual([r.restart_count for r in self.rounds(n)], list(range(22)), n)
            lines = res.stderr.decode().splitlines()
            at = lines.index("ddprun: earlier rounds (21), each ended by a re-form:")
            self.assertEqual(lines[at + 1], "ddprun:   ... 1 earlier", res)
            for i in range(20):
                self.assertRegex(lines[at + 2 + i], rf"^ddprun:   round {i + 1} \(2 nodes, world size 4\): rank 2 ")
            self.assertEqual(len(self.of_event(n, "summary")[0]["earlier_rounds"]), 21)

    def test_the_first_round_waits_for_the_last_call_once_min_joined(self):
        # 2:4, three nodes at once: MIN joined, the round waits out the last call (3 s) for more, and has all three.
        t0 = time.time()
        agents = {"a": self.host_agent("2:4", f"ready={self.ready}", "exit=0", name="a", last_call=LAST_CALL)}
        for n in "bc":
            agents[n] = self.agent("2:4", f"ready={self.ready}", "exit=0", name=n, last_call=LAST_CALL)
        for n, res in zip("abc", self.wait_all([agents[n] for n in "abc"])):
            self.assertEqual(res.code, 0, res)
            self.assertEqual(self.worlds(n), [(0, 3, 6)], n)
            # the round began no earlier than the last call after the second node joined (after t0)
            self.assertGreaterEqual(self.of_event(n, "rendezvous")[0]["time_ms"] / 1000, t0 + LAST_CALL - 0.1)

    def test_fewer_than_min_never_start_and_time_out(self):
        a = self.host_agent("2:3", "exit=0", name="a", last_call=0.5, rdzv_timeout=1)
        res = self.wait_all([a])[0]
        self.assertEqual(res.code, RDZV_TIMEOUT, res)
        self.assertIn("1 of 3 nodes joined (need 2); joined hosts: " + socket.gethostname(), res.stderr.decode(), res)
        self.assertEqual(res.stdout, b"", res)
        self.assertEqual(self.rounds("a"), [])

    def test_the_host_agent_frozen_ends_the_others_after_the_heartbeat_timeout(self):
        # SIGSTOP freezes the server with its agent: the other node hears nothing for --heartbeat-timeout (1 s)
        # and ends (74). Resumed, the host first reads what it missed (the time it was stopped is nobody's
        # silence: common/stall_clock.hpp): the other node left, so under 1:2 with a restart left it re-forms
        # alone and goes on, as after any lost node. (Until the stall clock, whichever of its own client and
        # server woke first judged the other silent for the pause and ended the job: 1 or 74.)
        a = self.host_agent("1:2", f"ready={self.ready}", "hang", name="a", max_restarts=1)
        b = self.agent("1:2", f"ready={self.ready}", "hang", name="b", max_restarts=1)
        self.wait_ready(range(4))
        os.kill(a.pid, signal.SIGSTOP)
        try:
            res_b = self.wait_all([b])[0]
        finally:
            os.kill(a.pid, signal.SIGCONT)
        self.assertEqual(res_b.code, RDZV_LOST, res_b)
        self.assertIn("lost the rendezvous server at 127.0.0.1:", res_b.stderr.decode(), res_b)
        self.assertIn(": nothing heard for 1.0 s", res_b.stderr.decode(), res_b)
        deadline = time.monotonic() + BOUND  # for both waits
        restarting = wait_until(lambda: self.of_event("a", "restarting"), "a's restarting event", BOUND, interval=0.02)
        self.assertIn("lost", restarting[0]["cause"])
        wait_until(lambda: len(self.rounds("a")) >= 2, lambda: f"a's second round: {self.rounds('a')}",
                   max(0.0, deadline - time.monotonic()), interval=0.02)
        self.assertEqual(self.worlds("a"), [(0, 2, 4), (1, 1, 2)])
        os.kill(a.pid, signal.SIGTERM)
        res_a = self.wait_all([a])[0]
        self.assertEqual(res_a.code, 128 + signal.SIGTERM, res_a)


class JoinAdmission(ElasticCase):
    """--rdzv-conf join_policy / join_min_interval (rendezvous/job_config.hpp JoinPolicy): when a node that joins a
    running elastic job is placed. The default, join_policy=now, is what the tests above show."""

    def waiting(self):
        return [f"ready={self.ready}", f"waitfile={self.go}", "exit=0"]

    def test_at_failure_a_joiner_waits_and_the_failure_restart_places_it(self):
        # Two nodes run; a third joins and waits, unplaced, while the first round's workers run on (restart count
        # 0, nobody restarted); a worker is then killed: the restart (1 of 1) re-forms the job with three nodes.
        conf = "join_policy=at_failure"
        a = self.host_agent("2:3", *self.waiting(), name="a", max_restarts=1, last_call=LAST_CALL, rdzv_conf=conf,
                            log_file=True)
        b = self.agent("2:3", *self.waiting(), name="b", max_restarts=1, last_call=LAST_CALL, rdzv_conf=conf)
        self.wait_ready(range(4))
        first_workers = self.worker_pids(range(4))
        self.clear_ready()
        c = self.agent("2:3", *self.waiting(), name="c", max_restarts=1, rdzv_conf=conf)
        self.wait_for_log(a, "; it waits for the next round (join_policy at_failure: the job re-forms with it after "
                             "a failure or a departure)")
        time.sleep(1)  # a re-form on loopback takes milliseconds: one would have shown by now
        for n in "ab":
            self.assertEqual(self.worlds(n), [(0, 2, 4)], n)
            self.assertEqual(self.of_event(n, "restarting"), [], n)
        self.assertEqual(self.rounds("c"), [])
        self.assertIsNone(c.poll())
        self.assertEqual([p for p in first_workers if not pid_alive(p)], [], "a first-round worker was stopped")
        with open(self.pids) as f:
            self.assertEqual(len(f.readlines()), 4)  # no worker started anew

        os.kill(self.worker_pids([0])[0], signal.SIGKILL)
        self.wait_ready(range(6))
        results = self.release_all_ok([a, b, c])
        for n in "ab":
            first = self.first_round(n)
            self.assertEqual(self.rounds(n), [first, (1, 3, 6, first.node_rank, first.rank_offset)], n)
            restarting = self.of_event(n, "restarting")
            self.assertEqual([(e["membership"], e["reason"]) for e in restarting],
                             [(False, "restarting the job (restart 1 of 1)")], n)
            runs = worker_runs(results[n].stdout)
            self.assertEqual(sorted((r["TORCHELASTIC_RESTART_COUNT"], r["WORLD_SIZE"]) for r in runs),
                             [(0, 4), (0, 4), (1, 6), (1, 6)], results[n])
        # The joiner ran only the restart round, as node 2 with ranks 4 and 5.
        self.assertEqual(self.rounds("c"), [(1, 3, 6, 2, 4)])
        self.assertEqual(sorted((r["TORCHELASTIC_RESTART_COUNT"], r["WORLD_SIZE"], r["RANK"])
                                for r in worker_runs(results["c"].stdout)), [(1, 6, 4), (1, 6, 5)])

    def test_bad_join_settings_stop_ddprun_rendezvous_before_it_listens(self):
        for args, words in ((["--join-policy", "later"], "--join-policy 'later': expected now or at_failure"),
                            (["--join-policy", "at_failure", "--join-min-interval", "5"],
                             "join_min_interval applies to join_policy now")):
            r = subprocess.run([RENDEZVOUS, "--rdzv-id", "elastic", "--nnodes", "1:3", "--host", "127.0.0.1", "--port",
                                str(self.port), *args], env=self.env, capture_output=True, timeout=BOUND)
            self.assertEqual(r.returncode, USAGE, r)
            lines = r.stderr.decode().splitlines()
            self.assertEqual(len(lines), 1, r)
            self.assertTrue(lines[0].startswith("ddprun-rendezvous: ") and words in lines[0], r)
            self.assertEqual(r.stdout, b"", r)
            self.assertFalse(listening(self.port))
