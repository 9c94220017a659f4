// ddprun-rdzv-loadgen: N simulated agents (real Clients, one io_context, one thread) against one server.
//
// Measures the time from the first connect until every agent holds its assignment, checks the assignments
// (distinct node ranks, prefix-sum offsets), then has every agent report done and waits for `complete`.
// Prints one line: nodes=N assign_ms=T complete_ms=T2. Used by scripts/bench/rdzv_scale.sh.
#include <CLI/CLI.hpp>
#include <iostream>

#include "common/error.hpp"
#include <vector>

#include "rendezvous/client.hpp"

namespace {

using namespace ddprun;
using namespace ddprun::rendezvous;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int run(int argc, char** argv) {
  CLI::App app{"simulated rendezvous agents"};
  std::string host = "127.0.0.1", run_id, token;
  std::uint16_t port = 0;
  int nodes = 1000, nproc = 8;
  bool static_ranks = false;
  double timeout_s = 60;
  app.add_option("--host", host);
  app.add_option("--port", port)->required();
  app.add_option("--nodes", nodes)->required();
  app.add_option("--nproc", nproc);
  app.add_option("--rdzv-id", run_id)->required();
  app.add_option("--token", token)->required();
  app.add_flag("--static-node-ranks", static_ranks);
  app.add_option("--timeout", timeout_s, "give up after this many seconds");
  CLI11_PARSE(app, argc, argv);

  boost::asio::io_context io;
  Logger logger(LogLevel::kWarning, "loadgen", "");
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<int> offsets(static_cast<std::size_t>(nodes), -1);
  int assigned = 0, complete = 0, errors = 0, bad = 0;
  double assign_ms = 0, complete_ms = 0;
  clients.reserve(static_cast<std::size_t>(nodes));

  auto start = Clock::now();
  for (int i = 0; i < nodes; ++i) {
    ClientConfig config;
    config.server_host = host;
    config.server_port = port;
    config.run_id = run_id;
    config.token = token;
    if (static_ranks) config.join.node_rank = i;
    config.join.nproc = nproc;
    config.join.host = "sim" + std::to_string(100000 + i);
    config.join.master_port = 29500;  // as with --master-port: no free-port probe per simulated agent
    config.connect_timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    ClientHandlers handlers;
    handlers.on_assignment = [&, i](const Assignment& a) {
      if (a.nnodes != nodes || a.rank_offset != a.node_rank * nproc || offsets[static_cast<std::size_t>(a.node_rank)] != -1 ||
          (static_ranks && a.node_rank != i))
        ++bad;
      offsets[static_cast<std::size_t>(a.node_rank)] = a.rank_offset;
      if (++assigned == nodes) {
        assign_ms = ms_since(start);
        for (auto& c : clients) c->report_node_done();
      }
    };
    handlers.on_job_complete = [&] {
      if (++complete == nodes) {
        complete_ms = ms_since(start);
        io.stop();
      }
    };
    handlers.on_stop = [&](const StopOrder& s) {
      std::cerr << "unexpected stop: " << describe(s.root_cause) << "\n";
      io.stop();
    };
    handlers.on_error = [&](const ClientError& e) {
      if (errors++ < 5) std::cerr << "agent error: " << e.message << "\n";
      if (assigned + errors >= nodes) io.stop();
    };
    clients.push_back(std::make_unique<Client>(io, std::move(config), std::move(handlers), logger));
  }
  for (auto& c : clients) c->start();
  io.run_for(std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000)));

  std::cout << "nodes=" << nodes << " assigned=" << assigned << " complete=" << complete << " errors=" << errors
            << " bad=" << bad << " assign_ms=" << assign_ms << " complete_ms=" << complete_ms << std::endl;
  return assigned == nodes && complete == nodes && bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ddprun::Error& e) {
    std::cerr << "ddprun-rdzv-loadgen: " << e.what() << "\n";
    return 1;
  }
}
