// CoordinatorElection, its host's side once elected: the lease renewed before a round (confirm_lease) and the job's
// end recorded at the end (finish). The election itself: coordinator_election.cpp.
#include <algorithm>
#include <memory>

#include "etcd/coordinator_election.hpp"

namespace ddprun::etcd {
using nlohmann::json;
using std::chrono::milliseconds;

namespace {
constexpr milliseconds kFinishLimit{2000};
}  // namespace

void CoordinatorElection::finish(std::string end_record, milliseconds patience,
                                 std::function<void(const EndOutcome&)> done) {
  if (!won_ || over_) {
    cancel();
    return done(EndOutcome{EndOutcome::Kind::kNotRecorded, "", "this node does not host the job"});
  }
  over_ = true;
  timer_.cancel();
  end_record_ = std::move(end_record);
  finish_done_ = std::move(done);
  finish_deadline_ = std::chrono::steady_clock::now() + std::max(patience, kFinishLimit);
  // No end to record (this host leaves before the job ended): the round stays, under its own lease, for the
  // next host to take back; only the coordinator's lease goes.
  if (end_record_.empty()) {
    round_lease_ = 0;
    return end_finish(EndOutcome{EndOutcome::Kind::kNotRecorded, "", "the job has not ended here"});
  }
  try_to_record();
}

void CoordinatorElection::confirm_lease(milliseconds limit, std::function<void(bool, const std::string&)> done) {
  if (!won_ || over_) return done(false, won_ ? "the job is over" : "this node does not hold the coordinator's key");
  confirm_limit_ = limit;
  confirm_deadline_ = std::chrono::steady_clock::now() + limit;
  confirm_done_ = std::move(done);
  confirm_error_ = "no answer";
  // The answer comes by the deadline whatever is in flight: a request to a silent member takes 2 s per endpoint.
  confirm_timer_.expires_at(confirm_deadline_);
  confirm_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !over_) answer_confirm(false, "etcd did not renew it within " + seconds_text(confirm_limit_) + " (" +
                                                 confirm_error_ + ")");
  });
  renew_to_confirm();
}

void CoordinatorElection::renew_to_confirm() {
  const auto sent = std::chrono::steady_clock::now();
  ask("/v3/lease/keepalive", json{{"ID", std::to_string(lease_)}}, [this, sent](const RequestError& error,
                                                                                         const json& reply) {
    if (over_ || !confirm_done_) return;
    if (error.empty()) {
      if (int_field(reply.value("result", json::object()), "TTL") <= 0) return answer_confirm(false, "its lease had run out");
      lease_renewed(sent);
      return answer_confirm(true, "");
    }
    confirm_error_ = error.text;
    retry_timer_.expires_after(config_.retry_interval);
    retry_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && !over_ && confirm_done_) renew_to_confirm();
    });
  });
}

void CoordinatorElection::answer_confirm(bool ok, const std::string& why) {
  if (!confirm_done_) return;
  confirm_timer_.cancel();
  retry_timer_.cancel();
  auto done = std::move(confirm_done_);
  confirm_done_ = nullptr;
  done(ok, why);
}

void CoordinatorElection::learn_end(milliseconds patience, std::function<void(const EndOutcome&)> done) {
  cancel();
  finish_done_ = std::move(done);
  finish_deadline_ = std::chrono::steady_clock::now() + patience;
  read_end_once();
}

void CoordinatorElection::read_end_once() {
  ask("/v3/kv/range", json{{"key", to_base64(end_key(config_))}}, [this](const RequestError& error,
                                                                                const json& reply) {
    if (!finish_done_) return;
    if (error.empty()) {
      const std::string end = held_by(reply);
      return deliver_end(end.empty() ? EndOutcome{EndOutcome::Kind::kNotRecorded, "", "no end recorded in etcd"}
                                     : EndOutcome{EndOutcome::Kind::kRecordedElsewhere, end, ""});
    }
    if (std::chrono::steady_clock::now() + config_.retry_interval >= finish_deadline_)
      return deliver_end(EndOutcome{EndOutcome::Kind::kNotRecorded, "", "etcd did not answer: " + error.text});
    timer_.expires_after(config_.retry_interval);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && finish_done_) read_end_once();
    });
  });
}

void CoordinatorElection::deliver_end(const EndOutcome& outcome) {
  timer_.cancel();
  if (auto done = std::move(finish_done_)) {
    finish_done_ = nullptr;
    done(outcome);
  }
}

bool CoordinatorElection::cut_finish_short() {
  if (!finish_done_) return false;
  client_.cancel();
  finish_deadline_ = std::chrono::steady_clock::now();
  end_finish(EndOutcome{EndOutcome::Kind::kNotRecorded, "", "stopped by a signal while waiting for etcd"});
  return true;
}

void CoordinatorElection::try_to_record() {
  ask("/v3/lease/grant", json{{"TTL", config_.end_ttl.count()}}, [this](const RequestError& error,
                                                                                  const json& reply) {
    const std::int64_t end_lease = error.empty() ? int_field(reply, "ID") : 0;
    if (end_lease == 0) return record_later(error.empty() ? "no lease granted: " + reply.dump() : error.text);
    record_end(end_lease);
  });
}

// One transaction, fenced by the token: the end is recorded, and the coordinator's key and the round (a
// predecessor's lease may still hold it) go, only while the key is the one this host created. The round is
// never deleted without the end recorded (issue 53: the next host then took the first claims it got).
//
// Its lease ran out and nobody took the job over (the key is absent, no end recorded: record_vacant_): its verdict is
// the only one any node heard, and is recorded while the key stays absent and no end is there (issue 53, the nemesis
// with default heartbeats, seed 2: nothing was recorded, the kept round stayed, and a late node could not learn).
void CoordinatorElection::record_end(std::int64_t end_lease) {
  const std::string key = to_base64(coordinator_key(config_));
  const auto created_at = [](const std::string& k, std::int64_t revision) {
    return json{{"key", k}, {"result", "EQUAL"}, {"target", "CREATE"}, {"create_revision", std::to_string(revision)}};
  };
  const json compare = record_vacant_ ? json::array({created_at(key, 0), created_at(to_base64(end_key(config_)), 0)})
                                      : json::array({created_at(key, token_)});
  const json txn = {
      {"compare", compare},
      {"success", json::array({{{"request_put", {{"key", to_base64(end_key(config_))}, {"value", to_base64(end_record_)},
                                                 {"lease", std::to_string(end_lease)}}}},
                               {{"request_delete_range", {{"key", key}}}},
                               {{"request_delete_range", {{"key", to_base64(round_key(config_))}}}}})},
      {"failure", json::array()}};
  ask("/v3/kv/txn", txn, [this, end_lease](const RequestError& error, const json& reply) {
    if (!error.empty() || !reply.value("succeeded", false))  // the end's lease is not needed
      ask("/v3/lease/revoke", json{{"ID", std::to_string(end_lease)}}, [](const RequestError&, const json&) {});
    if (!error.empty()) return record_later(error.text);
    if (reply.value("succeeded", false)) return end_finish(EndOutcome{EndOutcome::Kind::kRecorded, "", ""});
    // The key is no longer the one this host created: its lease ran out while etcd was out of its reach, and
    // another host took the job over. Whatever that one recorded is the job's end, not this host's verdict.
    round_lease_ = 0;  // the round is the successor's now
    read_end_recorded_elsewhere();
  });
}

void CoordinatorElection::read_end_recorded_elsewhere() {
  ask("/v3/kv/range", read_job_keys(), [this](const RequestError& error, const json& reply) {
    if (!error.empty()) return record_later(error.text);
    const JobKeys keys = job_keys_in(reply);
    // Its own: an earlier try's transaction went through, and only its answer was lost.
    if (keys.end == end_record_) return end_finish(EndOutcome{EndOutcome::Kind::kRecorded, "", ""});
    if (!keys.end.empty()) return end_finish(EndOutcome{EndOutcome::Kind::kRecordedElsewhere, keys.end, ""});
    if (keys.holder.empty() && !record_vacant_) {  // nobody took the job over: this verdict is the job's
      record_vacant_ = true;
      return try_to_record();
    }
    end_finish(EndOutcome{EndOutcome::Kind::kNotRecorded, "",
                          "another host holds the job now (this node's etcd lease ran out while it was cut off "
                          "from etcd), and the job has not ended there"});
  });
}

void CoordinatorElection::record_later(const std::string& error) {
  log_.debug("etcd: recording the job's end: ", error);
  if (std::chrono::steady_clock::now() + config_.retry_interval >= finish_deadline_) {
    log_.warning("etcd: the job's end could not be recorded (", error, "); its keys run out with their leases");
    client_.cancel();
    return end_finish(EndOutcome{EndOutcome::Kind::kNotRecorded, "", "etcd did not answer: " + error});
  }
  timer_.expires_after(config_.retry_interval);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) try_to_record();
  });
}

// Then the leases, the round's and the coordinator's: nothing of the job stays in etcd but its end. Past the
// deadline (etcd out of reach) they are not waited for: they run out by themselves.
void CoordinatorElection::end_finish(EndOutcome outcome) {
  auto deliver = [this, outcome] { deliver_end(outcome); };
  if (std::chrono::steady_clock::now() >= finish_deadline_) return deliver();
  timer_.expires_at(finish_deadline_);
  timer_.async_wait([this, deliver](const boost::system::error_code& ec) {
    if (ec) return;
    client_.cancel();
    deliver();
  });
  auto revoke_main = [this, deliver] {
    ask("/v3/lease/revoke", json{{"ID", std::to_string(lease_)}},
                 [this, deliver](const RequestError& error, const json&) {
                   if (!error.empty()) log_.debug("etcd: revoking the lease: ", error);
                   deliver();
                 });
  };
  if (round_lease_ == 0) return revoke_main();
  ask("/v3/lease/revoke", json{{"ID", std::to_string(round_lease_)}},
               [revoke_main](const RequestError&, const json&) { revoke_main(); });
}

}  // namespace ddprun::etcd
