// A job's end as its host records it in etcd (etcd/coordinator_election.hpp, finish), so that an agent that
// arrives late or comes back after the end learns how the job ended instead of hosting it again (issue 53: a node
// cut off with a minority etcd member came back after the end, won a fresh election and named another root cause).
// Every node then ends with the same root cause and exit code, the recorded one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "rendezvous/failure.hpp"

namespace ddprun::rendezvous {

struct RendezvousState;

struct RecordedEnd {
  bool complete = false;             // every worker on every node exited 0
  bool noticed = false;              // complete, after a scheduler's notice reached running workers (79 in SLURM)
  std::optional<Failure> root_cause; // the job's root cause (absent: complete, or ended before any round formed)
  std::string reason;                // the host's words when there is no root cause
  std::string host;                  // the node that recorded it
  std::int64_t time_unix_ms = 0;
};

// The end a host's server reached (phase kComplete or kStopped), recorded by `host` at `now_unix_ms`; nullopt
// while the job has not ended there (a host leaving for another reason records nothing).
std::optional<RecordedEnd> recorded_end_of(const RendezvousState& state, const std::string& host, std::int64_t now_unix_ms);

// As text (JSON) and back. The text comes from etcd, which anyone who may write the job's keys controls: size,
// fields and types are checked (Failure's own from_json bounds its fields); nullopt with `problem` otherwise.
std::string encode_recorded_end(const std::string& run_id, const RecordedEnd& end);
std::optional<RecordedEnd> decode_recorded_end(const std::string& text, const std::string& run_id,
                                               std::string& problem);

// One line for people: "the job completed" or "the job failed: <root cause>" (with when and who recorded it).
std::string describe(const RecordedEnd& end);

}  // namespace ddprun::rendezvous
