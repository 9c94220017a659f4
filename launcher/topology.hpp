// Where this node stands in the job, from the topology and rendezvous options: standalone (one node, an
// in-process rendezvous on 127.0.0.1), static (--nnodes N --node-rank R --master-addr HOST: node 0 hosts
// the rendezvous) or dynamic (--rdzv-endpoint HOST:PORT --rdzv-id ID: the server assigns node ranks).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/agent_config.hpp"
#include "common/timeouts.hpp"

namespace ddprun::launcher {

struct TopologyOptions {
  std::string nnodes = "1";
  std::string node_rank = "0";
  bool node_rank_given = false;
  std::string master_addr;
  std::string master_port;
  bool standalone = false;
  std::string run_id = "none";
  std::string rdzv_endpoint;
  std::string rdzv_id;
  std::string rdzv_backend;
  std::string rdzv_port = "29400";
  std::vector<int> more_rdzv_ports;  // a SLURM step's further candidates (slurm_ports.hpp)
  // A SLURM step that hosts its own rendezvous: "slurm job J step S", bound into the token (scoped_token), so that
  // steps that share a run id (--rdzv-id $SLURM_JOB_ID) never join each other. "" elsewhere.
  std::string token_scope;
  std::string rdzv_token;
  std::string rdzv_token_file;
  std::string rdzv_auth = "auto";  // auto | munge | token (resolve_munge_use in topology.cpp)
  std::string rdzv_timeout = "900";
  std::string heartbeat_interval = std::to_string(timeouts::kHeartbeatInterval.count() / 1000);
  std::string heartbeat_timeout = std::to_string(timeouts::kHeartbeatTimeout.count() / 1000);  // torchrun's 5 s x 3
  std::string join_grace;  // --join-grace seconds; empty: 5 in a SLURM step (slurm.cpp), else 0 (off)
  std::string rdzv_reconnect_timeout = "60";  // a lost ddprun-rendezvous: seconds to wait for its return
  std::string local_addr;
  std::string max_restarts = "0";
  // --rdzv-conf max_departures: elastic jobs, a host's departures before it is refused
  std::string max_departures = "3";
  std::string join_policy = "now";     // --rdzv-conf join_policy: elastic jobs, when a late joiner is placed
  std::string join_min_interval = "0";  // --rdzv-conf join_min_interval: with join_policy now, seconds
  std::string last_call = "30";  // --rdzv-conf last_call_timeout: elastic jobs, seconds to wait after MIN joined
  std::optional<bool> is_host;
  // --rdzv-backend etcd (etcd-v2 the same): --rdzv-conf key_prefix, read_timeout (seconds etcd may stay silent)
  std::string etcd_key_prefix = "/ddprun";
  std::string etcd_read_timeout = "60";
  std::string etcd_protocol = "http";           // --rdzv-conf protocol: http or https
  std::string etcd_cacert, etcd_cert, etcd_key;  // --rdzv-conf cacert, cert, key  // --rdzv-conf is_host: dynamic mode hosts the server here (true) or joins (false)
};

// Fills cfg.world (what is known before the rendezvous) and cfg.rdzv; cfg.world.local_world_size must be
// set. Only checks, except that MASTER_PORT is picked here when this node is node 0. Throws UsageError.
void resolve_topology(const TopologyOptions& o, const std::vector<std::string>& env, agent::AgentConfig& cfg,
                      std::vector<std::string>& notes);

// --rdzv-backend etcd or etcd-v2 (torchrun's two etcd back-ends; one meeting place in ddprun).
inline bool is_etcd_backend(const std::string& backend) { return backend == "etcd" || backend == "etcd-v2"; }

// "host:port", "[v6]:port" or "host" (port 29400). Throws UsageError naming --rdzv-endpoint.
void parse_endpoint(const std::string& text, std::string& host, int& port);

}  // namespace ddprun::launcher
