// The live view for the cluster's monitoring (--metrics-textfile DIR): each agent writes its node's figures in
// Prometheus' text format to DIR/ddprun_<run id>_node<N>.prom, for node_exporter's textfile collector
// (--collector.textfile.directory=DIR), atomically (a temporary file in DIR, then rename) every sampling
// period, and removes it when the job ends. Nothing to configure on the cluster's side, no port opened.
// Labels: job (the run id), node (its node rank), host, rank. docs/MONITORING.md has a collector line and an
// alert rule.
#pragma once

#include <memory>
#include <string>

#include "agent/live_status.hpp"

namespace ddprun::agent {

// The exposition text for one node's status.
std::string prometheus_text(const NodeStatus& status);

// Writes the latest text to DIR/NAME from a thread of its own, as the workers' log files are written
// (common/write_queue.hpp): a directory on a file system that hangs or is full never holds the agent's loop.
// The newest text replaces one not yet written. A temporary is created with O_EXCL | O_NOFOLLOW (a file or a
// FIFO another user put under its name in a shared directory is never opened), written, then renamed.
class TextfileWriter {
 public:
  explicit TextfileWriter(std::string dir);
  // Removes the last file written (a new round's name replaces the old one too), waiting at most 1 s for
  // the thread: a file system that hangs does not hold ddprun's exit.
  ~TextfileWriter();
  TextfileWriter(const TextfileWriter&) = delete;
  TextfileWriter& operator=(const TextfileWriter&) = delete;

  void publish(std::string name, std::string text);
  // Why writing failed, once per failing spell (then "" until a write succeeded and another failed).
  std::string take_problem();

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
};

// The file's name for this node: ddprun_<run id>_node<N>.prom (the run id as metrics_run_id gives it).
std::string textfile_name(const NodeStatus& status);
// The run id the file and its `job` label carry: the job's, except the default "none" (every job started without
// --run-id, --standalone ones above all), which gets this ddprun's pid, "none-4242": two such jobs on one node
// would otherwise write one file, and the first to end would remove the other's series (issue 33).
std::string metrics_run_id(const std::string& run_id, long pid);

}  // namespace ddprun::agent
