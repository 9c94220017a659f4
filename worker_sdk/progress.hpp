// Progress of a training loop on rank 0's stdout, in one of two forms:
// - terminal: one bar redrawn in place, ended by '\r' at each redraw and by '\n' at the end of the epoch:
//     epoch 2/4 [######....] 312/469 loss 0.412 2510 samples/s 1:23 left
//   Under ddprun a worker's stdout is a pipe; ddprun passes '\r'-terminated pieces through with the rank
//   prefix (agent/line_framer.hpp) and sets DDPRUN_CONSOLE_TTY=1 when that pipe ends on a terminal, so the
//   bar redraws as "[rank0]: epoch 2/4 [...]" on one line. About 65 columns for the usual sizes (padded to
//   70), so that with the prefix it does not wrap on an 80-column terminal: a wrapped line cannot be redrawn
//   with '\r'.
// - otherwise (a log file, CI): one line every N steps (the loop calls log()),
//     train epoch 2 step 300/469 loss 0.4120 throughput 2510.3 samples/s lr 0.0812 eta 1:23
// and at the end a table of the epochs (epoch, train loss, test loss, accuracy, samples/s, seconds).
// Plain C++ (no LibTorch).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ddprun::sdk {

// True when stdout is a terminal, or a pipe that ddprun forwards to a terminal (DDPRUN_CONSOLE_TTY=1).
bool stdout_is_terminal();

struct EpochRow {
  std::int64_t epoch = 0;
  double train_loss = 0, test_loss = 0, accuracy = 0;  // accuracy in percent
  double samples_per_s = 0, seconds = 0;
};

// The end-of-training table, one row per epoch, with a header line.
std::string format_epoch_table(const std::vector<EpochRow>& rows);
// "1:23" (minutes:seconds), "1:02:03" past an hour, "?" when not finite or negative.
std::string format_duration(double seconds);
// The terminal bar's text, without the '\r'.
std::string format_bar(std::int64_t epoch, std::int64_t epochs, std::int64_t step, std::int64_t steps, double loss,
                       double samples_per_s, double seconds_left);

class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  // `samples_per_step`: the global batch (per-rank batch × world size). `total_steps`: optimizer steps of
  // the whole run, for the time left. `enabled` false (ranks other than 0): every call does nothing.
  Progress(bool enabled, bool terminal, std::int64_t epochs, std::int64_t total_steps, std::int64_t samples_per_step,
           std::FILE* out = stdout);

  // `first_step`: steps of this epoch already done (a run resumed mid-epoch).
  void begin_epoch(std::int64_t epoch, std::int64_t steps_in_epoch, std::int64_t first_step = 0);
  // After each optimizer step (`step` counts from 1 within the epoch), with this rank's loss: the bar
  // shows its moving average, redrawn at most every 0.1 s.
  void step(std::int64_t step, double local_loss);
  // Every N steps (the caller's choice), with the loss averaged over the ranks: the log line (not on a terminal).
  // Returns the throughput since the previous log() (or the epoch's start), in samples/s.
  double log(std::int64_t step, double mean_loss, double lr);
  // Ends the bar's line; returns the epoch's training throughput and seconds (for the table row).
  void end_epoch(double& samples_per_s, double& seconds);

  bool terminal() const { return terminal_; }

 private:
  double rate(Clock::time_point since, std::int64_t steps) const;
  void draw(Clock::time_point now, char end);

  bool enabled_, terminal_;
  std::int64_t epochs_, total_steps_, samples_per_step_;
  std::FILE* out_;
  std::int64_t epoch_ = 0, steps_in_epoch_ = 0, first_step_ = 0, step_ = 0, steps_before_epoch_ = 0;
  std::int64_t last_log_step_ = 0;
  double smoothed_loss_ = -1;
  Clock::time_point epoch_start_, last_log_, last_draw_;
};

}  // namespace ddprun::sdk
