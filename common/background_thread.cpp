#include "common/background_thread.hpp"

#include <pthread.h>
#include <signal.h>

#include <memory>

#include "common/error.hpp"

namespace ddprun {

namespace {
void* run_body(void* arg) {
  std::unique_ptr<std::function<void()>> body(static_cast<std::function<void()>*>(arg));
  (*body)();
  return nullptr;
}
}  // namespace

void start_background_thread(const std::string& what, std::function<void()> body) {
  pthread_attr_t attr;
  ::pthread_attr_init(&attr);
  ::pthread_attr_setstacksize(&attr, kBackgroundThreadStack);
  ::pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old);  // inherited by the thread
  auto owned = std::make_unique<std::function<void()>>(std::move(body));
  pthread_t thread;
  const int err = ::pthread_create(&thread, &attr, run_body, owned.get());
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::pthread_attr_destroy(&attr);
  if (err != 0)
    throw SystemError("cannot start " + what + "'s thread (" + std::to_string(kBackgroundThreadStack / 1024) +
                          " KiB of stack; a limit on threads or address space, ulimit -u / -v?)",
                      err);
  owned.release();  // the thread owns it now
}

}  // namespace ddprun
