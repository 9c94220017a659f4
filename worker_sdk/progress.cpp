#include "worker_sdk/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace ddprun::sdk {

bool stdout_is_terminal() {
  if (::isatty(STDOUT_FILENO) == 1) return true;
  const char* forwarded = std::getenv("DDPRUN_CONSOLE_TTY");
  return forwarded != nullptr && std::strcmp(forwarded, "1") == 0;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(std::llround(seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

std::string format_bar(std::int64_t epoch, std::int64_t epochs, std::int64_t step, std::int64_t steps, double loss,
                       double samples_per_s, double seconds_left) {
  constexpr int kCells = 10;
  const int filled = steps > 0 ? static_cast<int>(kCells * std::min(step, steps) / steps) : 0;
  std::string cells = std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kCells - filled), '.');
  char buf[160];
  std::snprintf(buf, sizeof buf, "epoch %lld/%lld [%s] %lld/%lld loss %.3f %.0f samples/s %s left",
                static_cast<long long>(epoch), static_cast<long long>(epochs), cells.c_str(),
                static_cast<long long>(step), static_cast<long long>(steps), loss, samples_per_s,
                format_duration(seconds_left).c_str());
  return buf;
}

std::string format_epoch_table(const std::vector<EpochRow>& rows) {
  std::string out = "epoch  train_loss  test_loss  accuracy  samples/s  seconds\n";
  char buf[128];
  for (const EpochRow& r : rows) {
    std::snprintf(buf, sizeof buf, "%5lld  %10.4f  %9.4f  %7.2f%%  %9.1f  %7.1f\n", static_cast<long long>(r.epoch),
                  r.train_loss, r.test_loss, r.accuracy, r.samples_per_s, r.seconds);
    out += buf;
  }
  return out;
}

Progress::Progress(bool enabled, bool terminal, std::int64_t epochs, std::int64_t total_steps,
                   std::int64_t samples_per_step, std::FILE* out)
    : enabled_(enabled),
      terminal_(terminal),
      epochs_(epochs),
      total_steps_(total_steps),
      samples_per_step_(samples_per_step),
      out_(out) {}

void Progress::begin_epoch(std::int64_t epoch, std::int64_t steps_in_epoch, std::int64_t first_step) {
  steps_before_epoch_ += step_ - first_step_;  // steps run in earlier epochs of this process
  epoch_ = epoch;
  steps_in_epoch_ = steps_in_epoch;
  first_step_ = step_ = last_log_step_ = first_step;
  smoothed_loss_ = -1;
  epoch_start_ = last_log_ = Clock::now();
  last_draw_ = Clock::time_point{};
}

double Progress::rate(Clock::time_point since, std::int64_t steps) const {
  const double secs = std::chrono::duration<double>(Clock::now() - since).count();
  return secs > 0 ? static_cast<double>(steps * samples_per_step_) / secs : 0.0;
}

void Progress::step(std::int64_t step, double local_loss) {
  step_ = step;
  if (!enabled_ || !terminal_) return;
  // A moving average over ~20 steps: one rank's loss of one batch jumps too much to read.
  smoothed_loss_ = smoothed_loss_ < 0 ? local_loss : 0.95 * smoothed_loss_ + 0.05 * local_loss;
  const auto now = Clock::now();
  if (now - last_draw_ >= std::chrono::milliseconds(100)) draw(now, '\r');
}

void Progress::draw(Clock::time_point now, char end) {
  last_draw_ = now;
  const double samples_per_s = rate(epoch_start_, step_ - first_step_);
  const std::int64_t done = steps_before_epoch_ + (step_ - first_step_);
  const std::int64_t left = total_steps_ - done;
  const double secs_left = samples_per_s > 0 ? static_cast<double>(left * samples_per_step_) / samples_per_s : -1;
  std::string bar = format_bar(epoch_, epochs_, step_, steps_in_epoch_, smoothed_loss_, samples_per_s, secs_left);
  // Padding: a shorter redraw must cover the end of the longer one before it.
  if (bar.size() < 70) bar.append(70 - bar.size(), ' ');
  std::fprintf(out_, "%s%c", bar.c_str(), end);
  std::fflush(out_);
}

double Progress::log(std::int64_t step, double mean_loss, double lr) {
  const double samples_per_s = rate(last_log_, step - last_log_step_);
  last_log_ = Clock::now();
  last_log_step_ = step;
  if (!enabled_ || terminal_) return samples_per_s;
  const std::int64_t done = steps_before_epoch_ + (step - first_step_);
  const double secs_left = samples_per_s > 0
                               ? static_cast<double>((total_steps_ - done) * samples_per_step_) / samples_per_s
                               : -1;
  std::fprintf(out_, "train epoch %lld step %lld/%lld loss %.4f throughput %.1f samples/s lr %.4f eta %s\n",
               static_cast<long long>(epoch_), static_cast<long long>(step), static_cast<long long>(steps_in_epoch_),
               mean_loss, samples_per_s, lr, format_duration(secs_left).c_str());
  std::fflush(out_);
  return samples_per_s;
}

void Progress::end_epoch(double& samples_per_s, double& seconds) {
  samples_per_s = rate(epoch_start_, step_ - first_step_);
  seconds = std::chrono::duration<double>(Clock::now() - epoch_start_).count();
  if (!enabled_ || !terminal_) return;
  draw(Clock::now(), '\n');  // the bar's final state stays on screen
}

}  // namespace ddprun::sdk
