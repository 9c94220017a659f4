// ddprun-rendezvous: a rendezvous server on its own, for jobs too big to host on node 0's agent.
//
//   ddprun-rendezvous --rdzv-id ID --nnodes N[:M] [--host ADDR] [--port P] [--token-file F] [--munge] ...
// The token comes from --token, DDPRUN_TOKEN or --token-file. Exits when the job has ended and every agent
// has hung up: 0 when the job completed, 1 when it was stopped or timed out, 130/143 on SIGINT/SIGTERM.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "common/error.hpp"
#include "common/runtime_dir.hpp"
#include "common/timeouts.hpp"
#include "common/version.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/listener.hpp"
#include "rendezvous/munge_auth.hpp"
#include "rendezvous/remembered_round.hpp"
#include "rendezvous/server.hpp"
#include "rendezvous/text.hpp"

namespace {

using namespace ddprun;
using namespace ddprun::rendezvous;

constexpr int kUsageError = 64;  // sysexits EX_USAGE, as the launcher
constexpr int kUnavailable = 69;  // EX_UNAVAILABLE: --munge and munged does not answer, as the launcher

long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // KiB on Linux
}

void parse_nnodes(const std::string& text, JobConfig& config) {
  auto colon = text.find(':');
  try {
    config.min_nodes = std::stoi(text.substr(0, colon));
    config.max_nodes = colon == std::string::npos ? config.min_nodes : std::stoi(text.substr(colon + 1));
  } catch (const std::exception&) {
    throw UsageError("--nnodes must be N or MIN:MAX, not \"" + text + "\"", kUsageError);
  }
}

// The round a previous run of this server (same run id, same port, this machine) kept when it was stopped under
// a running job: its restart takes the round back only from the agents that held it (remembered_round.hpp).
std::optional<RememberedRound> remembered_round(const std::string& dir, const std::string& run_id, int port,
                                                Logger& logger) {
  const std::string path = remembered_round_path(dir, run_id, port);
  std::string problem;
  auto round = read_remembered_round(path, run_id, problem);
  if (!problem.empty()) logger.warning(problem);
  if (round)
    logger.info("this server ran round ", round->round.restart_count, " of run \"", run_id, "\" (",
                round->round.nnodes, " nodes) before it was restarted (", path,
                "): only the agents that held its places take them back");
  return round;
}

int run(int argc, char** argv) {
  CLI::App app{"ddprun's rendezvous server, on its own"};
  app.set_version_flag("--version", std::string("ddprun-rendezvous ") + kVersion);
  // Wide enough that every option's name and value stand two spaces clear of its text: the bash completion
  // (completions/ddprun.bash) reads the options from --help by that gap.
  app.get_formatter()->column_width(36);
  JobConfig config;
  // No agent of the job hosts this server: agents that lose it keep their workers and come back to it when
  // it is started again with the same settings (state_machine_resume.cpp).
  config.resumable = true;
  std::string host = kEveryAddress, nnodes = "1", token, token_file, port_file, log_level = "info", join_policy = "now";
  std::uint16_t port = 29400;
  double heartbeat_interval = timeouts::seconds_of(timeouts::kHeartbeatInterval),
         heartbeat_timeout = timeouts::seconds_of(timeouts::kHeartbeatTimeout), join_timeout = 900.0, last_call = 30.0,
         join_grace = 0.0,
         join_min_interval = 0.0, straggler_threshold = 30.0, straggler_window = 20.0,
         reconnect_grace = timeouts::seconds_of(config.reconnect_grace);
  app.add_option("--rdzv-id", config.run_id, "run id the agents must present")->required();
  app.add_option("--nnodes", nnodes, "expected nodes: N, or MIN:MAX for an elastic job");
  app.add_option("--host", host, "address to listen on (default: every address, IPv6 and IPv4; 0.0.0.0 for IPv4 only)")->capture_default_str();
  app.add_option("--port", port, "port to listen on (0 = a free port)")->capture_default_str();
  app.add_option("--token", token, "job token (prefer DDPRUN_TOKEN or --token-file)");
  app.add_option("--token-file", token_file, "file whose first line is the job token");
  app.add_flag("--static-node-ranks", config.static_node_ranks, "agents bring their node rank");
  app.add_flag("--munge", config.require_munge,
               "agents must also bring a MUNGE credential of this server's user (munged at DDPRUN_MUNGE_SOCKET, "
               "or libmunge's default socket)");
  app.add_option("--heartbeat-interval", heartbeat_interval, "seconds")->capture_default_str();
  app.add_option("--heartbeat-timeout", heartbeat_timeout, "seconds")->capture_default_str();
  app.add_option("--rdzv-timeout", join_timeout, "seconds to wait for every node")->capture_default_str();
  app.add_option("--join-grace", join_grace,
                 "fixed node count: a place still empty this long after the last node joined or left ends the "
                 "rendezvous (the nodes start together; 0: off)")
      ->capture_default_str();
  app.add_option("--rdzv-reconnect-timeout", reconnect_grace,
                 "hearing from no node at all, keep the round this long for them to reconnect (the agents' "
                 "--rdzv-reconnect-timeout; 0: judge them at the heartbeat timeout)")
      ->capture_default_str();
  app.add_option("--last-call", last_call, "elastic jobs: seconds to wait for more nodes after MIN")->capture_default_str();
  app.add_option("--max-departures", config.max_departures,
                 "elastic jobs: a host that left this many times is not admitted again")->capture_default_str();
  app.add_option("--join-policy", join_policy,
                 "elastic jobs: a late joiner re-forms the job now, or waits for a re-form at_failure")
      ->capture_default_str();
  app.add_option("--join-min-interval", join_min_interval,
                 "elastic jobs, --join-policy now: seconds a round runs before a join re-forms it")
      ->capture_default_str();
  app.add_option("--max-restarts", config.max_restarts, "restart rounds after worker failures");
  app.add_option("--straggler-threshold", straggler_threshold,
                 "percent above the other ranks' median pace that names a rank a straggler (0 = off)")
      ->capture_default_str();
  app.add_option("--straggler-window", straggler_window,
                 "seconds the agents measure paces over; named after half as long past the threshold")
      ->capture_default_str();
  app.add_option("--max-pending-connections", config.max_pending_connections,
                 "connections not yet joined held at once; beyond it the oldest is closed (0 = max(1024, 64 + 4 x nodes))")
      ->capture_default_str();
  app.add_option("--port-file", port_file, "write the listening port here once listening");
  app.add_option("--log-level", log_level, "debug|info|warning|error")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kUsageError;
  }

  LogLevel level = LogLevel::kInfo;
  if (!parse_log_level(log_level, level)) throw UsageError("unknown --log-level " + log_level, kUsageError);
  Logger logger(level, "ddprun-rendezvous", "");
  parse_nnodes(nnodes, config);
  const char* from_env = std::getenv("DDPRUN_TOKEN");
  token = given_token(token, token_file, from_env ? from_env : "");  // the order ddprun's agents use
  if (token.empty()) throw UsageError("no job token: pass --token-file, set DDPRUN_TOKEN, or --token", kUsageError);
  if (!token_file.empty())
    if (const std::string warning = token_file_warning(token_file); !warning.empty())
      logger.warning(warning.substr(9));  // "warning: " is the logger's
  config.token = token;
  if (config.require_munge) {
    if (const char* socket = std::getenv("DDPRUN_MUNGE_SOCKET")) config.munge_socket = socket;
    // Asked for and impossible: refuse to start rather than run a job that nobody can join.
    if (std::string why = munge_unavailable_reason(config.munge_socket); !why.empty())
      throw UsageError("--munge: " + why + " (start munged, or set DDPRUN_MUNGE_SOCKET to its socket)", kUnavailable);
  }
  auto ms = [](double seconds) { return std::chrono::milliseconds(static_cast<long long>(seconds * 1000)); };
  config.heartbeat_interval = ms(heartbeat_interval);
  config.heartbeat_timeout = ms(heartbeat_timeout);
  config.join_timeout = ms(join_timeout);
  config.join_grace = ms(join_grace);
  config.reconnect_grace = ms(reconnect_grace);
  config.last_call = ms(last_call);
  if (!parse_join_policy(join_policy, config.join_policy))
    throw UsageError("--join-policy '" + join_policy + "': expected " + kJoinPolicyValues, kUsageError);
  config.join_min_interval = ms(join_min_interval);
  config.stragglers.threshold = straggler_threshold / 100;
  config.stragglers.persist = ms(straggler_window / 2);
  try {
    validate(config);  // bad settings are a usage error, before anything listens
  } catch (const RendezvousError& e) {
    throw UsageError(e.what(), kUsageError);
  }

  if (const std::string short_of = raise_open_files_for(config.max_nodes); !short_of.empty())
    logger.warning(short_of, ": raise it (ulimit -n; the hard limit as root)");
  std::string round_dir_problem;
  const std::string round_dir = private_runtime_dir(round_dir_problem);
  if (port != 0 && !round_dir.empty()) config.remembered = remembered_round(round_dir, config.run_id, port, logger);
  boost::asio::io_context io;
  Server server(io, config, logger);
  server.start(host, port);
  const std::string round_file = round_dir.empty() ? "" : remembered_round_path(round_dir, config.run_id, server.port());
  if (round_dir.empty())
    logger.warning(round_dir_problem, "; a restart of this server will take the running round back from whichever "
                   "agents claim it first");
  else
    server.keep_rounds([&](const RememberedRound& round) {
      if (std::string problem; !write_remembered_round(round_file, config.run_id, round, problem))
        logger.warning(problem, "; a restart of this server will take the round back from whichever agents claim "
                       "it first");
    });
  if (!port_file.empty()) std::ofstream(port_file) << server.port() << "\n";

  int exit_code = 1;
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    logger.warning("stopping on signal ", sig);
    exit_code = 128 + sig;
    server.stop();
    io.stop();
  });
  server.async_wait_job_end([&] {
    if (!round_file.empty()) ::unlink(round_file.c_str());  // the job is over: nothing to take back
    // Let every agent read its last message before the listener goes away. A node judged lost for its silence
    // may have been cut off, not dead: it reconnects for its --rdzv-reconnect-timeout (the agents' value, which
    // this server's matches) and is told how the job ended, so that every node ends with the same root cause.
    // Only this process waits for it; the other nodes are gone.
    std::chrono::milliseconds wait = std::chrono::seconds(5);
    if (telling_the_silent(server.state()) && config.reconnect_grace > wait) {
      wait = config.reconnect_grace;
      logger.info("waiting up to ", text::seconds(wait), " for the node judged lost for its silence to come back "
                  "and hear how the job ended (a cut link may heal)");
    }
    server.async_wait_drained(wait, [&] {
      exit_code = server.phase() == Phase::kComplete ? 0 : 1;
      signals.cancel();
      server.stop();
      io.stop();
    });
  });
  io.run();
  logger.info("exiting with ", exit_code, "; peak RSS ", peak_rss_kib(), " KiB");
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ddprun::UsageError& e) {
    std::cerr << "ddprun-rendezvous: " << e.what() << "\n";
    return e.exit_code();
  } catch (const ddprun::Error& e) {
    std::cerr << "ddprun-rendezvous: " << e.what() << "\n";
    return 1;
  }
}
