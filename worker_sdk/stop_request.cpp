#include "worker_sdk/stop_request.hpp"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

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
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    // Threads that already run (and do not block the signals) take them in this handler.
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGUSR1, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    // Every thread started from now on (Gloo's, LibTorch's pools) inherits the block, so a signal never
    // interrupts their system calls: poll and epoll_wait fail with EINTR even under SA_RESTART, and a
    // library that does not retry would turn a stop request into a crash. One thread takes them instead.
    ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread([set] {
      for (;;) {
        int signal = 0;
        if (::sigwait(&set, &signal) == 0) on_stop_signal(signal);
      }
    }).detach();
  });
}

bool stop_requested() { return g_request.load(std::memory_order_relaxed) >= 0; }

int stop_signal() {
  const int v = g_request.load(std::memory_order_relaxed);
  return v > 0 ? v : 0;
}

void request_stop(int signal) { on_stop_signal(signal); }

}  // namespace ddprun::sdk
