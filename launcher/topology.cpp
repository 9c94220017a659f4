#include "launcher/topology.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/env_contract.hpp"
#include "common/contract/worker_contract.hpp"
#include "common/error.hpp"
#include "common/host_port.hpp"
#include "etcd/gateway_client.hpp"
#include "launcher/exit_codes.hpp"
#include "launcher/option_values.hpp"
#include "launcher/ports.hpp"
#include "launcher/slurm.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/job_config.hpp"
#include "rendezvous/listener.hpp"

namespace ddprun::launcher {
namespace {

constexpr int kDefaultRdzvPort = 29400;

// --rdzv-token, then --rdzv-token-file, then DDPRUN_TOKEN. Multi-node without any: a token derived from
// the run id, which keeps other jobs out but not an attacker, said so in the log.
std::string resolve_token(const TopologyOptions& o, const std::vector<std::string>& env, bool local_only,
                          const std::string& run_id, bool munge, std::vector<std::string>& notes) {
  if (!o.rdzv_token.empty() && !o.rdzv_token_file.empty())
    throw UsageError("give either --rdzv-token or --rdzv-token-file, not both", kExitUsage);
  if (!o.rdzv_token.empty()) {
    notes.push_back("warning: --rdzv-token on the command line is visible to every user of this machine (ps, "
                    "/proc/PID/cmdline); put it in a file only you can read and pass --rdzv-token-file FILE, or "
                    "set DDPRUN_TOKEN");
    return o.rdzv_token;
  }
  std::string given;
  try {
    given = rendezvous::given_token(o.rdzv_token, o.rdzv_token_file, contract::env_value(env, contract::kToken, ""));
  } catch (const Error& e) {
    throw UsageError(std::string("--rdzv-token-file: ") + e.what(), kExitNoInput);
  }
  if (!o.rdzv_token_file.empty())
    if (std::string warning = rendezvous::token_file_warning(o.rdzv_token_file); !warning.empty())
      notes.push_back(std::move(warning));
  if (!given.empty()) return given;
  // One node: nobody else needs to know the token, so it is a fresh random one.
  if (local_only) return rendezvous::generate_token();
  notes.push_back("no --rdzv-token, --rdzv-token-file or DDPRUN_TOKEN: the rendezvous accepts any node that "
                  "knows the run id '" + run_id + "'" +
                  (munge ? " and, when munged answers on the hosting node, runs as this user (MUNGE)" : "") +
                  // Issue 55: with etcd the host's address is whatever the coordinator key says, and a server that
                  // knows only the run id proves itself with this token: whoever can write the key owns the job.
                  (o.rdzv_backend == "etcd"
                       ? "; with --rdzv-backend etcd, anyone who can write etcd's keys under the job's prefix can "
                         "also stand in for its host and give the workers their MASTER_ADDR: give every node a "
                         "token"
                       : ""));
  return rendezvous::run_id_token(run_id);  // the server recognises it and warns when it listens beyond loopback
}

// --rdzv-auth. auto asks for MUNGE only where it costs nothing to configure: a SLURM step of several nodes
// (SLURM_STEP_ID is set in steps, not in the batch script), where every node runs the cluster's munged.
agent::MungeUse resolve_munge_use(const std::string& mode, const std::vector<std::string>& env, bool local_only) {
  if (mode == "token") return agent::MungeUse::kNo;
  if (mode == "munge") return agent::MungeUse::kYes;
  if (mode != "auto")
    throw UsageError("--rdzv-auth must be auto, munge or token, got '" + mode + "'", kExitUsage);
  const bool in_slurm_step = !contract::env_value(env, "SLURM_JOB_ID", "").empty() &&
                             !contract::env_value(env, "SLURM_STEP_ID", "").empty();
  return in_slurm_step && !local_only ? agent::MungeUse::kIfAvailable : agent::MungeUse::kNo;
}

// MASTER_PORT on the node that will be node 0: the one asked for, if free here, or a free one.
int master_port_here(const TopologyOptions& o) {
  const int port = o.master_port.empty() ? 0 : parse_int_in("--master-port", o.master_port, 0, 65535);
  if (port == 0) return pick_free_port();
  const std::string why = port_unavailable_reason(port);
  if (!why.empty())
    throw UsageError("--master-port " + std::to_string(port) + " is not available (" + why +
                         "); choose another or 0 for a free one",
                     kExitUnavailable);
  return port;
}

}  // namespace

void parse_endpoint(const std::string& text, std::string& host, int& port) {
  port = kDefaultRdzvPort;
  std::string port_text;
  const std::string wrong = split_host_port(text, host, port_text);
  if (!wrong.empty()) throw UsageError("--rdzv-endpoint '" + text + "': " + wrong, kExitUsage);
  if (!valid_host(host)) throw UsageError("--rdzv-endpoint '" + text + "': the host is not valid", kExitUsage);
  if (!port_text.empty()) port = parse_int_in("--rdzv-endpoint port", port_text, 0, 65535);  // 0: one node
}

namespace {
void resolve_parts(const TopologyOptions& o, const std::vector<std::string>& env, agent::AgentConfig& cfg,
                   std::vector<std::string>& notes) {
  const NodeRange range = parse_nnodes(o.nnodes);
  const int nnodes = range.max;
  // torchrun's one-node recipe `--rdzv-endpoint localhost:0 --nnodes 1`: port 0 is a free port on this machine,
  // which no other node could find, so it is a one-node job on loopback (as --standalone) and needs no --rdzv-id.
  bool free_port_endpoint = false;
  const bool etcd = is_etcd_backend(o.rdzv_backend);
  if (etcd) {
    // The endpoint is etcd's (a list, for failover), never a rendezvous server's: the agents elect the host.
    if (o.rdzv_endpoint.empty())
      throw UsageError("--rdzv-backend " + o.rdzv_backend + " needs --rdzv-endpoint HOST:PORT[,HOST:PORT...]: "
                       "etcd's client URLs", kExitUsage);
    try {
      etcd::parse_endpoints(o.rdzv_endpoint);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--rdzv-endpoint: ") + e.what(), kExitUsage);
    }
    if (o.is_host)
      throw UsageError("--rdzv-conf is_host has no meaning with --rdzv-backend " + o.rdzv_backend +
                       ": the agents elect the one that hosts the rendezvous", kExitUsage);
  } else if (!o.rdzv_endpoint.empty()) {
    std::string host;
    int port = 0;
    parse_endpoint(o.rdzv_endpoint, host, port);
    free_port_endpoint = port == 0;
  }
  if (free_port_endpoint && nnodes != 1)
    throw UsageError("--rdzv-endpoint " + o.rdzv_endpoint + ": port 0 means a free port on this machine, which " +
                         "other nodes cannot find; give the port every node uses, or --nnodes 1",
                     kExitUsage);
  const bool dynamic = !o.rdzv_endpoint.empty() && !free_port_endpoint;
  if (o.standalone && nnodes != 1)
    throw UsageError("--standalone runs one node; it cannot be combined with --nnodes " + o.nnodes, kExitUsage);
  if (o.standalone && dynamic)
    throw UsageError("--standalone hosts its own rendezvous; it cannot be combined with --rdzv-endpoint",
                     kExitUsage);
  if (!o.rdzv_backend.empty() && o.rdzv_backend != "c10d" && o.rdzv_backend != "static" &&
      o.rdzv_backend != "ddprun" && !etcd)
    throw UsageError("--rdzv-backend '" + o.rdzv_backend + "': ddprun knows c10d, static and etcd (etcd-v2); "
                     "use one of them or leave it out", kExitUsage);
  if (range.elastic() && !dynamic)
    throw UsageError("--nnodes " + o.nnodes + ": an elastic node count needs --rdzv-endpoint HOST:PORT and "
                     "--rdzv-id ID on every node (the server then assigns node ranks); a static job "
                     "(--master-addr, --node-rank) has a fixed node count", kExitUsage);
  if (dynamic && o.node_rank_given)
    throw UsageError("--node-rank is for static jobs (--master-addr); with --rdzv-endpoint the server assigns "
                     "node ranks", kExitUsage);
  if (!dynamic && nnodes > 1 && o.master_addr.empty())
    throw UsageError("--nnodes " + o.nnodes + " needs --master-addr HOST (node 0's address; static node ranks) "
                     "or --rdzv-endpoint HOST:PORT with --rdzv-id ID (dynamic)", kExitUsage);
  const int node_rank = parse_int_in("--node-rank", o.node_rank, 0, nnodes - 1);

  agent::World& w = cfg.world;
  agent::RendezvousConfig& r = cfg.rdzv;
  rendezvous::JobConfig& job = r.job;
  r.master_port_fixed = !o.master_port.empty();  // else a fresh MASTER_PORT each round (rendezvous/client.hpp)
  w.nnodes = job.max_nodes = nnodes;  // elastic: the most it can be, until the rendezvous says
  job.min_nodes = range.min;
  job.max_departures = parse_int_in("--rdzv-conf max_departures", o.max_departures, 1, 1000000);
  job.last_call = parse_duration("--rdzv-conf last_call_timeout", o.last_call);
  rendezvous::parse_join_policy(o.join_policy, job.join_policy);  // apply_rdzv_conf checked it
  job.join_min_interval = parse_duration("--rdzv-conf join_min_interval", o.join_min_interval);
  w.node_rank = node_rank;
  w.rank_offset = 0;
  w.world_size = w.local_world_size;
  // An IPv6 address may come in brackets, as in an endpoint ("[fd42::1]"); workers get it bare (TCPStore and
  // gloo take "fd42::1", not "[fd42::1]").
  w.master_addr = o.master_addr.empty() ? "127.0.0.1" : without_brackets(o.master_addr);
  if (!valid_host(w.master_addr))
    throw UsageError("--master-addr '" + o.master_addr + "' is not a host name or address", kExitUsage);
  const std::string local_addr = without_brackets(o.local_addr);
  if (!local_addr.empty() && !valid_host(local_addr))
    throw UsageError("--local-addr '" + o.local_addr + "' is not a host name or address", kExitUsage);
  if (!o.rdzv_id.empty() && o.run_id != "none" && o.rdzv_id != o.run_id)
    throw UsageError("--rdzv-id and --run-id name the same thing; give one", kExitUsage);
  w.run_id = o.rdzv_id.empty() ? o.run_id : o.rdzv_id;
  if (!valid_name(w.run_id))
    throw UsageError("--run-id must be 1-128 characters of [A-Za-z0-9._-], got '" + w.run_id + "'", kExitUsage);
  // Several nodes must name their job: two jobs pointed at one endpoint by mistake (or one ddprun-rendezvous
  // serving many) would otherwise both be run "none" and join each other's rendezvous, mixing their nodes. One
  // node keeps torchrun's default id: its rendezvous forms as soon as that node joins, so another job arriving
  // at the same endpoint finds it closed and is refused, never merged.
  if (dynamic && nnodes > 1 && o.rdzv_id.empty() && o.run_id == "none")
    throw UsageError("--rdzv-endpoint with --nnodes " + o.nnodes + " needs --rdzv-id ID: the same job id on "
                     "every node, so that two jobs at one endpoint cannot join each other", kExitUsage);

  job.run_id = w.run_id;
  job.join_timeout = parse_duration("--rdzv-timeout", o.rdzv_timeout);
  if (!o.join_grace.empty()) job.join_grace = parse_duration("--join-grace", o.join_grace);
  job.heartbeat_interval = parse_duration("--heartbeat-interval", o.heartbeat_interval);
  job.heartbeat_timeout = parse_duration("--heartbeat-timeout", o.heartbeat_timeout);
  job.max_restarts = parse_int_in("--max-restarts", o.max_restarts, 0, 1000000);
  w.max_restarts = job.max_restarts;
  r.local_addr = local_addr;
  r.reconnect_timeout = parse_duration("--rdzv-reconnect-timeout", o.rdzv_reconnect_timeout);

  const bool local_only = nnodes == 1 && !dynamic;
  r.munge = resolve_munge_use(o.rdzv_auth, env, local_only);
  job.token = resolve_token(o, env, local_only, w.run_id, r.munge != agent::MungeUse::kNo, notes);
  job.public_token = rendezvous::is_run_id_token(job.token, w.run_id);
  if (!o.token_scope.empty()) job.token = rendezvous::scoped_token(job.token, o.token_scope);
  job.munge_socket = contract::env_value(env, "DDPRUN_MUNGE_SOCKET", "");
  // Else the cluster's own setting (AuthInfo=socket=... in slurm.conf), then libmunge's default.
  if (job.munge_socket.empty() && r.munge != agent::MungeUse::kNo) job.munge_socket = slurm_munge_socket(env);
  if (local_only) {
    // One node: an in-process server on loopback, a free port, ranks as given.
    r.hosting = agent::Hosting::kYes;
    r.bind_address = r.server_host = "127.0.0.1";
    r.server_port = 0;
    job.static_node_ranks = true;
    r.node_rank = 0;
    if (r.local_addr.empty()) r.local_addr = w.master_addr;  // MASTER_ADDR as given (default 127.0.0.1)
    w.master_port = r.master_port = master_port_here(o);
    return;
  }
  if (dynamic && etcd) {
    r.hosting = agent::Hosting::kElected;  // rendezvous_link.cpp: the first agent to claim the key in etcd
    r.etcd.endpoints = o.rdzv_endpoint;
    r.etcd.key_prefix = o.etcd_key_prefix;
    r.etcd.read_timeout = parse_duration("--rdzv-conf read_timeout", o.etcd_read_timeout);
    r.etcd.https = o.etcd_protocol == "https" || etcd::names_https(o.rdzv_endpoint);
    if (r.etcd.https && o.etcd_protocol == "http" && o.rdzv_endpoint.find("http://") != std::string::npos)
      throw UsageError("--rdzv-endpoint mixes http:// and https:// etcd URLs: give every endpoint the same scheme",
                       kExitUsage);
    if (!r.etcd.https && !(o.etcd_cacert + o.etcd_cert + o.etcd_key).empty())
      throw UsageError("--rdzv-conf cacert, cert and key are for TLS: add protocol=https (or give https:// "
                       "endpoints)", kExitUsage);
    if (o.etcd_cert.empty() != o.etcd_key.empty())
      throw UsageError("--rdzv-conf cert and key go together (this node's certificate and its private key)",
                       kExitUsage);
    for (const std::string* file : {&o.etcd_cacert, &o.etcd_cert, &o.etcd_key})
      if (!file->empty() && ::access(file->c_str(), R_OK) != 0)
        throw UsageError("--rdzv-conf: cannot read " + *file + ": " + std::strerror(errno), kExitNoInput);
    r.etcd.cacert = o.etcd_cacert;
    r.etcd.cert = o.etcd_cert;
    r.etcd.key = o.etcd_key;
    job.static_node_ranks = false;
    w.master_port = r.master_port =
        o.master_port.empty() ? 0 : parse_int_in("--master-port", o.master_port, 0, 65535);
    return;
  }
  if (dynamic) {
    parse_endpoint(o.rdzv_endpoint, r.server_host, r.server_port);
    // The endpoint's own machine hosts the server (binding the endpoint succeeds only there, and only for
    // the first agent); every other agent, or all of them beside a ddprun-rendezvous, join as clients.
    r.hosting = agent::Hosting::kIfLocal;
    if (o.is_host) r.hosting = *o.is_host ? agent::Hosting::kYes : agent::Hosting::kNo;
    r.bind_address = r.server_host;
    job.static_node_ranks = false;
    w.master_port = r.master_port =
        o.master_port.empty() ? 0 : parse_int_in("--master-port", o.master_port, 0, 65535);
    return;
  }
  // Static: node 0 hosts the server on every interface at --rdzv-port; every node (0 too) reaches it at
  // --master-addr, which is also node 0's MASTER_ADDR unless --local-addr says otherwise.
  r.server_port = parse_int_in("--rdzv-port", o.rdzv_port, 1, 65535);
  r.more_server_ports = o.more_rdzv_ports;
  r.server_host = w.master_addr;
  job.static_node_ranks = true;
  r.node_rank = node_rank;
  if (node_rank == 0) {
    r.hosting = agent::Hosting::kYes;
    r.bind_address = rendezvous::kEveryAddress;
    if (r.local_addr.empty()) r.local_addr = w.master_addr;
    w.master_port = r.master_port = master_port_here(o);
  } else {
    r.hosting = agent::Hosting::kNo;
    w.master_port = r.master_port =
        o.master_port.empty() ? 0 : parse_int_in("--master-port", o.master_port, 0, 65535);
  }
}

}  // namespace

void resolve_topology(const TopologyOptions& o, const std::vector<std::string>& env, agent::AgentConfig& cfg,
                      std::vector<std::string>& notes) {
  resolve_parts(o, env, cfg, notes);
  // The job-wide settings are checked in one place, the rendezvous' own: what ddprun-rendezvous accepts,
  // ddprun accepts, with the same message.
  try {
    rendezvous::validate(cfg.rdzv.job);
  } catch (const rendezvous::RendezvousError& e) {
    throw UsageError(e.what(), kExitUsage);
  }
}

}  // namespace ddprun::launcher
