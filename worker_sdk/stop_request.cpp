#include "worker_sdk/stop_request.hpp"

#include <atomic>
#include <csignal>
#include <cstring>

namespace ddprun::sdk {
namespace {

// -1: no request; 0: requested by the program; > 0: the signal. std::atomic<int> is lock-free on every
// platform LibTorch supports, which is what makes storing to it from a handler safe.
std::atomic<int> g_request{-1};
static_assert(std::atomic<int>::is_always_lock_free, "the stop flag must be lock-free to be set from a signal handler");

extern "C" void on_stop_signal(int signal) {
  int none = -1;
  g_request.compare_exchange_strong(none, signal);  // the first request wins; later ones change nothing
}

}  // namespace

void enable_stop_request() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return g_request.load(std::memory_order_relaxed) >= 0; }

int stop_signal() {
  const int v = g_request.load(std::memory_order_relaxed);
  return v > 0 ? v : 0;
}

void request_stop(int signal) { on_stop_signal(signal); }

}  // namespace ddprun::sdk
