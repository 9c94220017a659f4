// Where the workers' output goes, a component of the agent in the manner of ChildReaper: for each worker
// stream, the console (common/console.hpp), a log file (a WriteQueue with a thread of its own,
// common/write_queue.hpp), both, or nowhere (--redirects, --tee, --local-ranks-filter); one OutputPump per
// stream on the loop; the streams of earlier rounds that still wait for room on a stalled console; the bound on
// a stream whose writer escaped the tree; log files that cannot be written; and, after the loop, the wait for
// what the log files and the console still hold. What was lost is counted for the summary.
//
// It owns the pumps, the log files and their failures; the agent owns the processes and asks "is the round's
// output drained?" (round_drained). Unit-tested with pipes and files, without workers, in
// tests/agent/output_routing_test.cpp.
#pragma once

#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent_config.hpp"
#include "agent/event_log.hpp"
#include "agent/output_pump.hpp"
#include "agent/stream_tail.hpp"
#include "agent/world.hpp"
#include "common/log.hpp"
#include "common/write_queue.hpp"

namespace ddprun::agent {

// Bytes queued for the console or a log file beyond which the workers' pipes are no longer read (they
// back-pressure the workers).
inline constexpr std::size_t kOutputHighWater = 4 << 20;

// The signals that, at the end, give up waiting for output a console or a file system does not take.
sigset_t stop_signals();

class OutputRouting {
 public:
  // `on_stream_end`: one of this round's streams reached its end (or was given up): the agent looks whether
  // the round is over. Called on the loop.
  OutputRouting(boost::asio::io_context& io, const AgentConfig& config, const World& world, Logger& log,
                EventLog& events, std::function<void()> on_stream_end);
  ~OutputRouting();
  OutputRouting(const OutputRouting&) = delete;
  OutputRouting& operator=(const OutputRouting&) = delete;

  // From here on the console's and the log files' threads may wake the loop (room again, a failed write).
  void start();

  // Where one stream of a local rank goes (kStdout or kStderr).
  struct Target {
    bool console = false;
    bool file = false;
    bool any() const { return console || file; }
  };
  Target target_of(int local_rank, int stream_bit) const;
  // The console prefix of a worker's lines (--prefix-format was checked at start-up).
  std::string prefix_of(int rank, int local_rank) const;
  // A started worker's stream: `read_fd` is its pipe's read end (taken over); `log_path` its log file when the
  // target keeps one (created by the file's writer thread, never on the loop).
  void add_stream(int rank, int local_rank, int stream_bit, int read_fd, Target target, const std::string& log_path);
  // The same worker took another rank (a re-form in place): its lines say so from now.
  void set_rank(int local_rank, int rank);

  // Every stream of this round ended; when `restart`, a stream that only waits for room on the console counts
  // as ended (it drains beside the next round), else the earlier rounds' streams must have ended too.
  bool round_drained(bool restart) const;
  // Every process is gone: a stream still open after kDrainLimit (a writer that escaped the tree through fd
  // passing) is given up. Streams waiting for room on the console are not stuck and are waited for.
  void arm_drain_limit();
  void cancel_drain_limit() { drain_timer_.cancel(); }
  // The round is over and the next begins: streams still waiting for the console drain beside it.
  void retire_round();
  // Something the end waits for does not move: a stream waiting for room, a log file's write that hangs.
  bool stalled() const;
  // A stop signal while only stalled output holds the end back: what waits is given up (and counted).
  void abandon_stalled(int signal);

  // After the loop: nothing is posted to it any more; the log files get what is queued for them unless a stop
  // signal comes (or the job was stopped by one and the file system hangs).
  void drain_files_after_loop(bool stopped_by_signal);
  // What ddprun writes last (the summary) reaches a console that stalls once it drains; a stop signal gives up.
  void drain_console();

  // For the summary: a worker's stderr's last bytes (null when it was not read), and what output was lost.
  const StreamTail* stderr_tail(int local_rank) const;
  std::vector<std::string> losses() const;

 private:
  std::shared_ptr<WriteQueue> open_log_queue(int rank, const std::string& path);
  void take_log_failures();
  void on_log_failure(int rank, const FileWriteFailure& f);
  void resume_waiting_pumps();
  std::function<void()> room_callback();
  bool any_pump_waiting_for_room() const;

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  const World& world_;
  Logger& log_;
  EventLog& events_;
  std::function<void()> on_stream_end_;
  boost::asio::steady_timer drain_timer_;
  PumpScratch scratch_;  // declared before the pumps: they hold a reference to it
  std::vector<std::unique_ptr<OutputPump>> pumps_;          // this round's streams
  std::vector<std::unique_ptr<OutputPump>> retired_pumps_;  // earlier rounds' streams waiting for the console
  std::map<int, std::shared_ptr<StreamTail>> stderr_tails_;  // local rank → its stderr's end
  std::vector<std::string> losses_;  // log files that could not be written
  struct LogFile {
    int rank;
    std::string path;
    std::shared_ptr<WriteQueue> queue;
  };
  std::vector<LogFile> log_files_;  // every round's, until the end (their last bytes may still be on the way)
  // Failures of log file writes, reported by the writer threads and taken on the loop (take_log_failures).
  struct LogFailures {
    std::mutex mu;
    std::vector<std::pair<int, FileWriteFailure>> pending;
    std::function<void()> wake;  // posts take_log_failures to the loop; cleared when the loop ends
  };
  std::shared_ptr<LogFailures> failures_ = std::make_shared<LogFailures>();
  int drained_fd_ = -1;  // an eventfd the log queues poke when empty (never closed: see drain_files_after_loop)
};

}  // namespace ddprun::agent
