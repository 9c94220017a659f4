"""Re-forming in place (docs/MULTINODE.md "Re-forming in place"): in an elastic job, a re-form in which no worker failed (a
node joined, a node was lost) keeps the workers of the nodes that stay, when they offered it; they take the new
round's variables up without a restart. A worker that did not offer is restarted as before; one that offered but
does not take the round up within --term-timeout is replaced by a new worker in the same round.

Nodes are ddprun agents on loopback sharing one dynamic endpoint (the first hosts the server); the workers are
tests/integration/py/reform_worker.py (stdlib only), which records every round it runs in."""
import os
import signal
import socket
import subprocess

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from elastic_fixture import BOUND, ElasticCase
from exit_codes import HUNG
from harness import DDPRUN
from ports import listening
from wait import wait_until

REFORM_WORKER = os.path.join(os.path.dirname(__file__), "py", "reform_worker.py")
REFORM_TORCH = os.path.join(os.path.dirname(__file__), "py", "reform_torch.py")


class ReformInPlace(ElasticCase):
    def setUp(self):
        super().setUp()
        self.env["PYTHON_EXEC"] = "/usr/bin/python3"
        self.out = self.path("rounds")
        os.mkdir(self.out)

    def node(self, name, *flags, nnodes="1:3", nproc=2, max_restarts=0, term_timeout=1, extra=(), host=False,
             worker=REFORM_WORKER):
        args = [DDPRUN, "--nnodes", nnodes, "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", "reform",
                "--rdzv-conf", "last_call_timeout=0.2", "--nproc-per-node", nproc, "--max-restarts", max_restarts,
                "--heartbeat-interval", "0.2", "--heartbeat-timeout", "1", "--rdzv-timeout", BOUND,
                "--term-timeout", term_timeout, "--events-file", self.path(f"ev_{name}.jsonl"), *extra, worker,
                self.out, *flags]
        with open(self.path(f"err_{name}.log"), "wb") as err:  # readable while the node runs
            p = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                 env=self.env, start_new_session=True)
        p.name, p.log_file = name, self.path(f"err_{name}.log")
        self.agents.append(p)
        if host:
            self.wait_for(lambda: listening(self.port) or p.poll() is not None, "the host agent's endpoint")
        return p

    def wait_for(self, ready, what):
        wait_until(ready, what, BOUND, interval=0.02)

    def rounds_run(self, ranks, restart):
        """{rank: (pid, world, node rank, master port)} of the workers of `ranks` in round `restart`, once all wrote."""
        paths = {r: os.path.join(self.out, f"round.{r}.{restart}") for r in ranks}
        self.wait_for_files(list(paths.values()), timeout=BOUND)
        found = {}
        for r, p in paths.items():
            with open(p) as f:
                found[r] = tuple(map(int, f.read().split()))
        return found

    def finish(self, procs):
        with open(os.path.join(self.out, "go"), "w"):
            pass
        return self.wait_all(procs)

    def test_a_join_and_a_loss_keep_the_workers_that_stay(self):
        """Node a trains alone; b joins: a's two workers take round 1 up in place (same pids, ranks 0-1 of 4, a new
        master port), b's start fresh as ranks 2-3. Then b's ddprun is SIGKILLed: a's workers take round 2 up in
        place again (world 2). --hang-timeout 5 with workers silent 2 s after each take-up: a re-formed worker owes
        its first beat of the new round within the hang timeout of the hand-over (issue 56), not of its last beat in
        the old round (b's loss comes while a's workers are still silent after round 1's take-up: they take round 2
        up after those 2 s and are silent 2 s more, 4 s after its hand-over; and --term-timeout 5, the bound on
        taking a round up, is longer than those 2 s: a round announced while the worker is silent is taken up
        after)."""
        hang = ("--hang-timeout", 5)
        a = self.node("a", "quiet-after-take=2", term_timeout=5, extra=hang, host=True)
        first = self.rounds_run([0, 1], 0)
        self.assertEqual({r: v[1] for r, v in first.items()}, {0: 2, 1: 2})
        b = self.node("b", "quiet-after-take=2", term_timeout=5, extra=hang)
        second = self.rounds_run([0, 1, 2, 3], 1)
        for r in (0, 1):
            self.assertEqual(second[r][0], first[r][0], f"rank {r}'s worker was restarted")
        self.assertEqual({r: v[1:3] for r, v in second.items()}, {0: (4, 0), 1: (4, 0), 2: (4, 1), 3: (4, 1)})
        self.assertNotEqual(second[0][3], first[0][3], "the new round has a master port of its own")
        self.assertEqual(len({second[0][0], second[1][0], second[2][0], second[3][0]}), 4)
        os.kill(b.pid, signal.SIGKILL)
        third = self.rounds_run([0, 1], 2)
        for r in (0, 1):
            self.assertEqual(third[r][0], first[r][0], f"rank {r}'s worker was restarted")
            self.assertEqual(third[r][1:3], (2, 0))
        res_a, res_b = self.finish([a, b])
        self.assertEqual(res_a.code, 0, res_a)
        self.assertEqual(res_b.code, -signal.SIGKILL)
        log = self.read(self.path("err_a.log"))
        self.assertIn("this node's workers stay and take the next round up in place", log)
        self.assertIn("re-formed in place: ranks 0-1 of 4 (node 0 of 2)", log)
        self.assertIn("re-formed in place: ranks 0-1 of 2 (node 0 of 1)", log)
        self.assertNotIn("hung", log)
        self.assertEqual(self.worlds("a"), [(0, 1, 2), (1, 2, 4), (2, 1, 2)])
        reformed = self.of_event("a", "reformed_in_place")
        self.assertEqual([(e["world_size"], e["restart_count"], e["reforms"]) for e in reformed], [(4, 1, 1), (2, 2, 2)])
        restarting = self.of_event("a", "restarting")
        self.assertEqual([e["in_place"] for e in restarting], [True, True])
        self.assertTrue(restarting[1]["cause"].startswith(f"node 1 (host {socket.gethostname()}) lost"), restarting)
        self.assertEqual([e["event"] for e in self.events_of("a")].count("started"), 2, "a started only its first workers")
        # Their output carries the new rank's prefix: the final lines were written in round 2 (ranks 0-1).
        self.assertIn(f"[rank1]: rank 1 pid {first[1][0]} done", res_a.stdout.decode())

    def test_the_workers_that_stay_train_on_until_a_joiners_workers_can_meet(self):
        """A joiner's workers take seconds to start (an interpreter importing torch): the workers that stay are
        handed the round only once the joiner's can meet (their helper imported: rendezvous round_ready, then
        meet), and train on meanwhile instead of waiting in the new group. Before, they took the round up within
        milliseconds of the join and waited there the whole start."""
        a = self.node("a", host=True)
        first = self.rounds_run([0, 1], 0)
        b = self.node("b", "slow-start=3")
        second = self.rounds_run([0, 1, 2, 3], 1)
        for r in (0, 1):
            self.assertEqual(second[r][0], first[r][0], f"rank {r}'s worker was restarted")
        imported = min(os.stat(os.path.join(self.out, f"imported.{r}")).st_mtime for r in (2, 3))
        taken = min(os.stat(os.path.join(self.out, f"round.{r}.1")).st_mtime for r in (0, 1))
        self.assertGreaterEqual(taken, imported, "a's workers took the round up before b's could meet")
        # They trained on meanwhile: round 0's beats went on (the live slot's step is the proof ddprun sees).
        res_a, res_b = self.finish([a, b])
        self.assertEqual((res_a.code, res_b.code), (0, 0), (res_a, res_b))

    def test_a_joiner_lost_while_it_starts_does_not_cost_the_survivors_a_restart(self):
        """Issue 32, goodput: a node joins, the survivors take the new round up and wait in init_process_group for
        its worker, which is still starting (start-delay); the node is lost meanwhile. The survivors' wait in the
        store ended only when --term-timeout replaced them (37 s of a 600-s goodput run, one restart from the
        checkpoint). Now the helper ends that wait as the loss is announced, and the same workers take the round
        after it up: real torch, gloo, the store hosted by a's rank 0."""
        a = self.node("a", nproc=1, term_timeout=BOUND, host=True, worker=REFORM_TORCH)
        first = self.rounds_run([0], 0)
        b = self.node("b", "start-delay=600", nproc=1, term_timeout=BOUND, worker=REFORM_TORCH)
        self.wait_for_files([os.path.join(self.out, "taken.0.1")], timeout=BOUND)  # a's worker: in its init, waiting
        os.kill(b.pid, signal.SIGKILL)  # its worker, still asleep before its init, dies with it (parent-death signal)
        third = self.rounds_run([0], 2)  # within BOUND: far less than --term-timeout (BOUND) plus a new worker's start
        self.assertEqual(third[0], (first[0][0], 1), "a's worker was replaced, or is not alone in round 2")
        res_a, res_b = self.finish([a, b])
        self.assertEqual(res_a.code, 0, res_a)
        log = self.read(self.path("err_a.log"))
        self.assertNotIn("did not take the re-formed round up", log)
        self.assertIn("a node of this round was lost: shutting down the", log)
        self.assertIn("round 1 did not form", res_a.stdout.decode())
        self.assertEqual([e["event"] for e in self.events_of("a")].count("started"), 1, "a started only its first worker")

    def test_a_worker_that_does_not_offer_is_restarted(self):
        a = self.node("a", "no-offer", host=True)
        first = self.rounds_run([0, 1], 0)
        b = self.node("b", "no-offer")
        second = self.rounds_run([0, 1, 2, 3], 1)
        for r in (0, 1):
            self.assertNotEqual(second[r][0], first[r][0], f"rank {r}'s worker was not restarted")
        results = self.finish([a, b])
        self.assertEqual([r.code for r in results], [0, 0], results)
        self.assertEqual(self.of_event("a", "reformed_in_place"), [])
        self.assertEqual([e.get("in_place", False) for e in self.of_event("a", "restarting")], [False])

    def test_a_worker_that_never_takes_the_round_up_is_replaced_in_the_same_round(self):
        """a's workers offer but never take the new round up (as a worker stuck in a collective with a peer that
        vanished without a reset): --term-timeout (1 s) after the hand-over they are SIGKILLed and new workers start
        in the same round, which b's workers wait in. Nothing failed: no restart is used (--max-restarts 0)."""
        a = self.node("a", "never-take", host=True)
        first = self.rounds_run([0, 1], 0)
        b = self.node("b")
        second = self.rounds_run([0, 1, 2, 3], 1)
        for r in (0, 1):
            self.assertNotEqual(second[r][0], first[r][0], f"rank {r}'s worker was not replaced")
        results = self.finish([a, b])
        self.assertEqual([r.code for r in results], [0, 0], results)
        log = self.read(self.path("err_a.log"))
        self.assertIn("did not take the re-formed round up within 1000 ms (--term-timeout)", log)
        self.assertIn("this node's workers start again in the same round, sending SIGKILL to every worker", log)
        self.assertEqual(self.worlds("a"), [(0, 1, 2), (1, 2, 4)])
        self.assertEqual(self.worlds("b"), [(1, 2, 4)])
        self.assertEqual(len(self.of_event("a", "reform_not_taken")), 1)
        self.assertEqual([e["event"] for e in self.events_of("a")].count("started"), 4)  # 2 + 2 in round 1
        self.assertEqual(self.of_event("b", "reformed_in_place"), [])  # b's workers started in round 1

    def test_a_worker_stopped_as_a_node_is_lost_is_judged_hung_not_quietly_replaced(self):
        """Issue 32: a's rank 1 is SIGSTOPped as b is lost: the re-form in place waited for it until --term-timeout,
        then replaced a's workers with no hung event, no stacks, no root cause. Under --hang-timeout a worker that
        does not take the round up is hung: stacks, the job-wide verdict naming it (stopped), exit 78."""
        hang = ("--hang-timeout", 3)
        a = self.node("a", term_timeout=2, extra=hang, host=True)
        self.rounds_run([0, 1], 0)
        b = self.node("b", term_timeout=2, extra=hang)
        second = self.rounds_run([0, 1, 2, 3], 1)
        os.kill(second[1][0], signal.SIGSTOP)
        os.kill(b.pid, signal.SIGKILL)
        res_a, res_b = self.wait_all([a, b])
        self.assertEqual(res_b.code, -signal.SIGKILL)
        self.assertEqual(res_a.code, HUNG, res_a)
        log = self.read(self.path("err_a.log"))
        self.assertIn("did not take the re-formed round up within 2000 ms (--term-timeout)", log)
        self.assertRegex(log, r"root cause: rank 1 \(.*\) hung: .*rank 1 .*stopped \(SIGSTOP\)")
        self.assertIn("stacks in ", log)
        self.assertNotIn("start again in the same round", log)
        self.assertEqual(len(self.of_event("a", "hung")), 1)

    def test_a_worker_that_dies_while_the_round_forms_fails_in_the_new_round(self):
        """a re-forms in place while c restarts its workers (they did not offer, and take 3 s to exit on SIGTERM), so
        the round takes 3 s to form; meanwhile a's local rank 0 exits 3. Its failure is reported once the round is
        there, under its new rank (the rendezvous takes failures during a re-form for the teardown's): with
        --max-restarts 0 the job ends with it as the root cause, exit 3 on every node."""
        died = self.path("die")
        a = self.node("a", f"exit-on={died}", nnodes="2:3", host=True)
        c = self.node("c", "no-offer", "slow-term=3", nnodes="2:3")
        self.rounds_run([0, 1, 2, 3], 0)
        b = self.node("b", nnodes="2:3")
        self.wait_for(lambda: any(e.get("in_place") for e in self.of_event("a", "restarting")), "a re-forming in place")
        with open(died, "w"):
            pass
        results = self.wait_all([a, b, c])
        self.assertEqual([r.code for r in results], [3, 3, 3], results)
        log = self.read(self.path("err_a.log"))
        self.assertIn("rank 0: it ended while the job re-formed in place (exit code 3)", log)
        rounds = self.rounds("a")
        self.assertEqual([r.world for r in rounds], [(0, 2, 4), (1, 3, 6)])
        for r in results:
            self.assertIn(f"root cause: rank {rounds[1].rank_offset} (local rank 0, node {rounds[1].node_rank}, host "
                          f"{socket.gethostname()}", r.stderr.decode(errors="replace"), r)

    def test_a_stop_signal_while_the_round_forms_ends_that_node_and_the_others_go_on(self):
        """c (the host) restarts its workers slowly (no offer, 3 s to exit on SIGTERM), so the round takes 3 s to form
        after b joins; meanwhile d, whose workers stay in place, gets SIGTERM. d ends with 143 and its workers are gone;
        the round forms without it (2 nodes remain of --nnodes 2:3) and c and b finish."""
        c = self.node("c", "no-offer", "slow-term=3", nnodes="2:3", host=True)
        d = self.node("d", nnodes="2:3")
        first = self.rounds_run([0, 1, 2, 3], 0)
        offset = self.first_round("d").rank_offset
        pids = [first[r][0] for r in (offset, offset + 1)]
        b = self.node("b", nnodes="2:3")
        self.wait_for(lambda: any(e.get("in_place") for e in self.of_event("d", "restarting")), "d re-forming in place")
        os.kill(d.pid, signal.SIGTERM)
        res_d = self.wait_all([d])[0]
        self.assertEqual(res_d.code, 128 + signal.SIGTERM, res_d)
        self.assert_gone_within(pids, BOUND)
        self.rounds_run([0, 1, 2, 3], 1)  # c's and b's new workers: 2 nodes
        results = self.finish([c, b])
        self.assertEqual([r.code for r in results], [0, 0], results)
        self.assertEqual(self.worlds("c"), [(0, 2, 4), (1, 2, 4)])

    def held(self, name, ranks, restart):
        """Node NAME was assigned round RESTART while its workers of RANKS have not taken it up: the round is held
        for a joiner's workers (meet). Fails, rather than testing something else, when the hold is already over."""
        self.wait_for(lambda: any(r.restart_count == restart for r in self.rounds(name)), f"{name}'s round {restart}")
        taken = [r for r in ranks if os.path.exists(os.path.join(self.out, f"round.{r}.{restart}"))]
        self.assertEqual(taken, [], f"{name}'s workers took round {restart} up before the joiner's could meet")

    def test_a_stop_signal_while_a_round_is_held_for_a_joiner_ends_that_node_and_the_others_go_on(self):
        """c's workers stay for b's join, and the round is held for b's workers (6 s to their imports); meanwhile c
        gets SIGTERM. c ends with 143 at once and its workers are gone; a's workers, held too, drop that round and
        take the next one up (a and b) in place: the same pids, no restart used."""
        a = self.node("a", nnodes="2:3", host=True)
        c = self.node("c", nnodes="2:3")
        first = self.rounds_run([0, 1, 2, 3], 0)
        offset = self.first_round("c").rank_offset
        kept = [first[r][0] for r in (0, 1, 2, 3) if r not in (offset, offset + 1)]
        b = self.node("b", "slow-start=6", nnodes="2:3")
        self.held("c", [0, 1, 2, 3], 1)
        os.kill(c.pid, signal.SIGTERM)
        res_c = self.wait_all([c], timeout=10)[0]  # --term-timeout 1: its workers exit on SIGTERM at once
        self.assertEqual(res_c.code, 128 + signal.SIGTERM, res_c)
        self.assert_gone_within([first[offset][0], first[offset + 1][0]], BOUND)
        self.wait_for(lambda: self.rounds("a")[-1].restart_count >= 2, "a's round without c")
        last = self.rounds("a")[-1]
        self.assertEqual(last.world, (2, 2, 4), "a's round without c is not a and b")
        now = self.rounds_run([last.rank_offset, last.rank_offset + 1], 2)
        self.assertEqual(sorted(now[r][0] for r in now), sorted(kept), "a's workers were restarted")
        results = self.finish([a, b])
        self.assertEqual([r.code for r in results], [0, 0], results)
        self.assertEqual([e["event"] for e in self.events_of("a")].count("started"), 2, "a started new workers")

    def test_a_joiner_stopped_while_the_round_is_held_for_it_leaves_the_kept_workers_training(self):
        """b joins slowly (6 s to its workers' imports); a holds round 1 for it; b gets SIGTERM meanwhile. a drops
        the held round: its workers, still in round 0, take round 2 (a alone) up in place, never round 1."""
        a = self.node("a", host=True)
        first = self.rounds_run([0, 1], 0)
        b = self.node("b", "slow-start=6")
        self.held("a", [0, 1], 1)
        os.kill(b.pid, signal.SIGTERM)
        res_b = self.wait_all([b], timeout=10)[0]
        self.assertEqual(res_b.code, 128 + signal.SIGTERM, res_b)
        third = self.rounds_run([0, 1], 2)
        for r in (0, 1):
            self.assertEqual(third[r][:2], (first[r][0], 2), f"rank {r}: replaced, or not in a world of 2")
            self.assertFalse(os.path.exists(os.path.join(self.out, f"round.{r}.1")), "a's workers took round 1 up")
        res_a = self.finish([a])[0]
        self.assertEqual(res_a.code, 0, res_a)
        self.assertEqual([e["event"] for e in self.events_of("a")].count("started"), 2, "a started new workers")

    def test_a_worker_that_exits_while_the_round_is_held_fails_the_job(self):
        """a's local rank 0 exits 3 while round 1 is held for b's slow start: a worker failure of the round the
        rendezvous runs (round 1, under its rank there); with --max-restarts 0 the job ends with it as the root
        cause, exit 3 on both nodes, b's starting workers torn down too, nothing handed over."""
        died = self.path("die")
        a = self.node("a", f"exit-on={died}", host=True)
        self.rounds_run([0, 1], 0)
        b = self.node("b", "slow-start=30")
        self.held("a", [0, 1], 1)
        with open(died, "w"):
            pass
        results = self.wait_all([a, b])
        self.assertEqual([r.code for r in results], [3, 3], results)
        for r in results:
            self.assertIn(f"root cause: rank 0 (local rank 0, node 0, host {socket.gethostname()}",
                          r.stderr.decode(errors="replace"), r)
        self.assertEqual(self.of_event("a", "reformed_in_place"), [])

    def test_a_worker_renumbered_while_the_round_is_held_fails_under_its_new_rank(self):
        """Three nodes train (a hosts; b and d); c joins slowly and the round is held for it; the lower of b and d
        is SIGKILLed meanwhile, so the next held round numbers the other one's workers lower. Its local rank 0 then
        exits 3: the job fails with it as the root cause under the rank of the round the rendezvous runs, on every
        node, and no round is handed over. Session 25 moved a kept worker's rank to the new round's at the
        assignment; until now no test had a kept node's ranks change while a round was held."""
        died = self.path("die")
        a = self.node("a", nnodes="2:4", host=True)
        b = self.node("b", f"exit-on={died}", nnodes="2:4")
        d = self.node("d", f"exit-on={died}", nnodes="2:4")
        self.rounds_run(range(6), 0)
        (lost, _), (kept, before) = sorted(((p, self.first_round(p.name)) for p in (b, d)), key=lambda x: x[1].node_rank)
        c = self.node("c", "slow-start=30", nnodes="2:4")
        self.held(kept.name, [before.rank_offset, before.rank_offset + 1], 1)
        os.kill(lost.pid, signal.SIGKILL)
        self.wait_for(lambda: self.rounds(kept.name)[-1].restart_count >= 2, f"{kept.name}'s round without {lost.name}")
        now = self.rounds(kept.name)[-1]
        self.assertLess(now.rank_offset, before.rank_offset, f"the ranks did not move down: {self.rounds(kept.name)}")
        self.held(kept.name, [now.rank_offset, now.rank_offset + 1], now.restart_count)
        with open(died, "w"):
            pass
        results = self.wait_all([a, kept, c])
        self.assertEqual([r.code for r in results], [3, 3, 3], results)
        for r in results:
            self.assertIn(f"root cause: rank {now.rank_offset} (local rank 0, node {now.node_rank}, host "
                          f"{socket.gethostname()}", r.stderr.decode(errors="replace"), r)
        self.assertEqual(self.of_event(kept.name, "reformed_in_place"), [])
        self.wait_all([lost])

    def test_a_worker_stopped_while_the_round_is_held_is_judged_hung(self):
        """a's workers train on in round 0 while round 1 is held for b's slow start (longer than the hold's 10-s
        bound); a's rank 1 is SIGSTOPped meanwhile. The hold does not hide it: the hang watch judges it within
        --hang-timeout, while the round is still held (before, nobody watched until the hand-over, and the stopped
        rank was found only when it did not take the round up, 12 s later); the job-wide verdict names rank 1
        (stopped), exit 78 on both nodes."""
        hang = ("--hang-timeout", 3)
        a = self.node("a", term_timeout=2, extra=hang, host=True)
        first = self.rounds_run([0, 1], 0)
        b = self.node("b", "slow-start=30", term_timeout=2, extra=hang)
        self.held("a", [0, 1], 1)
        os.kill(first[1][0], signal.SIGSTOP)
        res_a, res_b = self.wait_all([a, b])
        self.assertEqual((res_a.code, res_b.code), (HUNG, HUNG), (res_a, res_b))
        for name in ("a", "b"):
            self.assertRegex(self.read(self.path(f"err_{name}.log")), r"root cause: rank 1 \(.*\) hung: .*stopped")
        self.assertEqual(len(self.of_event("a", "hung")), 1)
        self.assertNotIn("did not take the re-formed round up", self.read(self.path("err_a.log")))
        self.assertEqual(self.of_event("a", "reformed_in_place"), [])

    def test_a_joiner_that_hangs_after_saying_it_is_ready_is_judged_within_the_hang_timeout(self):
        """Issue 56 (2 of 2 froze for good): b's workers import the helper (ready to meet) and then hang before their
        first beat; a's workers take the round up and wait in the new group's set-up for them, silent. Nobody had
        beaten in the new round, so --hang-timeout never judged, and the job waited forever. a's workers were alive
        in the job: after the hand-over each owes its first beat within the hang timeout, the inquiry runs, and
        the job ends 78 on both nodes."""
        hang = ("--hang-timeout", 3)
        a = self.node("a", "quiet-after-take=600", term_timeout=30, extra=hang, host=True)
        self.rounds_run([0, 1], 0)
        b = self.node("b", "hang-after-import", term_timeout=30, extra=hang)
        res_a, res_b = self.wait_all([a, b])
        self.assertEqual((res_a.code, res_b.code), (HUNG, HUNG), (res_a, res_b))
        self.assertEqual(len(self.of_event("a", "reformed_in_place")), 1)  # handed over, then judged
        for name in ("a", "b"):
            self.assertRegex(self.read(self.path(f"err_{name}.log")), r"root cause: .*hung")
        self.assertNotIn("did not take the re-formed round up", self.read(self.path("err_a.log")))

    def read(self, path):
        with open(path, errors="replace") as f:
            return f.read()
