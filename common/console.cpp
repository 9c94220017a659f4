#include "common/console.hpp"

#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "common/log.hpp"
#include "common/write_queue.hpp"

namespace ddprun::console {
namespace {

// Process-wide, never destroyed: a writer thread blocked on a stalled reader may outlive main's return.
struct Console {
  std::shared_ptr<WriteQueue> out;
  std::shared_ptr<WriteQueue> err;
  int drained_fd = -1;
};
Console* g_console = nullptr;

bool same_file(int a, int b) {
  struct stat sa {}, sb {};
  if (::fstat(a, &sa) != 0 || ::fstat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && sa.st_rdev == sb.st_rdev;
}

WriteQueue* channel_of(int fd) {
  if (g_console == nullptr) return nullptr;
  if (fd == 1) return g_console->out.get();
  if (fd == 2) return g_console->err.get();
  return nullptr;
}

}  // namespace

void start(std::size_t high_water) {
  if (g_console != nullptr) return;
  auto* c = new Console;
  c->drained_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  WriteQueue::Options options;
  options.high_water = high_water;
  options.drained_fd = c->drained_fd;
  c->out = WriteQueue::create(1, options);
  c->err = same_file(1, 2) ? c->out : WriteQueue::create(2, options);
  // Writer threads take no signal (WriteQueue::start): every signal stays for the agent's signalfd.
  c->out->start();
  if (c->err != c->out) c->err->start();
  g_console = c;
}

bool started() { return g_console != nullptr; }

void set_on_room(std::function<void()> on_room) {
  if (g_console == nullptr) return;
  g_console->out->set_on_room(on_room);
  if (g_console->err != g_console->out) g_console->err->set_on_room(on_room);
}

void write(int fd, std::string_view data) {
  if (WriteQueue* ch = channel_of(fd)) return ch->write(data);
  write_all(fd, data);
}

void write(int fd, Buffer&& data) {
  if (WriteQueue* ch = channel_of(fd)) return ch->write(std::move(data));
  write_all(fd, data.view());
}

bool congested(int fd) {
  WriteQueue* ch = channel_of(fd);
  return ch != nullptr && ch->congested();
}

bool drain(const sigset_t& interrupt) {
  if (g_console == nullptr) return true;
  const bool drained = wait_until_idle({g_console->out.get(), g_console->err.get()}, g_console->drained_fd, interrupt);
  if (!drained) abandon();
  return drained;
}

void settle() {
  if (g_console == nullptr) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
  auto settled = [](WriteQueue* ch) { return ch->idle() || ch->stalled(); };
  while (!(settled(g_console->out.get()) && settled(g_console->err.get())) &&
         std::chrono::steady_clock::now() < until)
    ::usleep(2000);
}

void abandon() {
  if (g_console == nullptr) return;
  g_console->out->abandon();
  g_console->err->abandon();
}

void abandon_stalled() {
  if (g_console == nullptr) return;
  for (WriteQueue* ch : {g_console->out.get(), g_console->err.get()})
    if (ch->stalled()) ch->abandon();
}

ChannelStats stats(int fd) {
  WriteQueue* ch = channel_of(fd);
  return ch != nullptr ? ch->stats() : ChannelStats{};
}

bool shared_channel() { return g_console != nullptr && g_console->out == g_console->err; }

std::string channel_name(int fd) {
  if (shared_channel()) return "stdout and stderr";
  return fd == 1 ? "stdout" : "stderr";
}

}  // namespace ddprun::console
