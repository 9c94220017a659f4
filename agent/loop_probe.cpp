#include "agent/loop_probe.hpp"

#include <time.h>

#include <algorithm>
#include <cstdlib>

namespace ddprun::agent {
namespace {
std::int64_t thread_cpu_ns() {
  timespec cpu{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  return std::int64_t{cpu.tv_sec} * 1'000'000'000 + cpu.tv_nsec;
}
long long micros(std::chrono::nanoseconds d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); }
}  // namespace

std::chrono::milliseconds LoopProbe::period_from_environment() {
  const char* text = std::getenv("DDPRUN_LOOP_PROBE_MS");
  return std::chrono::milliseconds(text == nullptr ? 0 : std::max(0, std::atoi(text)));
}

void LoopProbe::start(std::chrono::milliseconds period) {
  period_ = period;
  if (running()) arm();
}

void LoopProbe::record(std::chrono::nanoseconds late, std::int64_t cpu_ns) {
  const std::chrono::nanoseconds cpu_in_period(last_cpu_ns_ < 0 ? 0 : cpu_ns - last_cpu_ns_);
  if (late > max_late_) {
    max_late_ = late;
    cpu_at_max_ = cpu_in_period;
  }
  max_cpu_ = std::max(max_cpu_, cpu_in_period);
  last_cpu_ns_ = cpu_ns;
}

void LoopProbe::arm() {
  timer_.expires_after(period_);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || cancelled_) return;
    record(std::chrono::steady_clock::now() - timer_.expiry(), thread_cpu_ns());
    arm();
  });
}

std::string LoopProbe::report() const {
  return "event loop probe: longest lateness " + std::to_string(micros(max_late_)) +
         " us (the loop thread's CPU time in that period: " + std::to_string(micros(cpu_at_max_)) +
         " us); longest stretch of loop work: " + std::to_string(micros(max_cpu_)) + " us of CPU between two ticks";
}

}  // namespace ddprun::agent
