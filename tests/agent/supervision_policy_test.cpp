// One rule per case: the node's job as a pure state machine, no processes, no clock.
#include <doctest/doctest.h>

#include <csignal>

#include "agent/supervision_policy.hpp"

using namespace ddprun::agent;
using ddprun::process::ExitStatus;
using ddprun::kExitPreempted;

namespace {
ExitStatus exited(int code) { return {false, code, 0, false}; }
ExitStatus killed(int sig) { return {true, 0, sig, false}; }

SupervisionPolicy three_workers() {
  SupervisionPolicy p;
  for (int lr = 0; lr < 3; ++lr) p.add_worker(10 + lr, lr, 100 + lr, 0);
  return p;
}
}  // namespace

TEST_CASE("a worker that exits 0 is done and changes nothing for the others") {
  auto p = three_workers();
  const Decision d = p.on_exit(1, exited(0), 5);
  CHECK(d.signal_all == 0);
  CHECK_FALSE(d.arm_grace);
  CHECK(p.worker(1).state == WorkerState::kSucceeded);
  CHECK(p.phase() == Phase::kRunning);
}

TEST_CASE("the job succeeds with exit code 0 when every worker exited 0") {
  auto p = three_workers();
  for (int lr = 0; lr < 3; ++lr) p.on_exit(lr, exited(0), lr);
  CHECK(p.all_exited());
  CHECK(p.exit_code() == 0);
  CHECK(p.root_cause() == nullptr);
}

TEST_CASE("the first non-zero exit stops everyone with SIGTERM and arms the grace timer") {
  auto p = three_workers();
  const Decision d = p.on_exit(1, exited(3), 7);
  CHECK(d.signal_all == SIGTERM);
  CHECK(d.arm_grace);
  CHECK(d.teardown_began);
  CHECK(p.phase() == Phase::kStopping);
  CHECK(p.teardown_ms() == 7);
  REQUIRE(p.root_cause() != nullptr);
  CHECK(p.root_cause()->rank == 11);
}

TEST_CASE("a death by signal is a failure like a non-zero exit") {
  auto p = three_workers();
  CHECK(p.on_exit(2, killed(SIGSEGV), 1).signal_all == SIGTERM);
  CHECK(p.worker(2).state == WorkerState::kFailed);
  CHECK(p.exit_code() == 128 + SIGSEGV);
}

TEST_CASE("workers that die after the teardown began are victims, not the root cause") {
  auto p = three_workers();
  p.on_exit(1, exited(3), 1);
  CHECK(p.on_exit(0, killed(SIGTERM), 2).signal_all == 0);
  CHECK(p.on_exit(2, exited(143), 3).signal_all == 0);
  CHECK(p.worker(0).state == WorkerState::kVictim);
  CHECK(p.worker(2).state == WorkerState::kVictim);
  CHECK(p.root_cause()->local_rank == 1);
  CHECK(p.exit_code() == 3);
}

TEST_CASE("a worker that exits 0 during the teardown is counted as succeeded") {
  auto p = three_workers();
  p.on_exit(0, exited(1), 1);
  p.on_exit(1, exited(0), 2);
  CHECK(p.worker(1).state == WorkerState::kSucceeded);
}

TEST_CASE("the root cause's exit code becomes ddprun's, for every code 1..255") {
  for (int code = 1; code <= 255; ++code) {
    auto p = three_workers();
    p.on_exit(0, exited(code), 1);
    CHECK(p.exit_code() == code);
  }
}

TEST_CASE("the grace period running out escalates to SIGKILL once") {
  auto p = three_workers();
  p.on_exit(0, exited(1), 1);
  const Decision d = p.on_grace_expired(30001);
  CHECK(d.signal_all == SIGKILL);
  CHECK(p.phase() == Phase::kKilling);
  CHECK(p.on_grace_expired(30002).signal_all == 0);
}

TEST_CASE("a stop signal to ddprun is forwarded and starts the teardown") {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    auto p = three_workers();
    const Decision d = p.on_signal(sig, 4);
    CHECK(d.signal_all == sig);
    CHECK(d.arm_grace);
    CHECK(p.phase() == Phase::kStopping);
    for (int lr = 0; lr < 3; ++lr) p.on_exit(lr, killed(sig), 5);
    CHECK(p.exit_code() == 128 + sig);
  }
}

TEST_CASE("a second SIGINT kills at once") {
  auto p = three_workers();
  p.on_signal(SIGINT, 1);
  CHECK(p.on_signal(SIGINT, 2).signal_all == SIGKILL);
  CHECK(p.phase() == Phase::kKilling);
}

TEST_CASE("a second SIGQUIT kills at once; a second SIGTERM or SIGHUP is not forwarded again") {
  auto q = three_workers();
  q.on_signal(SIGTERM, 1);
  CHECK(q.on_signal(SIGQUIT, 2).signal_all == SIGKILL);
  for (int second : {SIGTERM, SIGHUP}) {
    auto p = three_workers();
    p.on_signal(SIGTERM, 1);
    const Decision d = p.on_signal(second, 2);
    CHECK(d.signal_all == 0);
    CHECK_FALSE(d.teardown_began);
    CHECK(p.phase() == Phase::kStopping);
    CHECK(p.stop_signal() == SIGTERM);
  }
}

TEST_CASE("a stop signal during an external teardown (a restart) is remembered") {
  auto p = three_workers();
  p.on_external_stop(1);
  const Decision d = p.on_signal(SIGHUP, 2);
  CHECK(d.signal_all == 0);
  CHECK(p.stop_signal() == SIGHUP);
}

TEST_CASE("SIGUSR1 and SIGUSR2 are forwarded and nothing else happens") {
  for (int sig : {SIGUSR1, SIGUSR2}) {
    auto p = three_workers();
    const Decision d = p.on_signal(sig, 1);
    CHECK(d.signal_all == sig);
    CHECK_FALSE(d.arm_grace);
    CHECK(p.phase() == Phase::kRunning);
  }
}

TEST_CASE("a worker failure before a stop signal stays the root cause") {
  auto p = three_workers();
  p.on_exit(2, exited(7), 1);
  p.on_signal(SIGINT, 2);
  CHECK(p.exit_code() == 7);
}

TEST_CASE("of two failures reaped together, the first reported is the root cause and the other a victim") {
  auto p = three_workers();
  p.on_exit(2, exited(5), 1);
  // Reaped right after the teardown's SIGTERM went out: whether it died of that signal or just before
  // cannot be told from waitpid, so it is reported as a victim with its own exit status.
  p.on_exit(0, exited(6), 1);
  CHECK(p.root_cause()->local_rank == 2);
  CHECK(p.worker(0).state == WorkerState::kVictim);
  CHECK(p.worker(0).status.code == 6);
  CHECK(p.exit_code() == 5);
}

TEST_CASE("an external stop tears down and exits 1 when no local worker failed") {
  auto p = three_workers();
  const Decision d = p.on_external_stop(3);
  CHECK(d.signal_all == SIGTERM);
  for (int lr = 0; lr < 3; ++lr) p.on_exit(lr, killed(SIGTERM), 4);
  CHECK(p.root_cause() == nullptr);
  CHECK(p.exit_code() == 1);
}

TEST_CASE("the job's root cause from another node tears this node down and sets the exit code") {
  auto p = three_workers();
  JobCause cause;
  cause.text = "rank 40 (local rank 0, node 3, host h3, pid 9) exited with code 7";
  cause.exit_code = 7;
  cause.node_rank = 3;
  cause.rank = 40;
  const Decision d = p.on_job_cause(cause, 20);
  CHECK(d.teardown_began);
  CHECK(d.signal_all == SIGTERM);
  CHECK(p.phase() == Phase::kStopping);
  for (int lr = 0; lr < 3; ++lr) p.on_exit(lr, killed(SIGTERM), 21);
  CHECK(p.worker(0).state == WorkerState::kVictim);
  CHECK(p.exit_code() == 7);
  REQUIRE(p.job_cause());
  CHECK(p.job_cause()->node_rank == 3);
}

TEST_CASE("the rendezvous' root cause replaces this node's own earlier failure") {
  auto p = three_workers();
  p.on_exit(0, exited(2), 10);  // local failure, but another node's was received first by the server
  JobCause cause;
  cause.exit_code = 128 + SIGSEGV;
  const Decision d = p.on_job_cause(cause, 11);
  CHECK_FALSE(d.teardown_began);  // already tearing down
  CHECK(p.exit_code() == 128 + SIGSEGV);
}

TEST_CASE("a job cause with exit code 0 still fails the job") {
  auto p = three_workers();
  p.on_job_cause(JobCause{}, 1);
  CHECK(p.exit_code() != 0);
}

TEST_CASE("a restart round forgets the attempt's workers and failures") {
  auto p = three_workers();
  p.on_exit(1, exited(3), 10);
  p.on_exit(0, killed(SIGTERM), 11);
  p.on_exit(2, killed(SIGTERM), 11);
  CHECK(p.exit_code() == 3);
  p.reset_for_restart();
  CHECK(p.workers().empty());
  CHECK(p.phase() == Phase::kRunning);
  CHECK(p.root_cause() == nullptr);
  CHECK(p.exit_code() == 0);
  p.add_worker(10, 0, 200, 12);
  CHECK_FALSE(p.all_exited());
}

TEST_CASE("in a SLURM job a notice, then every worker exiting 0, is preempted (79); killed by the notice is not") {
  auto p = three_workers();
  p.set_preemption_exit(true);
  p.on_signal(SIGUSR1, 1);
  for (int lr = 0; lr < 3; ++lr) p.on_exit(lr, exited(0), 2);
  CHECK(p.preempted());
  CHECK(p.exit_code() == kExitPreempted);
  auto q = three_workers();
  q.set_preemption_exit(true);
  q.on_signal(SIGUSR1, 1);
  q.on_exit(0, killed(SIGUSR1), 2);  // no handler: no checkpoint either
  CHECK_FALSE(q.preempted());
  CHECK(q.exit_code() == 128 + SIGUSR1);
}

TEST_CASE("in a SLURM job SIGTERM, here or on another node, then every worker exiting 0 is preempted; SIGINT is not") {
  auto p = three_workers();
  p.set_preemption_exit(true);
  p.on_signal(SIGTERM, 1);
  for (int lr = 0; lr < 3; ++lr) p.on_exit(lr, exited(0), 2);
  CHECK(p.exit_code() == kExitPreempted);
  auto elsewhere = three_workers();
  elsewhere.set_preemption_exit(true);
  elsewhere.on_job_cause(JobCause{"ddprun on node 0 (host a) received SIGTERM", 128 + SIGTERM, 0, -1, "", 1}, 1);
  for (int lr = 0; lr < 3; ++lr) elsewhere.on_exit(lr, exited(0), 2);
  CHECK(elsewhere.exit_code() == kExitPreempted);
  auto ctrl_c = three_workers();
  ctrl_c.set_preemption_exit(true);
  ctrl_c.on_signal(SIGINT, 1);
  for (int lr = 0; lr < 3; ++lr) ctrl_c.on_exit(lr, exited(0), 2);
  CHECK(ctrl_c.exit_code() == 128 + SIGINT);
}

// Issue 34: the job failed elsewhere (rank 1 exited 3), then srun -K's SIGTERM, a scancel or a USR1 reached this
// node during the teardown and its workers saved and exited 0: it said "preempted", 79, and the recipe requeued a
// failed job. The root cause's code, on every node.
TEST_CASE("in a SLURM job a failure elsewhere stays a failure whatever stop comes during its teardown") {
  const JobCause failed{"rank 1 (local rank 0, node 1, host b, pid 42) exited with code 3", 3, 1, 1, "", 1};
  for (int stop : {SIGTERM, SIGUSR1}) {
    auto cause_first = three_workers();
    cause_first.set_preemption_exit(true);
    cause_first.on_job_cause(failed, 1);
    cause_first.on_signal(stop, 2);
    for (int lr = 0; lr < 3; ++lr) cause_first.on_exit(lr, exited(0), 3);
    CHECK_FALSE(cause_first.preempted());
    CHECK(cause_first.exit_code() == 3);
    auto signal_first = three_workers();  // -K's SIGTERM overtakes the rendezvous' stop
    signal_first.set_preemption_exit(true);
    signal_first.on_signal(stop, 1);
    signal_first.on_job_cause(failed, 2);
    for (int lr = 0; lr < 3; ++lr) signal_first.on_exit(lr, exited(0), 3);
    CHECK(signal_first.exit_code() == 3);
  }
  // A notice the workers handled and went on from, then an unrelated failure elsewhere: the failure's code.
  auto noticed = three_workers();
  noticed.set_preemption_exit(true);
  noticed.on_signal(SIGUSR1, 1);
  noticed.on_job_cause(failed, 9000);
  for (int lr = 0; lr < 3; ++lr) noticed.on_exit(lr, exited(0), 9001);
  CHECK(noticed.exit_code() == 3);
}

TEST_CASE("in a SLURM job a notice before any worker runs does not make a completed job preempted") {
  SupervisionPolicy p;
  p.set_preemption_exit(true);
  p.on_signal(SIGUSR1, 1);  // waiting in the rendezvous: no worker yet
  p.add_worker(0, 0, 100, 2);
  p.on_exit(0, exited(0), 3);
  CHECK_FALSE(p.preempted());
  CHECK(p.exit_code() == 0);
}

TEST_CASE("outside a batch scheduler a notice stays a notice (exit 0) and SIGTERM gives 143, clean exits or not") {
  auto p = three_workers();
  p.on_signal(SIGUSR1, 1);
  for (int lr = 0; lr < 3; ++lr) p.on_exit(lr, exited(0), 2);
  CHECK_FALSE(p.preempted());
  CHECK(p.exit_code() == 0);
  auto q = three_workers();
  q.on_signal(SIGTERM, 1);
  for (int lr = 0; lr < 3; ++lr) q.on_exit(lr, exited(0), 2);
  CHECK(q.exit_code() == 128 + SIGTERM);
}

TEST_CASE("a SIGKILL is from outside the job unless the policy sent it or the worker hung") {
  auto p = three_workers();
  CHECK(p.killed_from_outside(0, killed(SIGKILL)));  // the OOM killer, a user's kill -9
  CHECK_FALSE(p.killed_from_outside(0, killed(SIGSEGV)));
  CHECK_FALSE(p.killed_from_outside(0, exited(137)));
  p.on_hung(1, 5);  // ddprun kills a hung worker itself
  CHECK_FALSE(p.killed_from_outside(1, killed(SIGKILL)));
  CHECK(p.killed_from_outside(2, killed(SIGKILL)));  // during the SIGTERM grace period: not ddprun's
  p.on_grace_expired(10);  // from now on every SIGKILL may be ddprun's
  CHECK_FALSE(p.killed_from_outside(2, killed(SIGKILL)));
}

// --- a worker still exiting after its error file (agent/error_file_watch.hpp) ---

TEST_CASE("a worker still exiting after its error file is the failure then, with the code 1 it will exit with") {
  auto p = three_workers();
  const Decision d = p.on_error_file(1, 40);
  CHECK(d.teardown_began);
  CHECK(d.signal_all == SIGTERM);  // itself included: its grace is over
  CHECK(d.arm_grace);
  REQUIRE(p.root_cause() != nullptr);
  CHECK(p.root_cause()->rank == 11);
  CHECK(p.worker(1).raised);
  CHECK(p.worker(1).end_ms == 40);
  CHECK(p.worker(1).state == WorkerState::kRunning);  // still a process to wait for
  CHECK_FALSE(p.all_exited());
  // The teardown's SIGTERM ends it later: it stays the failure it was, with its time and code.
  p.on_exit(0, killed(SIGTERM), 45);
  CHECK(p.on_exit(1, killed(SIGTERM), 50).signal_all == 0);
  CHECK_FALSE(p.killed_from_outside(1, killed(SIGKILL)));
  CHECK(p.worker(1).state == WorkerState::kFailed);
  CHECK(p.worker(1).status.code == 1);
  CHECK_FALSE(p.worker(1).status.signaled);
  CHECK(p.worker(1).end_ms == 40);
  CHECK(p.worker(0).state == WorkerState::kVictim);
  p.on_exit(2, killed(SIGTERM), 51);
  CHECK(p.exit_code() == 1);
}

TEST_CASE("an error file during a teardown changes nothing: its worker is a victim like the others") {
  auto p = three_workers();
  p.on_exit(0, exited(3), 10);
  CHECK(p.on_error_file(2, 20).signal_all == 0);
  CHECK_FALSE(p.worker(2).raised);
  p.on_exit(2, exited(1), 30);
  CHECK(p.worker(2).state == WorkerState::kVictim);
  CHECK(p.root_cause()->local_rank == 0);
  CHECK(p.exit_code() == 3);
}

TEST_CASE("an error file counts once, and never for a hung or exited worker") {
  auto p = three_workers();
  p.on_exit(0, exited(0), 5);
  CHECK_FALSE(p.on_error_file(0, 6).teardown_began);  // exited: its exit said it all
  CHECK(p.on_error_file(1, 7).teardown_began);
  CHECK_FALSE(p.on_error_file(1, 8).teardown_began);
  CHECK(p.worker(1).end_ms == 7);
  auto q = three_workers();
  q.on_hung(2, 5);
  CHECK_FALSE(q.on_error_file(2, 6).teardown_began);
  CHECK_FALSE(q.worker(2).raised);
}
