// ddprun-rdzv-loadgen: N simulated agents (real Clients, one io_context, one thread) against one server.
//
// Join (the default): the time from the first connect until every agent holds its assignment, the assignments
// checked (distinct node ranks, prefix-sum offsets), then every agent reports done and `complete` is awaited.
// Prints one line: nodes=N assign_ms=T complete_ms=T2. Used by scripts/bench/rdzv_scale.sh.
//
// Steady state (--steady S, issue 33): once every agent is placed, they hold the round for S seconds sending
// what real agents send: heartbeats at the server's interval (each answered; the round trip is measured),
// every --status-every seconds a status (a JSON text the size of an 8-rank node's live-view status, and its
// ranks' paces: balanced, so nobody is named), and --views-per-s live-view requests across the job (a
// ddprun-status). Hang views are left out: one starts an inquiry that ends the job. With --fail-at F one agent
// reports a worker failure F seconds into the steady state, and the time until every agent heard the stop is
// measured. With --server-pid the server's CPU time and peak RSS over the measured window are read from /proc.
// Prints one line of key=value figures. Used by scripts/bench/rdzv_steady.sh and the CI's short run.
//
// The agents connect in batches of --start-batch, one batch per turn of the loop, so the handshakes of the first
// ones run while the later ones connect (all at once, the listen queue overflows and a dropped SYN costs a 1 s
// retransmission). --spread-sources binds agent i to its own source address in 127.0.0.0/8 (one address's
// ephemeral ports stop near 28 000 connections); the open-files limit is raised to the hard limit.
#include <CLI/CLI.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <boost/asio/post.hpp>
#include <random>
#include <sstream>
#include <unistd.h>
#include <vector>

#include "common/error.hpp"
#include "rendezvous/client.hpp"
#include "rendezvous/listener.hpp"

namespace {

using namespace ddprun;
using namespace ddprun::rendezvous;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The server's CPU seconds so far (utime + stime; its system time alone with `system_only`), from /proc; -1 when
// unreadable. On loopback the kernel charges a message's delivery to the sender: the system share is mostly
// the TCP work of both ends of every heartbeat, which a real network splits between two machines.
double cpu_seconds(int pid, bool system_only = false) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stod(field);
    if (i == 15) {
      stime = std::stod(field);
      break;
    }
  }
  return ((system_only ? 0 : utime) + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

long rss_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

double percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  const auto at = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(at), values.end());
  return values[at];
}

// A status as large as an agent's with 8 running ranks (agent/live_status.cpp's fields, made-up values).
std::string status_text(int node, int offset, int nproc, int step) {
  std::string workers;
  for (int l = 0; l < nproc; ++l)
    workers += std::string(l ? "," : "") + R"({"rank":)" + std::to_string(offset + l) + R"(,"local_rank":)" +
               std::to_string(l) + R"(,"pid":)" + std::to_string(100000 + l) + R"(,"state":"running","step":)" +
               std::to_string(step) + R"(,"beat_age_s":0.4,"steps_per_s":12.5,"cpu_pct":97.1,"rss_kib":2811904,)" +
               R"("straggler":false})";
  return R"({"host":"sim)" + std::to_string(100000 + node) + R"(","node_rank":)" + std::to_string(node) +
         R"(,"state":"running","restart_count":0,"world_size":)" + std::to_string(nproc * 1000) +
         R"(,"workers":[)" + workers + "]}";
}

// Agent i's source address with --spread-sources: 127.A.B.C, C in 1..250 first, so each address holds one agent.
std::string spread_source(int i) {
  return "127." + std::to_string(1 + i / 62500) + "." + std::to_string(i / 250 % 250) + "." +
         std::to_string(1 + i % 250);
}


struct Options {
  std::string host = "127.0.0.1", run_id, token;
  std::uint16_t port = 0;
  int nodes = 1000, nproc = 8, server_pid = 0, start_batch = 64;
  bool static_ranks = false, spread_sources = false;
  double timeout_s = 60, steady_s = 0, status_every_s = 5, views_per_s = 1, fail_at_s = 0, warmup_s = 5;
};

int run(const Options& o) {
  boost::asio::io_context io;
  Logger logger(LogLevel::kWarning, "loadgen", "");
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<boost::asio::steady_timer> status_timers;
  std::vector<int> offsets(static_cast<std::size_t>(o.nodes), -1), node_of(static_cast<std::size_t>(o.nodes), -1);
  int assigned = 0, complete = 0, errors = 0, bad = 0, stopped = 0, views = 0, statuses = 0;
  double assign_ms = 0, complete_ms = 0, fail_to_all_ms = -1, cpu_at_start = -1, cpu_s = -1, window_s = 0;
  double sys_at_start = -1, sys_s = -1;
  long rss_max = -1;
  bool measuring = false;
  std::vector<double> rtts_ms;
  Clock::time_point measure_start, failed_at, start;
  clients.reserve(static_cast<std::size_t>(o.nodes));
  status_timers.reserve(static_cast<std::size_t>(o.nodes));
  boost::asio::steady_timer phase_timer(io), view_timer(io), sample_timer(io);
  std::mt19937 random(42);
  const bool steady = o.steady_s > 0;

  std::function<void(int, int)> send_status = [&](int i, int step) {
    auto& timer = status_timers[static_cast<std::size_t>(i)];
    timer.expires_after(milliseconds(static_cast<long long>(o.status_every_s * 1000)));
    timer.async_wait([&, i, step](boost::system::error_code ec) {
      if (ec || stopped) return;
      const int node = node_of[static_cast<std::size_t>(i)], offset = offsets[static_cast<std::size_t>(node)];
      std::vector<RankPace> paces;
      for (int l = 0; l < o.nproc; ++l) paces.push_back(RankPace{offset + l, 80'000, 60'000 + (l * 37 + i) % 1000});
      clients[static_cast<std::size_t>(i)]->report_status(status_text(node, offset, o.nproc, step), std::move(paces));
      ++statuses;
      send_status(i, step + 62);
    });
  };
  std::function<void()> sample = [&] {
    if (o.server_pid > 0) rss_max = std::max(rss_max, rss_kib(o.server_pid));
    sample_timer.expires_after(milliseconds(1000));
    sample_timer.async_wait([&](boost::system::error_code ec) {
      if (!ec) sample();
    });
  };
  std::function<void()> request_views = [&] {
    if (o.views_per_s <= 0) return;
    view_timer.expires_after(milliseconds(static_cast<long long>(1000 / o.views_per_s)));
    view_timer.async_wait([&](boost::system::error_code ec) {
      if (ec || stopped) return;
      clients[random() % clients.size()]->request_view();
      request_views();
    });
  };
  auto end_measuring = [&] {
    if (!measuring) return;
    measuring = false;
    window_s = std::chrono::duration<double>(Clock::now() - measure_start).count();
    if (o.server_pid > 0) cpu_s = cpu_seconds(o.server_pid) - cpu_at_start;
    if (o.server_pid > 0) sys_s = cpu_seconds(o.server_pid, true) - sys_at_start;
  };
  auto start_steady = [&] {
    for (int i = 0; i < o.nodes; ++i) {  // statuses spread over the period, as nodes' timers are
      auto& timer = status_timers[static_cast<std::size_t>(i)];
      timer.expires_after(milliseconds(static_cast<long long>(o.status_every_s * 1000 * (random() % 1000) / 1000)));
      timer.async_wait([&, i](boost::system::error_code ec) {
        if (!ec) send_status(i, 1);
      });
    }
    request_views();
    sample();
    phase_timer.expires_after(milliseconds(static_cast<long long>(o.warmup_s * 1000)));
    phase_timer.async_wait([&](boost::system::error_code ec) {  // the measured window starts after a warm-up
      if (ec) return;
      measuring = true;
      measure_start = Clock::now();
      if (o.server_pid > 0) cpu_at_start = cpu_seconds(o.server_pid);
      if (o.server_pid > 0) sys_at_start = cpu_seconds(o.server_pid, true);
      const double until = o.fail_at_s > 0 ? o.fail_at_s : o.steady_s;
      phase_timer.expires_after(milliseconds(static_cast<long long>(std::max(0.0, until - o.warmup_s) * 1000)));
      phase_timer.async_wait([&](boost::system::error_code ec2) {
        if (ec2) return;
        end_measuring();
        if (o.fail_at_s <= 0) return io.stop();
        Failure f;  // a worker of the middle node exits 1
        const int node = o.nodes / 2;
        f.node_rank = node;
        f.host = "sim" + std::to_string(100000 + node);
        f.rank = offsets[static_cast<std::size_t>(node)];
        f.local_rank = 0;
        f.pid = 100000;
        f.exit_code = 1;
        failed_at = Clock::now();
        for (int i = 0; i < o.nodes; ++i)
          if (node_of[static_cast<std::size_t>(i)] == node) clients[static_cast<std::size_t>(i)]->report_failure(f);
      });
    });
  };

  for (int i = 0; i < o.nodes; ++i) {
    status_timers.emplace_back(io);
    ClientConfig config;
    config.server_host = o.host;
    config.server_port = o.port;
    config.run_id = o.run_id;
    config.token = o.token;
    if (o.static_ranks) config.join.node_rank = i;
    config.join.nproc = o.nproc;
    config.join.host = "sim" + std::to_string(100000 + i);
    config.join.master_port = 29500;  // as with --master-port: no free-port probe per simulated agent
    config.connect_timeout = milliseconds(static_cast<long long>(o.timeout_s * 1000));
    if (o.spread_sources) config.source_address = spread_source(i);
    ClientHandlers handlers;
    handlers.on_assignment = [&, i](const Assignment& a) {
      if (a.nnodes != o.nodes || a.rank_offset != a.node_rank * o.nproc ||
          offsets[static_cast<std::size_t>(a.node_rank)] != -1 || (o.static_ranks && a.node_rank != i))
        ++bad;
      offsets[static_cast<std::size_t>(a.node_rank)] = a.rank_offset;
      node_of[static_cast<std::size_t>(i)] = a.node_rank;
      if (++assigned == o.nodes) {
        assign_ms = ms_since(start);
        if (steady) return start_steady();
        for (auto& c : clients) c->report_node_done();
      }
    };
    handlers.on_job_complete = [&](bool) {
      if (++complete == o.nodes) {
        complete_ms = ms_since(start);
        io.stop();
      }
    };
    handlers.on_stop = [&](const StopOrder& s) {
      if (!steady || o.fail_at_s <= 0 || failed_at == Clock::time_point{}) {
        std::cerr << "unexpected stop: " << describe(s.root_cause) << "\n";
        ++bad;
        return io.stop();
      }
      if (++stopped == o.nodes) {
        fail_to_all_ms = ms_since(failed_at);
        io.stop();
      }
    };
    handlers.on_job_view = [&](const JobViewMsg&) { ++views; };
    handlers.on_heartbeat_ack = [&](std::chrono::microseconds rtt) {
      if (measuring) rtts_ms.push_back(static_cast<double>(rtt.count()) / 1000);
    };
    handlers.on_error = [&](const ClientError& e) {
      if (errors++ < 5) std::cerr << "agent error: " << e.message << "\n";
      if (!steady && assigned + errors >= o.nodes) io.stop();
    };
    clients.push_back(std::make_unique<Client>(io, std::move(config), std::move(handlers), logger));
  }
  std::function<void(std::size_t)> start_from = [&](std::size_t first) {
    const std::size_t end = std::min(clients.size(), first + static_cast<std::size_t>(std::max(1, o.start_batch)));
    for (std::size_t i = first; i < end; ++i) clients[i]->start();
    if (end < clients.size()) boost::asio::post(io, [&, end] { start_from(end); });
  };
  start = Clock::now();  // the first connect: building the clients is not counted
  start_from(0);
  const double limit = o.timeout_s + (steady ? o.steady_s + 30 : 0);
  io.run_for(milliseconds(static_cast<long long>(limit * 1000)));
  end_measuring();

  std::cout << "nodes=" << o.nodes << " assigned=" << assigned << " errors=" << errors << " bad=" << bad
            << " assign_ms=" << assign_ms;
  if (!steady) {
    std::cout << " complete=" << complete << " complete_ms=" << complete_ms << std::endl;
    return assigned == o.nodes && complete == o.nodes && bad == 0 ? 0 : 1;
  }
  const std::size_t beats = rtts_ms.size();
  const double p50 = percentile(rtts_ms, 0.50), p99 = percentile(rtts_ms, 0.99);
  const double max = rtts_ms.empty() ? 0 : *std::max_element(rtts_ms.begin(), rtts_ms.end());
  std::cout << " window_s=" << window_s << " heartbeats=" << beats << " hb_p50_ms=" << p50 << " hb_p99_ms=" << p99
            << " hb_max_ms=" << max << " statuses=" << statuses << " views=" << views
            << " server_cpu_pct=" << (cpu_s >= 0 && window_s > 0 ? 100 * cpu_s / window_s : -1)
            << " server_sys_pct=" << (sys_s >= 0 && window_s > 0 ? 100 * sys_s / window_s : -1)
            << " server_rss_kib=" << rss_max << " stopped=" << stopped << " fail_to_all_ms=" << fail_to_all_ms
            << std::endl;
  const bool told = o.fail_at_s <= 0 || stopped == o.nodes;
  return assigned == o.nodes && errors == 0 && bad == 0 && told && beats > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"simulated rendezvous agents"};
  Options o;
  app.add_option("--host", o.host);
  app.add_option("--port", o.port)->required();
  app.add_option("--nodes", o.nodes)->required();
  app.add_option("--nproc", o.nproc);
  app.add_option("--rdzv-id", o.run_id)->required();
  app.add_option("--token", o.token)->required();
  app.add_flag("--static-node-ranks", o.static_ranks);
  app.add_option("--timeout", o.timeout_s, "give up joining after this many seconds");
  app.add_option("--steady", o.steady_s, "hold the round this many seconds after every agent is placed (0: join only)");
  app.add_option("--warmup", o.warmup_s, "steady state: seconds before the measured window starts");
  app.add_option("--status-every", o.status_every_s, "steady state: seconds between an agent's statuses");
  app.add_option("--views-per-s", o.views_per_s, "steady state: live-view requests per second, job-wide");
  app.add_option("--fail-at", o.fail_at_s, "steady state: a worker fails this many seconds in (0: none)");
  app.add_option("--server-pid", o.server_pid, "read the server's CPU time and RSS from /proc");
  app.add_option("--start-batch", o.start_batch, "agents that connect per turn of the loop")->capture_default_str();
  app.add_flag("--spread-sources", o.spread_sources,
               "agent i connects from its own address in 127.0.0.0/8 (needed beyond ~28 000 agents)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (const std::string short_of = raise_open_files_for(o.nodes); !short_of.empty())
      throw ddprun::Error(short_of + " (ulimit -Hn, as root, up to /proc/sys/fs/nr_open)");
    return run(o);
  } catch (const ddprun::Error& e) {
    std::cerr << "ddprun-rdzv-loadgen: " << e.what() << "\n";
    return 1;
  }
}
