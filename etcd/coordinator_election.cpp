#include "etcd/coordinator_election.hpp"

#include <cstdio>

namespace ddprun::etcd {
using nlohmann::json;
using std::chrono::milliseconds;

namespace {
// The round outlives its host this long: the next host is elected once the host's own lease (10 s) ran out.
constexpr std::chrono::seconds kRoundLeaseTtl{std::chrono::duration_cast<std::chrono::seconds>(timeouts::kEtcdRoundLeaseTtl)};
}  // namespace

std::string seconds_text(milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return text;
}

std::string job_prefix(const ElectionConfig& config) {
  std::string prefix = config.key_prefix;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return prefix + "/" + config.run_id + "/";
}

std::string coordinator_key(const ElectionConfig& config) { return job_prefix(config) + "coordinator"; }
std::string round_key(const ElectionConfig& config) { return job_prefix(config) + "round"; }
std::string end_key(const ElectionConfig& config) { return job_prefix(config) + "end"; }

CoordinatorElection::CoordinatorElection(boost::asio::io_context& io, std::vector<Endpoint> endpoints,
                                         ElectionConfig config, Handlers handlers, Logger log)
    : client_(io, std::move(endpoints), timeouts::kEtcdRequest, config.tls), config_(std::move(config)), handlers_(std::move(handlers)),
      log_(std::move(log)), timer_(io), lapse_timer_(io), confirm_timer_(io), retry_timer_(io) {}

CoordinatorElection::~CoordinatorElection() { cancel(); }

void CoordinatorElection::cancel() {
  over_ = true;
  timer_.cancel();
  lapse_timer_.cancel();
  confirm_timer_.cancel();
  retry_timer_.cancel();
  confirm_done_ = nullptr;
  client_.cancel();
}

void CoordinatorElection::run(std::string value, std::string stale) {
  value_ = std::move(value);
  stale_ = std::move(stale);
  first_try_ = std::chrono::steady_clock::now();
  said_unanswered_ = false;
  peek();
}

// A read first (no Raft proposal): where the key is held, as for every agent of a big job but the first, no lease
// is granted only to expire (each grant and each expiry is a write to every etcd member).
void CoordinatorElection::ask(const char* path, const json& body, GatewayClient::Handler then) {
  client_.post(path, body, [this, path, then = std::move(then)](const RequestError& error, const json& reply) {
    try {
      then(error, reply);
    } catch (const json::exception& e) {  // a field of another type than etcd's, or missing where etcd has it
      fail_malformed(path, e.what());
    }
  });
}

// Issue 55: everything read from etcd is hostile input. Whoever can write etcd (or stands in for it) gets one clear
// line and exit 76, never a crash (a million-deep answer: 139) or "internal error" (a mistyped field: 70).
void CoordinatorElection::fail_malformed(const std::string& request, const std::string& what) {
  const std::string text = "etcd at " + describe(client_.endpoints()) + " gave an answer no etcd gives (" + request +
                           ", key " + coordinator_key(config_) + "): " + what +
                           " (is that etcd, and is --rdzv-conf key_prefix shared with another program?)";
  if (finish_done_) return deliver_end(EndOutcome{EndOutcome::Kind::kNotRecorded, "", text});  // the end: said so
  if (confirm_done_) answer_confirm(false, text);  // a host renewing before a round: it forms none
  if (over_) return;
  over_ = true;
  timer_.cancel();
  handlers_.on_error(text, ElectionFailure::kMalformed);
}

void CoordinatorElection::peek() {
  ask("/v3/kv/range", read_job_keys(), [this](const RequestError& error, const json& reply) {
    if (!error.empty()) return retry_or_fail("reading the coordinator's key", error, &CoordinatorElection::peek, reply);
    if (!on_job_keys(reply, &CoordinatorElection::peek)) grant();
  });
}

json CoordinatorElection::read_job_keys() const {
  return json{{"key", to_base64(coordinator_key(config_))}, {"range_end", to_base64(end_key(config_) + '\0')}};
}

// An ended job is never hosted again (issue 53: a node cut off with a minority member came back after the end,
// found the keys gone, won a fresh election and waited for nodes that had left): the end wins over everything.
CoordinatorElection::JobKeys CoordinatorElection::job_keys_in(const json& range) const {
  JobKeys keys;
  const json kvs = range.is_object() ? range.value("kvs", json::array()) : json::array();
  for (const json& kv : kvs.is_array() ? kvs : json::array()) {
    if (!kv.is_object() || !kv.contains("key") || !kv["key"].is_string()) continue;
    const std::string key = from_base64(kv["key"].get<std::string>());
    const std::string value = kv.contains("value") && kv["value"].is_string() ? from_base64(kv["value"].get<std::string>()) : "";
    if (key == end_key(config_)) keys.end = value;
    if (key == coordinator_key(config_)) keys.holder = value;
  }
  return keys;
}

bool CoordinatorElection::on_job_keys(const json& range, void (CoordinatorElection::*again)()) {
  const auto [holder, end] = job_keys_in(range);
  if (!end.empty()) {
    over_ = true;
    handlers_.on_ended(end);
    return true;
  }
  if (holder.empty()) return false;
  on_held(holder, again);
  return true;
}

// The key is held by `holder`: join it, or, when it is the host this agent found gone (stale_), wait for its lease
// to run out and try again.
void CoordinatorElection::on_held(const std::string& holder, void (CoordinatorElection::*again)()) {
  again_waits_for_stale_ = !stale_.empty() && holder == stale_;
  if (again_waits_for_stale_)
    return retry_or_fail("waiting for the lost host's lease to run out", RequestError{"the key still names it"}, again);
  over_ = true;
  if (reclaiming_)
    return handlers_.on_error("this node's etcd lease ran out while etcd was out of reach and another agent "
                              "now holds the coordinator's key (" + holder + ")",
                              ElectionFailure::kReplaced);
  handlers_.on_lost(holder);
}

// etcd out of reach: again after retry_interval, until give_up_after from the first try (then on_error).
void CoordinatorElection::retry_or_fail(const std::string& step, const RequestError& error,
                                        void (CoordinatorElection::*again)(), const json& reply) {
  if (error.malformed) return fail_malformed(step, error.text);  // asking again would get the same
  if (const Refusal refusal = refusal_of(reply); refusal != Refusal::kNone) {  // waiting would not change it
    over_ = true;
    return handlers_.on_error("etcd refused the request (" + step + "): " + error.text +
                                  (refusal == Refusal::kAuthentication ? " (etcd's authentication is on: ddprun does not log in with a user name "
                                          "and password; see docs/MULTINODE.md, \"Meeting in etcd\")"
                                        : " (check that this node may read and write the key prefix, "
                                          "--rdzv-conf key_prefix)"),
                              ElectionFailure::kRefused);
  }
  const auto waited = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - first_try_);
  if (waited >= config_.give_up_after && again_waits_for_stale_) {
    over_ = true;
    return handlers_.on_error("the rendezvous host this node lost still holds its etcd lease after " +
                              seconds_text(waited) + " (" + stale_ + "): it runs, but this node cannot reach it "
                              "(a network partition?)",
                              ElectionFailure::kUnavailable);
  }
  if (waited >= config_.give_up_after) {
    over_ = true;
    return handlers_.on_error("etcd did not answer (" + step + ") for " + seconds_text(waited) + " at " +
                              describe(client_.endpoints()) + ": " + error.text +
                              (error.tls ? " (check --rdzv-conf cacert, cert and key against etcd's TLS setup)"
                                   : " (is etcd running there? --rdzv-conf read_timeout sets how long to wait)"),
                              ElectionFailure::kUnavailable);
  }
  // Said once, at the first failure (issue 53: an etcd out of reach, a wrong CA, no client certificate were 60 s
  // of silence and then the error); the retries after it are debug.
  if (!said_unanswered_ && !again_waits_for_stale_) {
    said_unanswered_ = true;
    log_.warning("etcd does not answer (", step, ") at ", describe(client_.endpoints()), ": ", error,
                 error.tls ? " (check --rdzv-conf cacert, cert and key against etcd's TLS setup)" : "",
                 "; retrying until ", seconds_text(config_.give_up_after), " have passed (--rdzv-conf read_timeout)");
  }
  log_.debug("etcd: ", step, ": ", error, "; again in ", config_.retry_interval.count(), " ms");
  timer_.expires_after(config_.retry_interval);
  timer_.async_wait([this, again](const boost::system::error_code& ec) {
    if (!ec && !over_) (this->*again)();
  });
}

void CoordinatorElection::grant() {
  grant_sent_ = std::chrono::steady_clock::now();  // the lease's TTL counts from etcd's grant, after this
  ask("/v3/lease/grant", json{{"TTL", config_.lease_ttl.count()}},
               [this](const RequestError& error, const json& reply) {
                 if (!error.empty()) return retry_or_fail("granting a lease", error, &CoordinatorElection::grant, reply);
                 lease_ = int_field(reply, "ID");
                 if (lease_ == 0) {
                   over_ = true;
                   return fail_malformed("/v3/lease/grant", "no lease ID in " + reply.dump().substr(0, 200));
                 }
                 claim();
               });
}

// One transaction: the key is ours if nobody created it, else whoever did is read in the same revision.
// The job's end recorded is a claim's failure too: nobody wins an ended job.
void CoordinatorElection::claim() {
  const std::string key = to_base64(coordinator_key(config_));
  const auto absent = [](const std::string& k) {
    return json{{"key", k}, {"result", "EQUAL"}, {"target", "CREATE"}, {"create_revision", "0"}};
  };
  const json txn = {
      {"compare", json::array({absent(key), absent(to_base64(end_key(config_)))})},
      {"success", json::array({{{"request_put", {{"key", key}, {"value", to_base64(value_)},
                                                 {"lease", std::to_string(lease_)}}}},
                               {{"request_range", {{"key", to_base64(round_key(config_))}}}}})},
      {"failure", json::array({{{"request_range", read_job_keys()}}})}};
  ask("/v3/kv/txn", txn, [this](const RequestError& error, const json& reply) {
    if (!error.empty()) return retry_or_fail("claiming the coordinator's key", error, &CoordinatorElection::claim, reply);
    if (reply.value("succeeded", false)) {
      const bool again = reclaiming_;
      won_ = true;
      // The put's revision is the key's create revision: what this host forms is fenced by it.
      token_ = int_field(reply.value("header", json::object()), "revision");
      reclaiming_ = false;
      lease_renewed(grant_sent_);
      keep_alive();
      if (again) return log_.warning("etcd: this node holds the coordinator's key again");
      std::string round;  // what the last host kept (keep_round), read in the same revision as the win
      for (const json& r : reply.value("responses", json::array()))
        if (r.contains("response_range")) round = held_by(r["response_range"]);
      return handlers_.on_won(round);
    }
    json range;
    for (const json& r : reply.value("responses", json::array()))
      if (r.contains("response_range")) range = r["response_range"];
    // Lost the race: the lease is not needed (revoked now, not left to expire; its answer is not awaited).
    ask("/v3/lease/revoke", json{{"ID", std::to_string(lease_)}}, [](const RequestError&, const json&) {});
    lease_ = 0;
    // The keys went between compare and read cannot happen in one transaction; an empty value is not ours.
    if (!on_job_keys(range, &CoordinatorElection::grant))
      retry_or_fail("reading the coordinator's key", RequestError{"empty"}, &CoordinatorElection::grant);
  });
}

std::string CoordinatorElection::held_by(const json& range) {
  for (const json& kv : range.value("kvs", json::array())) return from_base64(kv.value("value", std::string()));
  return "";
}

// Best effort: a round not kept (etcd out of reach) leaves the next host to trust the nodes' first claims.
void CoordinatorElection::keep_round(std::string value) {
  if (!won_ || over_) return;
  round_value_ = std::move(value);
  if (round_lease_ != 0) return put_round();
  ask("/v3/lease/grant", json{{"TTL", kRoundLeaseTtl.count()}},
               [this](const RequestError& error, const json& reply) {
                 if (!error.empty()) return log_.debug("etcd: a lease for the round: ", error);
                 const std::int64_t granted = int_field(reply, "ID");
                 // The job finished while this grant was on its way: finish() has already cleared the job's keys,
                 // so the round is not put and the fresh lease goes at once (else it would hold the round 60 s).
                 if (over_) {
                   if (granted != 0)
                     ask("/v3/lease/revoke", json{{"ID", std::to_string(granted)}},
                                  [](const RequestError&, const json&) {});
                   return;
                 }
                 round_lease_ = granted;
                 if (round_lease_ != 0) put_round();
               });
}

void CoordinatorElection::put_round() {
  ask("/v3/kv/put",
               json{{"key", to_base64(round_key(config_))}, {"value", to_base64(round_value_)},
                    {"lease", std::to_string(round_lease_)}},
               [this](const RequestError& error, const json&) {
                 if (!error.empty()) log_.debug("etcd: keeping the round: ", error);
               });
}

// Every third of the TTL. etcd out of reach meanwhile: the job does not need etcd to train, so it goes on and
// the keep-alive keeps trying; a lease that ran out is claimed again (fresh lease) when etcd answers.
void CoordinatorElection::keep_alive() {
  timer_.expires_after(std::chrono::duration_cast<milliseconds>(config_.lease_ttl) / 3);  // kEtcdKeepAlive by default
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || over_) return;
    if (round_lease_ != 0)
      ask("/v3/lease/keepalive", json{{"ID", std::to_string(round_lease_)}},
                   [this](const RequestError& error, const json& reply) {
                     // Ran out (etcd away for a minute): the round key went with it; the next round keeps anew.
                     if (error.empty() && int_field(reply.value("result", json::object()), "TTL") <= 0) round_lease_ = 0;
                   });
    const auto sent = std::chrono::steady_clock::now();
    ask("/v3/lease/keepalive", json{{"ID", std::to_string(lease_)}},
                 [this, sent](const RequestError& error, const json& reply) {
                   // finish() came while this was on its way: its timer and the revokes are the end now (a
                   // keep-alive here would reset that timer; a lost lease would claim the key back).
                   if (over_) return;
                   const auto now = std::chrono::steady_clock::now();
                   if (!error.empty()) {
                     if (now - last_kept_ > config_.lease_ttl)
                       log_.warning("etcd: no answer for ", seconds_text(std::chrono::duration_cast<milliseconds>(
                                                               now - last_kept_)),
                                    ", longer than the coordinator's lease; the job goes on: ", error);
                     return keep_alive();
                   }
                   if (int_field(reply.value("result", json::object()), "TTL") <= 0) return on_lease_lost();
                   lease_renewed(sent);
                   keep_alive();
                 });
  });
}

void CoordinatorElection::lease_renewed(std::chrono::steady_clock::time_point sent) {
  last_kept_ = std::max(last_kept_, sent);
  if (lapsing_) {
    lapsing_ = false;
    log_.info("etcd renewed the coordinator's lease again");
    if (handlers_.on_lease_standing) handlers_.on_lease_standing(false);
  }
  const auto margin = std::min<milliseconds>(config_.lapse_margin, config_.lease_ttl / 2);
  lapse_timer_.expires_at(last_kept_ + config_.lease_ttl - margin);
  lapse_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || over_ || !won_ || lapsing_) return;
    lapsing_ = true;
    log_.warning("etcd has not renewed the coordinator's lease for ",
                 seconds_text(std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - last_kept_)),
                 " (it may run out ", seconds_text(std::chrono::duration_cast<milliseconds>(lease_safe_until() - std::chrono::steady_clock::now())),
                 " from now, and another node be elected)");
    if (handlers_.on_lease_standing) handlers_.on_lease_standing(true);
  });
}

void CoordinatorElection::on_lease_lost() {
  log_.warning("etcd: the coordinator's lease ran out (etcd was out of reach for longer than ",
               config_.lease_ttl.count(), " s); claiming the key again");
  reclaiming_ = true;
  won_ = false;
  first_try_ = std::chrono::steady_clock::now();
  said_unanswered_ = false;
  grant();
}

}  // namespace ddprun::etcd
