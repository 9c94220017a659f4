// The live view for the cluster's monitoring (--metrics-textfile DIR): each agent writes its node's figures in
// Prometheus' text format to DIR/ddprun_<run id>_node<N>.prom, for node_exporter's textfile collector
// (--collector.textfile.directory=DIR), atomically (a temporary file in DIR, then rename) every sampling
// period, and removes it when the job ends. Nothing to configure on the cluster's side, no port opened.
// Labels: job (the run id), node (its node rank), host, rank. docs/MONITORING.md has a collector line and an
// alert rule.
#pragma once

#include <string>

#include "agent/live_status.hpp"

namespace ddprun::agent {

// The exposition text for one node's status.
std::string prometheus_text(const NodeStatus& status);

// "" when written, else why not (the agent says it once).
std::string write_textfile(const std::string& dir, const std::string& name, const std::string& text);

// The file's name for this node: ddprun_<run id>_node<N>.prom.
std::string textfile_name(const NodeStatus& status);

}  // namespace ddprun::agent
