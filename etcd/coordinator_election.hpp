// Which agent hosts a job's rendezvous when the job meets in etcd (--rdzv-backend etcd): the first agent whose
// transaction "create <prefix>/<run id>/coordinator unless it exists" succeeds, under an etcd lease that it keeps
// alive while it lives. The key's value says where that agent's rendezvous server listens; every other agent gets
// it from the same transaction (its failure branch reads the key) and joins there as it would join a
// ddprun-rendezvous. From then on nothing of the job goes through etcd but the coordinator's lease keep-alive:
// heartbeats, statuses and verdicts go to the coordinator, so etcd's write rate does not grow with the job.
//
// What etcd guarantees and what it does not: the transaction is linearizable, so two agents can never both win
// one key revision; the lease ends the key by itself when the coordinator is gone (its TTL), so a crashed job's
// keys expire. It does not stop a partitioned coordinator from acting: the rendezvous' own proofs and
// heartbeats do (an agent trusts only the server that proves the job's token, rendezvous/auth.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <boost/asio/steady_timer.hpp>

#include "common/log.hpp"
#include "common/timeouts.hpp"
#include "etcd/gateway_client.hpp"

namespace ddprun::etcd {

struct ElectionConfig {
  std::string key_prefix = "/ddprun";  // --rdzv-conf key_prefix: many jobs, one etcd, one folder each
  std::string run_id;
  std::chrono::seconds lease_ttl{std::chrono::duration_cast<std::chrono::seconds>(timeouts::kEtcdLeaseTtl)};  // a coordinator gone this long frees its key
  // etcd unanswered this long from the first try: an error naming every endpoint (--rdzv-conf read_timeout)
  std::chrono::milliseconds give_up_after = timeouts::kEtcdReadTimeout;
  std::chrono::milliseconds retry_interval = timeouts::kEtcdRetry;
  // The lease counts as lapsing this long before it could run out (on_lease_standing): room for the host to stop
  // its round's workers first, and for the clocks of etcd's leader and this machine to differ in rate.
  std::chrono::milliseconds lapse_margin = timeouts::kEtcdLapseMargin;
  // The job's end stays recorded this long (its own lease): a node that comes back after the end, or arrives
  // late, learns it instead of hosting the job again. The agent gives its --rdzv-timeout, at least a minute.
  std::chrono::seconds end_ttl{900};
  Tls tls;  // https to etcd
};

// "<prefix>/<run id>/": every key of the job is under it.
std::string job_prefix(const ElectionConfig& config);
std::string coordinator_key(const ElectionConfig& config);
std::string round_key(const ElectionConfig& config);  // the round the host runs (keep_round)
std::string end_key(const ElectionConfig& config);    // the job's end, once recorded (finish)
std::string seconds_text(std::chrono::milliseconds d);  // "2.0 s", for messages

// Why an election ended with no host: etcd unanswered past give_up_after (or a host this agent cannot reach still
// holds the key), a no for good (authentication on, a role without the prefix), or an answer no etcd gives (not
// JSON, too deep, too large, a field of the wrong type: issue 55; the job ends with exit 76, never a crash or 70), or
// this host's lease ran out while etcd was out of its reach and another agent holds the key now (kReplaced: the job
// is that host's; this one leaves it, issue 53).
enum class ElectionFailure { kUnavailable, kRefused, kMalformed, kReplaced };

class CoordinatorElection {
 public:
  struct Handlers {
    // This agent coordinates; its lease is kept alive. `round`: what the last host kept with keep_round (read in
    // the winning transaction; "" when none), for a host taking over a running job.
    std::function<void(const std::string& round)> on_won;
    std::function<void(const std::string& value)> on_lost;  // another agent does: the value it published
    // etcd unanswered past give_up_after, refused the request for good (`refused`: at once, no retry), or
    // another agent holds the key this agent held (its lease ran out while etcd was out of reach). The text
    // names the endpoints.
    std::function<void(const std::string& why, ElectionFailure kind)> on_error;
    // The job has ended: etcd holds its end (`record`, what the host gave finish()). Nobody hosts it again; the
    // agent ends with the recorded outcome. Seen in place of the coordinator's key, before any lease is granted.
    std::function<void(const std::string& record)> on_ended;
    // The host's lease can no longer be counted on (`lapsing`: no renewal since lease_ttl - lapse_margin ago, on
    // this agent's own clock, counted from when the last renewal that etcd answered was sent), or it can again
    // (false: renewed). Issue 53, invariant 2: a lapsing host runs its round on only while every node hears it.
    std::function<void(bool lapsing)> on_lease_standing;
  };

  CoordinatorElection(boost::asio::io_context& io, std::vector<Endpoint> endpoints, ElectionConfig config,
                      Handlers handlers, Logger log);
  ~CoordinatorElection();

  // Offers `value` (where this agent's server listens). `stale`: the value of a host this agent found gone; while
  // the key still holds it (its lease has not run out), the election waits instead of joining it.
  void run(std::string value, std::string stale = "");
  bool won() const { return won_; }
  // The host keeps the round it runs in etcd, under a lease of its own (60 s) that outlives the host long enough
  // for the next one to read it. Best effort; nothing before the win.
  void keep_round(std::string value);
  const std::vector<Endpoint>& endpoints() const { return client_.endpoints(); }
  // What finish() learned of the job's end in etcd.
  struct EndOutcome {
    enum class Kind {
      kRecorded,          // this host's end is the job's
      kRecordedElsewhere, // another host recorded the end first (`record`): that is the job's
      kNotRecorded,       // neither (`why`): nothing to record, etcd out of reach, or the job goes on elsewhere
    } kind = Kind::kNotRecorded;
    std::string record;
    std::string why;
  };
  // The job is over. A coordinator records `end_record` under the job's end key (a lease of end_ttl) in the
  // same transaction that removes the coordinator's and the round's keys, and only while the coordinator's key
  // is still the one it created (its fencing token: a host whose lease ran out and was replaced records
  // nothing, and reads the end its successor recorded instead), then revokes its leases. etcd out of reach: it
  // tries again for `patience` (the leases then run out by themselves). Then `done`. Another agent, or an empty
  // record: `done` at once (kNotRecorded), after revoking only its own lease (the round stays for a successor).
  void finish(std::string end_record, std::chrono::milliseconds patience, std::function<void(const EndOutcome&)> done);
  // An agent that is not the host and lost it (or never reached it): the end another host recorded, if any, read
  // from etcd within `patience` (kRecordedElsewhere with it; kNotRecorded when there is none or etcd is out of
  // reach). Cancels an election in flight. Issue 53: a node dropped while the job ended elsewhere named its own
  // "could not reach the rendezvous server" where the others named the recorded root cause.
  void learn_end(std::chrono::milliseconds patience, std::function<void(const EndOutcome&)> done);
  // A renewal of this host's lease now, with etcd's quorum (a side cut off with a minority of members cannot
  // renew): `done(true)` once etcd renewed it, `done(false)` when it could not within `limit` or the lease had run
  // out. What a host asks before it forms any round (issue 53: a partitioned host re-formed its side as
  // "restart 1" while the majority formed its own). No call after cancel().
  void confirm_lease(std::chrono::milliseconds limit, std::function<void(bool ok, const std::string& why)> done);
  const std::string& offered() const { return value_; }  // what run() offered
  // A stop signal while finish() waits for etcd: `done` now (kNotRecorded). False when finish() is not waiting.
  bool cut_finish_short();
  // When this host's lease may run out at the earliest, by its own clock: the last renewal's send time + the TTL.
  std::chrono::steady_clock::time_point lease_safe_until() const { return last_kept_ + config_.lease_ttl; }
  bool lease_lapsing() const { return lapsing_; }
  // The coordinator key's create revision when this agent won it (0 before): the fencing token of what it hosts.
  std::int64_t token() const { return token_; }
  void cancel();  // timers and requests stop; no handler runs after it

 private:
  // Every request to etcd: `then` runs with its answer, and an answer whose fields are not of the types etcd gives
  // (a nlohmann type or range error while `then` reads it) ends the election as kMalformed, naming the request.
  void ask(const char* path, const nlohmann::json& body, GatewayClient::Handler then);
  void fail_malformed(const std::string& request, const std::string& what);
  void peek();
  void grant();
  void claim();
  void on_held(const std::string& holder, void (CoordinatorElection::*again)());
  static std::string held_by(const nlohmann::json& range);  // the value in a range answer, "" when none
  // The coordinator's key and the end's, read together (one range: "coordinator" < "end").
  nlohmann::json read_job_keys() const;
  struct JobKeys {
    std::string holder;  // the coordinator key's value, "" when absent
    std::string end;     // the recorded end, "" when none
  };
  JobKeys job_keys_in(const nlohmann::json& range) const;  // a range answer of read_job_keys()
  // What a read of read_job_keys() found: the end (on_ended), the holder (on_held), or nothing (false).
  bool on_job_keys(const nlohmann::json& range, void (CoordinatorElection::*again)());
  void keep_alive();
  void retry_or_fail(const std::string& step, const RequestError& error, void (CoordinatorElection::*again)(),
                     const nlohmann::json& reply = nlohmann::json());
  void on_lease_lost();
  // etcd renewed the lease by a request sent at `sent`: the lease holds until at least sent + TTL (etcd counts the
  // TTL from when it got the request, never before it was sent). Re-arms the lapse timer.
  void lease_renewed(std::chrono::steady_clock::time_point sent);
  void renew_to_confirm();  // confirm_lease's keep-alive, again every retry_interval until its deadline
  void answer_confirm(bool ok, const std::string& why);
  // finish()'s steps: a lease for the end, the fenced transaction, the end read when the fence failed.
  void try_to_record();
  void record_end(std::int64_t end_lease);
  void read_end_recorded_elsewhere();
  void read_end_once();  // learn_end's read, again every retry_interval until its deadline
  void deliver_end(const EndOutcome& outcome);  // finish_done_ once, with `outcome` (finish and learn_end)
  void record_later(const std::string& error);  // etcd out of reach: again after retry_interval, until patience
  void end_finish(EndOutcome outcome);          // revokes the leases (not awaited past the deadline), then done
  void put_round();

  GatewayClient client_;
  ElectionConfig config_;
  Handlers handlers_;
  Logger log_;
  boost::asio::steady_timer timer_;
  std::string value_;
  std::string stale_;
  bool again_waits_for_stale_ = false;  // the last retry waits for stale_'s lease, not for etcd
  bool said_unanswered_ = false;        // the first failure of this try was said (retry_or_fail)
  std::int64_t lease_ = 0;
  std::int64_t token_ = 0;  // token()
  std::int64_t round_lease_ = 0;  // keep_round's
  std::string round_value_;
  bool won_ = false;
  bool reclaiming_ = false;
  bool over_ = false;
  std::chrono::steady_clock::time_point first_try_{};
  std::chrono::steady_clock::time_point last_kept_{};  // the send time of the last renewal etcd answered
  std::chrono::steady_clock::time_point grant_sent_{};  // the lease's grant request, sent then
  boost::asio::steady_timer lapse_timer_;               // lease_renewed's: on_lease_standing(true) when it fires
  bool lapsing_ = false;
  boost::asio::steady_timer confirm_timer_;  // confirm_lease's deadline
  boost::asio::steady_timer retry_timer_;    // ... and its retries
  std::function<void(bool, const std::string&)> confirm_done_;
  std::string confirm_error_;  // the last failed renewal's, for the answer
  std::chrono::milliseconds confirm_limit_{0};
  std::chrono::steady_clock::time_point confirm_deadline_{};
  std::string end_record_;                                        // finish()'s
  bool record_vacant_ = false;  // finish() records while the key is absent (its lease ran out, nobody took over)
  std::chrono::steady_clock::time_point finish_deadline_{};       // finish()'s patience runs out
  std::function<void(const EndOutcome&)> finish_done_;
};

}  // namespace ddprun::etcd
