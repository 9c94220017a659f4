// The job-wide hang verdict as a pure decision (rendezvous/hang_verdict.hpp): from every node's view of its
// workers, the rank that holds the others, or an honest "could not tell"; the server's inquiry around it is in
// state_machine_hang_test.cpp.
#include <doctest/doctest.h>

#include <csignal>

#include "rendezvous/hang_verdict.hpp"
#include "tests/rendezvous/hang_view_samples.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

TEST_SUITE("hang verdict") {
  // Issue 33: an insider's view claims its own rank at step 10^9; the honest rank, at step 100, is "behind" but
  // beat 0.0 s before: its own node's view does not confirm it silent, and it is not named.
  TEST_CASE("a rank its own node does not confirm silent is never named") {
    std::vector<NodeHangView> views{{0, "insider", view({beat(0, 1'000'000'000, 60'000)}, true, "")},
                                    {1, "honest", view({beat(1, 100, 0, false)}, false, "")}};
    const Failure f = hang_verdict(views, 0);
    CHECK(f.rank != 1);
    CHECK(f.rank == 0);  // the only rank its own node calls silent: the insider's own
    // Nobody confirmed at all (the insider reports only the honest rank's node... its own rank beating too).
    std::vector<NodeHangView> none{{0, "insider", view({beat(0, 1'000'000'000, 0, false)}, true, "")},
                                   {1, "honest", view({beat(1, 100, 100, false)}, false, "")}};
    const Failure g = hang_verdict(none, 0);
    CHECK(g.rank < 0);
    CHECK(g.message.find("no rank's own node confirms it silent: nobody is named") != std::string::npos);
    // A real hang: every rank silent for seconds, within a step of each other; the one behind is named.
    std::vector<NodeHangView> real{{0, "a", view({beat(0, 42, 3000)}, true, "")},
                                   {1, "b", view({beat(1, 41, 2200, false)}, false, "")}};
    CHECK(hang_verdict(real, 0).rank == 1);
  }

  TEST_CASE("the rank behind is named, not the one silent longest, with where the others were") {
    // Ranks 0-2 wait in step 42's collective; rank 3 never reached it. Rank 0 went silent first by a hair.
    std::vector<NodeHangView> views{{0, "a", view({beat(0, 42, 3001), beat(1, 42, 3000)}, true, "/a/h.txt")},
                                    {1, "b", view({beat(2, 42, 2990), beat(3, 41, 2500, false)}, false, "/b/h.txt")}};
    const Failure f = hang_verdict(views, 1'700'000'010'000);
    CHECK(f.rank == 3);
    CHECK(f.local_rank == 1);
    CHECK(f.node_rank == 1);
    CHECK(f.host == "b");
    CHECK(f.pid == 1003);
    CHECK(f.signal == std::optional<int>(SIGKILL));
    CHECK(is_hang(f));
    CHECK(exit_status_of(f) == 78);
    CHECK(f.message.rfind("hung: no heartbeat for 2.5 s after step 41 (last beat at ", 0) == 0);
    CHECK(f.message.find("rank 3 at step 41 while ranks 0-2 at step 42") != std::string::npos);
    CHECK(f.message.find("stacks in a:/a/h.txt, b:/b/h.txt") != std::string::npos);
  }

  // Issue 32: silences a few hundred ms apart named a waiting rank at random (the lowest rank on a tie).
  TEST_CASE("among ranks at the same step, the one silent longest by a clear margin; else nobody is named") {
    std::vector<NodeHangView> views{{0, "a", view({beat(0, 7, 100), beat(1, 7, 100 + kSilenceMarginMs)}, true, "/a")}};
    CHECK(hang_verdict(views, 0).rank == 1);
    views[0].view.ranks[0].silent_ms = 900;  // 200 ms apart: lockstep ranks beat together
    const Failure f = hang_verdict(views, 0);
    CHECK(f.unsure);
    CHECK(f.rank == 1);  // only the first of them, for the mechanics (a worker's failure: restarts count)
    CHECK(f.node_rank == 0);
    CHECK(is_hang(f));
    CHECK(exit_status_of(f) == 78);
    CHECK(f.message.rfind("hung: ranks 0-1 silent for about 1.1 s at step 7; could not tell which one holds the "
                          "others; killed with SIGKILL", 0) == 0);
    CHECK(f.message.find("stacks in /a") != std::string::npos);
    CHECK(describe(f).rfind("the job hung: ranks 0-1", 0) == 0);
  }

  TEST_CASE("at the same step, a stopped process is named: it holds every other rank") {
    RankBeat stopped = beat(1, 100, 6000);
    stopped.stopped = true;
    std::vector<NodeHangView> views{{0, "a", view({beat(0, 100, 6100), stopped}, true, "")}};
    const Failure f = hang_verdict(views, 0);
    CHECK(f.rank == 1);
    CHECK(f.message.find("rank 1 at step 100 stopped (SIGSTOP) while rank 0 at step 100") != std::string::npos);
  }

  TEST_CASE("among ranks the stacks cannot tell apart, one named a straggler before it stopped is named") {
    // Every rank inside a collective by its stacks (a straggler stuck in one of its own), silences too close.
    RankBeat slow = in(beat(2, 88, 30'100), "all_reduce");
    slow.slow = true;
    std::vector<NodeHangView> views{{0, "a", view({in(beat(0, 88, 30'000), "all_reduce"),
                                                   in(beat(1, 88, 30'050), "all_reduce"), slow}, true, "")}};
    const Failure f = hang_verdict(views, 0);
    CHECK(f.rank == 2);
    CHECK_FALSE(f.unsure);
    CHECK(f.message.find("rank 2 at step 88 (named a straggler) in all_reduce") != std::string::npos);
  }

  TEST_CASE("the README loop under DDP: the waiting ranks sit in backward, the stuck one outside it") {
    // Beat after opt.step(); rank 1 stuck before its forward at step 5, ranks 0 and 2 wait in DDP's all-reduce.
    std::vector<NodeHangView> views{{0, "a",
                                     view({in(beat(0, 4, 3300), "backward"), in(beat(1, 4, 3290), ""),
                                           in(beat(2, 4, 3310), "backward")},
                                          true, "")}};
    const Failure f = hang_verdict(views, 0);
    CHECK(f.rank == 1);
    CHECK(f.message.find("rank 1 at step 4 outside any collective while ranks 0,2 at step 4 in backward") !=
          std::string::npos);
    // Uneven data: the rank that ran out waits in barrier, the others in the next backward: the odd one out.
    std::vector<NodeHangView> uneven{{0, "a",
                                      view({in(beat(0, 9, 3000), "backward"), in(beat(1, 9, 3000), "barrier"),
                                            in(beat(2, 9, 3000), "backward")},
                                           true, "")}};
    CHECK(hang_verdict(uneven, 0).rank == 1);
  }

  TEST_CASE("silences of different nodes are compared as of the verdict, not as each node measured them") {
    // Node 0 answered 5 s before node 1 (node 1's capture was slow): its 3.0 s are 8.0 s by the verdict.
    std::vector<NodeHangView> views{{0, "a", view({beat(0, 7, 3000)}, true, "/a"), 5000},
                                    {1, "b", view({beat(1, 7, 3500)}, false, "/b"), 0}};
    const Failure f = hang_verdict(views, 1'700'000'000'000);
    CHECK(f.rank == 0);
    CHECK(f.message.rfind("hung: no heartbeat for 8.0 s", 0) == 0);
  }

  TEST_CASE("a rank in a declared quiet phase defers the verdict for its bound; none quiet, none deferred") {
    RankBeat saving = beat(0, 12, 9000, false);
    saving.quiet = true;
    saving.quiet_left_ms = 48'000;
    std::vector<NodeHangView> views{{0, "a", view({saving}, false, ""), 0},
                                    {1, "b", view({in(beat(1, 12, 5100), "barrier")}, true, ""), 0}};
    const std::optional<HangDeferredMsg> d = quiet_deferral(views);
    REQUIRE(d.has_value());
    CHECK(d->quiet_ranks == std::vector<int>{0});
    CHECK(d->wait_ms == 48'000);
    views[0].view.ranks[0].quiet_left_ms = 0;  // an older agent: bound not said, looked at again soon
    CHECK(quiet_deferral(views)->wait_ms == 10'000);
    // A quiet rank whose stacks show it waiting in a collective waits like the others: no deferral for it.
    views[0].view.ranks[0] = in(views[0].view.ranks[0], "all_reduce");
    CHECK_FALSE(quiet_deferral(views).has_value());
    views[0].view.ranks[0] = in(views[0].view.ranks[0], "");  // outside any: its save is what the others wait for
    CHECK(quiet_deferral(views).has_value());
    views[0].view.ranks[0].quiet = false;
    CHECK_FALSE(quiet_deferral(views).has_value());
  }

  TEST_CASE("at the same step, the odd one out in another collective is named: it skipped the others' call") {
    // Rank 1 skipped step 42's all_reduce and waits in barrier; ranks 0, 2, 3 wait in the all_reduce. Rank 0
    // went silent first.
    std::vector<NodeHangView> views{
        {0, "a", view({in(beat(0, 42, 3100), "all_reduce"), in(beat(1, 42, 3000), "barrier")}, true, "/a")},
        {1, "b", view({in(beat(2, 42, 3050), "all_reduce"), in(beat(3, 42, 3020), "all_reduce")}, false, "/b")}};
    const Failure f = hang_verdict(views, 0);
    CHECK(f.rank == 1);
    CHECK(f.message.find("rank 1 at step 42 in barrier while ranks 0,2-3 at step 42 in all_reduce") !=
          std::string::npos);
  }

  TEST_CASE("at the same step, a rank outside any collective is named: the others wait in one for it") {
    std::vector<NodeHangView> views{
        {0, "a", view({in(beat(0, 7, 3100), "all_reduce"), in(beat(1, 7, 2000), "")}, true, "/a")}};
    const Failure f = hang_verdict(views, 0);
    CHECK(f.rank == 1);
    CHECK(f.message.find("rank 1 at step 7 outside any collective while rank 0 at step 7 in all_reduce") !=
          std::string::npos);
  }

  TEST_CASE("stacks that do not tell (an even split, or none captured) leave it to the silence") {
    std::vector<NodeHangView> even{{0, "a",
                                    view({in(beat(0, 7, 100), "all_reduce"), in(beat(1, 7, 200), "all_reduce"),
                                          in(beat(2, 7, 300), "barrier"), in(beat(3, 7, 2400), "barrier")},
                                         true, "")}};
    CHECK(hang_verdict(even, 0).rank == 3);
    std::vector<NodeHangView> native{{0, "a", view({beat(0, 7, 2900), beat(1, 7, 100)}, true, "")}};  // C++ ranks
    CHECK(hang_verdict(native, 0).rank == 0);
    native[0].view.ranks[0].silent_ms = 900;  // too close to tell
    CHECK(hang_verdict(native, 0).unsure);
    CHECK_FALSE(hang_verdict(even, 0).unsure);
  }

  TEST_CASE("the step comes before the stacks: a rank behind is named whatever call it is in") {
    std::vector<NodeHangView> views{
        {0, "a", view({in(beat(0, 8, 100), ""), in(beat(1, 7, 50), "all_reduce")}, true, "")}};
    CHECK(hang_verdict(views, 0).rank == 1);
  }

  TEST_CASE("a rank inside its declared quiet phase is not the suspect, however long its silence") {
    RankBeat waiting = beat(0, -1, 9000, false);  // waits in a collective, quiet by its word
    waiting.quiet = true;
    std::vector<NodeHangView> views{{0, "a", view({waiting, beat(1, -1, 2500)}, true, "")}};
    CHECK(hang_verdict(views, 0).rank == 1);
  }

  TEST_CASE("a rank that never beat is behind every rank that did; one node's stacks need no host") {
    RankBeat never = beat(1, -1, 60'000);
    never.never_beat = true;
    std::vector<NodeHangView> views{{0, "a", view({beat(0, 3, 5000), never}, true, "/a/h.txt")}};
    const Failure f = hang_verdict(views, 0);
    CHECK(f.rank == 1);
    CHECK(f.message.rfind("hung: no first heartbeat 60.0 s after its start (--hang-initial-timeout)", 0) == 0);
    views[0].view.ranks[1].hung = false;  // not its initial timeout: the verdict named it
    CHECK(hang_verdict(views, 0).message.rfind("hung: no first heartbeat 60.0 s after its start;", 0) == 0);
    CHECK(f.message.find("rank 1 before its first heartbeat while rank 0 at step 3") != std::string::npos);
    CHECK(f.message.find("stacks in /a/h.txt") != std::string::npos);
  }

  // Issue 32: a round held for a joiner's workers (meet) while the kept ones train on in the previous round. The
  // kept rank 1 is SIGSTOPped; the joiner's ranks 2-3, still importing, never beat. They hold nobody: rank 1 is
  // named. Without the held view (a round that began), never beating is the furthest behind, as before.
  TEST_CASE("a round held for a joiner: its starting ranks are not the suspects, the kept workers are") {
    RankBeat stopped = beat(1, 40, 3100);
    stopped.stopped = true;
    RankBeat starting2 = beat(2, -1, 3100, false), starting3 = beat(3, -1, 3100, false);
    starting2.never_beat = starting3.never_beat = true;
    std::vector<NodeHangView> views{{0, "a", view({beat(0, 62, 40, false), stopped}, true, "/a/h.txt")},
                                    {1, "b", view({starting2, starting3}, false, "/b/h.txt")}};
    views[0].view.held = true;
    const Failure f = hang_verdict(views, 0);
    CHECK(f.rank == 1);
    CHECK_FALSE(f.unsure);
    CHECK(f.message.find("ranks 2-3 before its first heartbeat") != std::string::npos);
    SUBCASE("nobody of the kept nodes silent: a starting rank is still named") {
      views[0].view.ranks = {beat(0, 62, 40, false), beat(1, 62, 40, false)};
      CHECK(hang_verdict(views, 0).rank >= 2);
    }
    SUBCASE("not held (the round began): never beating is the furthest behind") {
      views[0].view.held = false;
      CHECK(hang_verdict(views, 0).rank >= 2);
    }
  }

  // It used to carry exit code 1 with no rank, which no agent decodes (a node's failure has no exit code but
  // 69): the stop order that ended the job was a protocol error on every node.
  TEST_CASE("no running worker in any view: a job failure that blames nobody, still a hang, and every node reads it") {
    const Failure f = hang_verdict({{2, "c", view({}, true, "")}}, 5);
    CHECK(f.rank == -1);
    CHECK(f.node_rank == 2);
    CHECK(is_hang(f));
    CHECK(f.message.rfind("hung:", 0) == 0);
    CHECK(exit_status_of(f) == 78);  // the job ended for a hang: the code a batch script tells hangs by
    CHECK(describe(f).rfind("the job hung: ", 0) == 0);  // not "node 2 lost"
    StopMsg stop;
    stop.root_cause = f;
    stop.reason = "hang verdict";
    const auto decoded = std::get<StopMsg>(decode_server_message(encode(ServerMessage{stop})));
    CHECK(decoded.root_cause == f);
  }

  TEST_CASE("rank lists join runs of consecutive ranks") {
    CHECK(rank_list({3}) == "rank 3");
    CHECK(rank_list({5, 0, 1, 2, 7, 8}) == "ranks 0-2,5,7-8");
    CHECK(rank_list({1, 1}) == "rank 1");
  }

  TEST_CASE("the message stays bounded whatever the world size") {
    std::vector<RankBeat> ranks;
    for (int r = 0; r < 20000; ++r) ranks.push_back(beat(r, r % 2 ? r + 10 : 5, r == 0 ? 5000 : 10));  // many steps
    Failure f = hang_verdict({{0, "a", view(ranks, true, "/a/h.txt")}}, 0);
    CHECK(f.rank == 0);
    CHECK(f.message.size() <= kMaxMessageBytes);
    CHECK(f.message.find("and others") != std::string::npos);
    ranks[0].silent_ms = 10;  // 10 000 ranks at step 5 that nothing separates: listed, bounded
    f = hang_verdict({{0, "a", view(ranks, true, "/a/h.txt")}}, 0);
    CHECK(f.unsure);
    CHECK(f.message.size() <= kMaxMessageBytes);
    CHECK(f.message.find("and 9992 more") != std::string::npos);
    CHECK(f.message.find("could not tell") != std::string::npos);
  }
}
