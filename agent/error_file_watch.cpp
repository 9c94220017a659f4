#include "agent/error_file_watch.hpp"

#include "common/process/process_tree.hpp"
#include "common/timeouts.hpp"

#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ddprun::agent {
namespace {
std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dir_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// When the file was last written (ns since the epoch; 0 when it cannot be read).
std::int64_t written_ns(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// The time `pid` has spent runnable but waiting for a CPU, in ns (/proc/PID/schedstat's second field); -1 when
// it cannot be read (no such process, a kernel without scheduler statistics).
std::int64_t run_delay_ns(pid_t pid) {
  const std::string text = process::read_file("/proc/" + std::to_string(pid) + "/schedstat", 128);
  unsigned long long on_cpu = 0, waited = 0;
  if (std::sscanf(text.c_str(), "%llu %llu", &on_cpu, &waited) != 2) return -1;
  return static_cast<std::int64_t>(waited);
}
}  // namespace

ErrorFileWatch::ErrorFileWatch(boost::asio::io_context& io, Host host)
    : io_(io), host_(std::move(host)), inotify_(io), start_timer_(io) {}

ErrorFileWatch::~ErrorFileWatch() { cancel(); }

// Closing an inotify descriptor waits until the kernel has freed its watches (an SRCU grace period: 6-20 ms
// measured here, in steps of the scheduler's tick), so one descriptor serves every round: a round's watches are
// removed (freed in the background) and the next round's added; only the job's end closes it.
void ErrorFileWatch::close_descriptor() {
  boost::system::error_code ignored;
  if (inotify_.is_open()) inotify_.close(ignored);
  local_rank_of_watch_.clear();
}

void ErrorFileWatch::remove_watches() {
  if (inotify_.is_open())
    for (const auto& [wd, lr] : local_rank_of_watch_) ::inotify_rm_watch(inotify_.native_handle(), wd);
  local_rank_of_watch_.clear();
}

void ErrorFileWatch::watch(const std::vector<std::string>& error_files, std::chrono::milliseconds after) {
  remove_watches();
  graces_.clear();
  files_ = error_files;
  handed_.assign(error_files.size(), false);
  ++round_;
  start_timer_.expires_after(after);
  // A timer that has expired cannot be cancelled: its handler may already be queued when cancel() comes (the
  // job's end in the same turn of the loop), and would open a descriptor nobody closes, keeping the loop alive
  // for good. The handler checks that its round is still the one being watched.
  start_timer_.async_wait([this, round = round_](const boost::system::error_code& ec) {
    if (ec || round != round_ || !start_watching()) return;
    // Written before the watch (read here in local-rank order; on_timer hands them over in the order written).
    for (std::size_t lr = 0; lr < files_.size(); ++lr) check(static_cast<int>(lr));
  });
}

bool ErrorFileWatch::start_watching() {
  if (!inotify_.is_open()) {
    const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) return false;  // a per-user instance limit reached: the exits end the job, as before
    inotify_.assign(fd);
    wait_readable();
  }
  const int fd = inotify_.native_handle();
  for (std::size_t lr = 0; lr < files_.size(); ++lr) {
    // A file written in place closes after its last write; one written elsewhere and renamed in arrives whole.
    const int wd = ::inotify_add_watch(fd, dir_name(files_[lr]).c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_ONLYDIR);
    if (wd < 0) {  // a per-user watch limit reached: as without inotify
      remove_watches();
      return false;
    }
    local_rank_of_watch_[wd] = static_cast<int>(lr);
  }
  return true;
}

void ErrorFileWatch::wait_readable() {
  inotify_.async_wait(boost::asio::posix::descriptor_base::wait_read, [this](const boost::system::error_code& ec) {
    if (ec || !inotify_.is_open()) return;
    read_events();
    if (inotify_.is_open()) wait_readable();
  });
}

void ErrorFileWatch::read_events() {
  alignas(inotify_event) char buf[16 * 1024];
  std::vector<int> written;
  for (;;) {
    const ssize_t n = ::read(inotify_.native_handle(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: every queued event read
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      // IN_Q_OVERFLOW (wd -1) lost events: the exits still end the job.
      const auto it = local_rank_of_watch_.find(e->wd);
      if (it == local_rank_of_watch_.end() || e->len == 0) continue;
      if (std::strcmp(e->name, base_name(files_[static_cast<std::size_t>(it->second)]).c_str()) == 0)
        written.push_back(it->second);
    }
  }
  for (int lr : written) check(lr);
}

void ErrorFileWatch::check(int local_rank) {
  const auto i = static_cast<std::size_t>(local_rank);
  if (handed_[i]) return;
  supervision::ErrorFileContents contents = supervision::read_error_file(files_[i]);
  if (!contents.whole) return;  // cut short: the worker's exit decides
  handed_[i] = true;
  const pid_t pid = host_.raiser_pid(local_rank);
  if (pid <= 0) return;
  auto grace = std::make_unique<Grace>(io_);
  grace->pid = pid;
  grace->since = std::chrono::steady_clock::now();
  grace->run_delay_at_start = run_delay_ns(pid);
  grace->written_ns = written_ns(files_[i]);
  grace->contents = std::move(contents);
  graces_[local_rank] = std::move(grace);
  arm(local_rank, timeouts::kRaisedExitGrace);
}

void ErrorFileWatch::arm(int local_rank, std::chrono::nanoseconds after) {
  Grace& g = *graces_.at(local_rank);
  g.timer.expires_after(after);
  g.timer.async_wait([this, local_rank](const boost::system::error_code& ec) {
    if (!ec) on_timer(local_rank);
  });
}

std::chrono::nanoseconds ErrorFileWatch::own_time(std::chrono::nanoseconds wall,
                                                  std::chrono::nanoseconds waited_for_cpu) {
  if (waited_for_cpu <= std::chrono::nanoseconds::zero()) return wall;
  return waited_for_cpu >= wall ? std::chrono::nanoseconds::zero() : wall - waited_for_cpu;
}

void ErrorFileWatch::on_timer(int local_rank) {
  const auto it = graces_.find(local_rank);
  if (it == graces_.end()) return;
  Grace& g = *it->second;
  const auto wall = std::chrono::steady_clock::now() - g.since;
  const std::int64_t delay_now = g.run_delay_at_start < 0 ? -1 : run_delay_ns(g.pid);
  const std::chrono::nanoseconds waited{delay_now < 0 ? 0 : delay_now - g.run_delay_at_start};
  const auto own = own_time(wall, waited);
  if (own < timeouts::kRaisedExitGrace && wall < timeouts::kRaisedExitGraceLimit) {
    // It waited for a CPU for part of its grace: the rest of its own time, within the limit.
    const std::chrono::nanoseconds left = timeouts::kRaisedExitGrace - own;
    return arm(local_rank, std::min<std::chrono::nanoseconds>(left, timeouts::kRaisedExitGraceLimit - wall));
  }
  // A raiser whose file came earlier failed first, whatever its grace's timer says (it waited for a CPU longer, or
  // its file was read in the same turn): it is handed over first, so the job's root cause is the first failure,
  // not a peer that raised because of it (issue 32: "root cause: rank 0 ... Connection closed by peer").
  std::vector<std::pair<std::int64_t, int>> earlier;
  for (const auto& [lr, other] : graces_)
    if (lr != local_rank && other->written_ns < g.written_ns) earlier.emplace_back(other->written_ns, lr);
  std::sort(earlier.begin(), earlier.end());
  earlier.emplace_back(g.written_ns, local_rank);
  for (const auto& [when, lr] : earlier) {
    const auto found = graces_.find(lr);
    if (found == graces_.end()) continue;  // ended by an earlier one's hand-over (its exit was reaped meanwhile)
    const supervision::ErrorFileContents contents = std::move(found->second->contents);
    graces_.erase(found);
    host_.on_grace_over(lr, contents);
  }
}

void ErrorFileWatch::on_exit(int local_rank) {
  graces_.erase(local_rank);
  // Its watch goes now: the kernel frees it in the background, instead of in the close at the job's end.
  for (auto it = local_rank_of_watch_.begin(); it != local_rank_of_watch_.end(); ++it)
    if (it->second == local_rank) {
      ::inotify_rm_watch(inotify_.native_handle(), it->first);
      local_rank_of_watch_.erase(it);
      return;
    }
}

void ErrorFileWatch::cancel() {
  ++round_;  // a start already queued does nothing
  start_timer_.cancel();
  close_descriptor();
  graces_.clear();  // each timer's destructor cancels its wait
}

}  // namespace ddprun::agent
