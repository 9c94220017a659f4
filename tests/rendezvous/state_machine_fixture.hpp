// Builders for state-machine tests: a job, hellos with correct MACs, and action finders.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>

#include "rendezvous/auth.hpp"
#include "rendezvous/state_machine.hpp"

namespace ddprun::rendezvous::testing {

using namespace std::chrono_literals;

inline JobConfig job(int nnodes, bool static_ranks) {
  JobConfig config;
  config.run_id = "run1";
  config.token = "tok";
  config.min_nodes = config.max_nodes = nnodes;
  config.static_node_ranks = static_ranks;
  config.heartbeat_interval = 1s;
  config.heartbeat_timeout = 5s;
  config.join_timeout = 60s;
  config.last_call = 10s;
  return config;
}

inline Now at(std::chrono::milliseconds since_start) {
  return Now{Clock::time_point{} + since_start, 1'700'000'000'000 + since_start.count()};
}

struct Joiner {
  ConnId conn = 1;
  std::optional<int> node_rank;
  int nproc = 2;
  std::string host = "host";
  std::string peer = "10.0.0.9";
  std::string address;  // override
  int master_port = 29500;
  std::string token = "tok";
  std::string run_id = "run1";
  int version = kProtocolVersion;
  std::string seat_secret;  // set: the hello carries its seat commitment (auth.hpp); "": none, as old agents
};

inline Hello hello(const Joiner& j) {
  Hello h;
  h.conn = j.conn;
  h.nonce = "nonce" + std::to_string(j.conn);
  h.hello.version = j.version;
  h.hello.run_id = j.run_id;
  h.hello.mac = compute_mac(j.token, h.nonce, j.run_id);
  h.hello.node_rank = j.node_rank;
  h.hello.nproc = j.nproc;
  h.hello.host = j.host;
  h.hello.address = j.address;
  h.hello.master_port = j.master_port;
  if (!j.seat_secret.empty()) h.hello.seat = seat_commitment(j.seat_secret);
  h.peer_address = j.peer;
  h.local_address = "10.0.0.1";
  return h;
}

template <typename T>
std::vector<T> find_all(const std::vector<Action>& actions) {
  std::vector<T> found;
  for (const auto& a : actions)
    if (auto* t = std::get_if<T>(&a)) found.push_back(*t);
  return found;
}

template <typename T>
T find_one(const std::vector<Action>& actions) {
  auto found = find_all<T>(actions);
  REQUIRE(found.size() == 1);
  return found.front();
}

// The refusal message sent to conn, or "" when none was.
inline std::string refusal(const std::vector<Action>& actions, ConnId conn) {
  for (const auto& send : find_all<Send>(actions))
    if (auto* e = std::get_if<ErrorMsg>(&send.message); e && send.conn == conn) return e->message;
  return {};
}

// The reason of the final stop (not a restart's) sent to conn alone, or "" when none was.
inline std::string final_stop_to(const std::vector<Action>& actions, ConnId conn) {
  for (const auto& send : find_all<Send>(actions))
    if (auto* stop = std::get_if<StopMsg>(&send.message); stop && send.conn == conn && !stop->restarting)
      return stop->reason;
  return {};
}

// Whether the final stop sent to conn invites the node to join again as a new node (StopMsg::rejoin).
inline bool stop_invites_rejoin(const std::vector<Action>& actions, ConnId conn) {
  for (const auto& send : find_all<Send>(actions))
    if (auto* stop = std::get_if<StopMsg>(&send.message); stop && send.conn == conn && !stop->restarting)
      return stop->rejoin;
  return false;
}

inline bool closes(const std::vector<Action>& actions, ConnId conn) {
  auto all = find_all<Close>(actions);
  return std::any_of(all.begin(), all.end(), [conn](const Close& c) { return c.conn == conn; });
}

// Joins nodes conn 1..n (static ranks 0..n-1 when the job is static), each with `nproc` workers.
inline std::vector<Action> join_all(RendezvousState& state, int n, Now now, int nproc = 2) {
  std::vector<Action> last;
  for (int i = 0; i < n; ++i) {
    Joiner j;
    j.conn = static_cast<ConnId>(i + 1);
    if (state.config.static_node_ranks) j.node_rank = i;
    j.nproc = nproc;
    j.host = "host" + std::to_string(i);
    last = step(state, hello(j), now);
  }
  return last;
}

// A static job of `nnodes` nodes (2 workers each) whose first round runs.
inline RendezvousState running(int nnodes, int max_restarts = 0) {
  JobConfig config = job(nnodes, true);
  config.max_restarts = max_restarts;
  RendezvousState state(config, at(0ms).steady);
  join_all(state, nnodes, at(0ms));
  REQUIRE(state.phase == Phase::kRunning);
  return state;
}

}  // namespace ddprun::rendezvous::testing
