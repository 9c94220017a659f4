// Everything one node's agent needs, validated by the launcher before anything starts.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/world.hpp"
#include "common/log.hpp"
#include "common/timeouts.hpp"
#include "rendezvous/job_config.hpp"

namespace ddprun::agent {

// torchrun's --redirects/--tee value: a bit mask (1 stdout, 2 stderr, 3 both), for all local ranks or
// per local rank ("0:3,1:1"; ranks not named get 0).
struct StdStreams {
  int all = 0;
  std::map<int, int> per_rank;
  bool per_rank_given = false;
  int mask_for(int local_rank) const {
    if (!per_rank_given) return all;
    auto it = per_rank.find(local_rank);
    return it == per_rank.end() ? 0 : it->second;
  }
};
inline constexpr int kStdout = 1;
inline constexpr int kStderr = 2;

struct OutputConfig {
  std::string prefix_format = "[rank{rank}]: ";  // empty: no prefix (lines are still kept whole)
  std::vector<int> console_local_ranks;          // --local-ranks-filter; empty: every rank
  StdStreams redirects;                          // to files only
  StdStreams tee;                                // to files and the console
};

// How this node takes part in the rendezvous. Every run goes through it, one node or many: a single node
// hosts an in-process server on 127.0.0.1 with a generated token and joins it (~1 ms on loopback).
enum class Hosting {
  kNo,       // connect only (static node rank > 0, or a separate ddprun-rendezvous)
  kYes,      // host the server here, failing if its port cannot be bound
  kIfLocal,  // dynamic mode: host when the endpoint is one of this machine's addresses and the port is free
  kElected,  // --rdzv-backend etcd: host when this agent wins the job's election in etcd (RendezvousLink)
};

// --rdzv-backend etcd: where the job meets (etcd/coordinator_election.hpp).
struct EtcdConfig {
  std::string endpoints;               // "host:port,host:port" as given (checked by the launcher)
  std::string key_prefix = "/ddprun";  // --rdzv-conf key_prefix
  std::chrono::milliseconds read_timeout = timeouts::kEtcdReadTimeout;  // --rdzv-conf read_timeout: etcd unanswered this long: exit 69
  bool https = false;  // https:// endpoints or --rdzv-conf protocol=https
  std::string cacert, cert, key;  // --rdzv-conf cacert, cert, key (PEM files; checked readable by the launcher)
};

// --rdzv-auth: whether a hosted server also asks every node for a MUNGE credential of its own user
// (rendezvous/munge_auth.hpp). Nodes that only join follow what the server's challenge asks.
enum class MungeUse {
  kNo,           // token only
  kIfAvailable,  // auto inside a SLURM step: MUNGE when munged answers here, else token only and a warning
  kYes,          // --rdzv-auth munge: hosting fails (exit 69) when munged does not answer
};

struct RendezvousConfig {
  // The job-wide settings (run id, token, node counts, timeouts, restarts): one value from the command line
  // to the server, checked once by rendezvous::validate (rendezvous/job_config.cpp). The rest is how this
  // node takes part.
  rendezvous::JobConfig job;
  Hosting hosting = Hosting::kYes;
  std::string bind_address = "127.0.0.1";  // where a hosted server listens
  std::string server_host = "127.0.0.1";   // where this node's client connects
  int server_port = 0;                      // 0: a free port (hosted server only)
  // A SLURM step's further candidates (launcher/slurm_ports.hpp): node 0 hosts on the first of server_port and
  // these that it can bind; the others look for it there in the same order.
  std::vector<int> more_server_ports;
  MungeUse munge = MungeUse::kNo;           // job.require_munge follows from it where this node hosts
  std::optional<int> node_rank;  // static mode only
  std::string local_addr;        // how the other nodes reach this one (join.address); empty: as the server sees it
  int master_port = 0;           // MASTER_PORT offered if this node becomes node 0; 0: picked by the client
  bool master_port_fixed = false;  // --master-port given: the same every round (else picked afresh each round)
  // --rdzv-reconnect-timeout: a resumable server (ddprun-rendezvous) lost while this node's workers run a round
  // is reconnected to this long; the workers keep training meanwhile (rendezvous/client_reconnect.hpp).
  std::chrono::milliseconds reconnect_timeout{60'000};
  EtcdConfig etcd;  // Hosting::kElected only
};

struct AgentConfig {
  World world;  // what is known before the rendezvous; node rank, offsets and master come from it
  // The launcher's notes on the command line ("warning: ..."/"debug: ..." at that level), logged once the
  // console runs: never a blocking write to a stalled reader while the job signals are held.
  std::vector<std::string> startup_notes;
  RendezvousConfig rdzv;
  std::string program;              // what to execute: a path, or a name looked up in PATH
  std::vector<std::string> argv;    // the worker's argv, argv[0] included
  std::string python;               // the interpreter, resolved, when the program is Python; else empty
  std::string python_origin;        // how it was chosen ("PYTHON_EXEC", "python3 from PATH"), for the summary
  // --local-rank-arg: "--local-rank" or "--local_rank", given to each worker as "NAME=<local rank>" at
  // argv[local_rank_arg_at] (after the program or script, as torch.distributed.launch did); empty: none
  std::string local_rank_arg;
  std::size_t local_rank_arg_at = 0;
  bool use_env = false;                  // --use-env: launch's "pass no --local_rank", for the summary's advice
  // This node cannot run the program (not found, not executable): in a job of several nodes it does not just exit,
  // it tells the others first (issue 34: they waited --rdzv-timeout, 900 s, for it), then exits with this code.
  std::string cannot_start;
  int cannot_start_code = 0;
  // --stdin-rank: the global rank that gets ddprun's stdin, on whichever node runs it (every other worker
  // gets /dev/null); -1: none
  int stdin_rank = -1;
  std::vector<std::string> base_env;
  std::string log_dir;              // empty: error files in a temporary directory, no log files
  OutputConfig output;
  std::chrono::milliseconds term_timeout = timeouts::kTermTimeout;
  // --hang-timeout: a worker that beat once and then stays silent this long is hung; 0: beats are only
  // read, for the live view and straggler naming (README "Hang detection").
  std::chrono::milliseconds hang_timeout{0};
  // --hang-initial-timeout: a worker that has not beaten this long after its start is hung too (stuck before
  // its first beat: init_process_group, NCCL init, the first data load); 0: a worker that never beat is exempt.
  std::chrono::milliseconds hang_initial_timeout{0};
  // Straggler naming (rendezvous/straggler_watch.hpp): each rank's pace is measured over this window and
  // sent to the rendezvous, which judges (rdzv.job.stragglers: the threshold, and half this window to last).
  std::chrono::milliseconds straggler_window{20'000};
  bool straggler_stop = false;  // --straggler-action stop: a rank of this node named a straggler is killed as a failure
  std::chrono::milliseconds stack_capture_limit = timeouts::kStackCapture;  // bounds the capture of a hung worker's stacks
  // Bounds the wait for the NCCL Flight Recorder dumps a capture asked for (agent/flight_recorder.hpp): torch
  // reads its FIFO within 1 s, then takes seconds to write the dump (4.4 s for 20 entries, torch 2.11 on an
  // H100: docs/BENCHMARKS.md "GPU (NCCL)"), more than the stacks' limit.
  std::chrono::milliseconds nccl_dump_limit = timeouts::kNcclDump;
  std::string events_file;          // empty: none
  std::string metrics_textfile_dir;  // --metrics-textfile: Prometheus textfile of this node (agent/metrics_textfile.hpp)
  std::string host;                 // this node's name, for reports
  // In a SLURM step whose proctrack plugin signals every process of the step (launcher/slurm.hpp): a signal
  // from slurmstepd has reached the workers already and is not forwarded.
  bool step_signals_reach_workers = false;
  // In a SLURM job: a notice or SIGTERM followed by clean exits is exit 79, preempted (supervision_policy.hpp).
  bool preemption_exit = false;
  // ... and the job and step nodes to ask slurmctld about when SLURM stops the step (agent/slurm_end_query.hpp).
  std::string slurm_job_id;
  std::string slurm_step_nodes;
  Logger log;
};

}  // namespace ddprun::agent
