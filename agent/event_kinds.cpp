#include "agent/event_kinds.hpp"

#include <cstring>

#include "agent/exit_summary.hpp"
#include "agent/live_status.hpp"
#include "common/process/wait_status.hpp"

namespace ddprun::agent::event {
namespace {
json kind(const char* name, std::int64_t time_ms) { return json{{"event", name}, {"time_ms", time_ms}}; }

json with(json e, const json& fields) {
  e.update(fields);
  return e;
}

json worker(const char* name, const WorkerRecord& w, int node_rank) {
  json e = worker_json(w);  // the summary's shape of a worker: rank, pid, state, its exit and why
  e["event"] = name;
  e["node_rank"] = node_rank;
  return e;
}
}  // namespace

json rendezvous(std::int64_t time_ms, const rendezvous::Assignment& a) {
  return with(kind("rendezvous", time_ms),
              {{"node_rank", a.node_rank}, {"nnodes", a.nnodes}, {"rank_offset", a.rank_offset},
               {"world_size", a.world_size}, {"master_addr", a.master_addr}, {"master_port", a.master_port},
               {"restart_count", a.restart_count}});
}

json rendezvous_lost(std::int64_t time_ms, const std::string& why) {
  return with(kind("rendezvous_lost", time_ms), {{"why", why}});
}

json rendezvous_resumed(std::int64_t time_ms, const std::string& server) {
  return with(kind("rendezvous_resumed", time_ms), {{"server", server}});
}

json started(std::int64_t time_ms, int rank, int local_rank, pid_t pid, int node_rank) {
  return with(kind("started", time_ms), {{"rank", rank}, {"local_rank", local_rank}, {"pid", pid},
                                         {"node_rank", node_rank}});
}

json exited(const WorkerRecord& w, int node_rank) { return worker("exited", w, node_rank); }

json raised(const WorkerRecord& w, int node_rank) { return worker("raised", w, node_rank); }

json signal(std::int64_t time_ms, int signal, pid_t sender_pid) {
  return with(kind("signal", time_ms), {{"signal", signal}, {"signal_name", process::signal_name(signal)},
                                        {"sender_pid", sender_pid}});
}

json suspended(std::int64_t time_ms) { return kind("suspended", time_ms); }

json resumed(std::int64_t time_ms) { return kind("resumed", time_ms); }

json teardown(std::int64_t time_ms, const std::string& reason, int signal) {
  return with(kind("teardown", time_ms), {{"reason", reason}, {"signal", signal}});
}

json restarting(std::int64_t time_ms, const std::string& cause, const std::string& reason, bool membership,
                bool in_place) {
  json e = with(kind("restarting", time_ms), {{"cause", cause}, {"reason", reason}, {"membership", membership}});
  if (in_place) e["in_place"] = true;
  return e;
}

json reformed_in_place(std::int64_t time_ms, const World& w, int reforms) {
  return with(kind("reformed_in_place", time_ms),
              {{"node_rank", w.node_rank}, {"rank_offset", w.rank_offset}, {"world_size", w.world_size},
               {"restart_count", w.restart_count}, {"reforms", reforms}});
}

json reform_not_taken(std::int64_t time_ms, int restart_count) {
  return with(kind("reform_not_taken", time_ms), {{"restart_count", restart_count}});
}

json dropped(std::int64_t time_ms, const std::string& reason) {
  return with(kind("dropped", time_ms), {{"reason", reason}, {"rejoin", true}});
}

json hung(std::int64_t time_ms, const WorkerRecord& w, int node_rank, std::int64_t last_step,
          std::int64_t last_beat_ms, bool never_beat) {
  return with(kind("hung", time_ms),
              {{"rank", w.rank}, {"local_rank", w.local_rank}, {"pid", w.pid}, {"node_rank", node_rank},
               {"last_step", last_step}, {"last_beat_ms", never_beat ? json(nullptr) : json(last_beat_ms)},
               {"never_beat", never_beat}});
}

json stacks(std::int64_t time_ms, const std::string& file, const std::vector<StackDumpFile>* nccl_dumps) {
  json e = with(kind("stacks", time_ms), {{"file", file}});
  if (nccl_dumps) {
    json files = json::array();
    for (const StackDumpFile& d : *nccl_dumps) files.push_back({{"rank", d.rank}, {"file", d.file}});
    e["nccl_dumps"] = std::move(files);
  }
  return e;
}

json hang_deferred(std::int64_t time_ms, const std::vector<int>& quiet_ranks, std::int64_t wait_ms,
                   const std::vector<int>& recovered) {
  json e = with(kind("hang_deferred", time_ms), {{"quiet_ranks", quiet_ranks}, {"wait_ms", wait_ms}});
  if (!recovered.empty()) e["recovered"] = recovered;
  return e;
}

json straggler(std::int64_t time_ms, const rendezvous::Straggler& s, double window_s) {
  return with(with(kind("straggler", time_ms), straggler_json(s)), {{"window_s", window_s}});
}

json straggler_end(std::int64_t time_ms, int rank, int node_rank) {
  return with(kind("straggler_end", time_ms), {{"rank", rank}, {"node_rank", node_rank}});
}

json log_write_failed(std::int64_t time_ms, int rank, const std::string& path, int error, std::int64_t bytes_written,
                      bool created) {
  return with(kind("log_write_failed", time_ms),
              {{"rank", rank}, {"path", path}, {"errno", error}, {"error", std::strerror(error)},
               {"bytes_written", bytes_written}, {"created", created}});
}

json console_abandoned(std::int64_t time_ms, std::int64_t lost_bytes) {
  return with(kind("console_abandoned", time_ms), {{"lost_bytes", lost_bytes}});
}

}  // namespace ddprun::agent::event
