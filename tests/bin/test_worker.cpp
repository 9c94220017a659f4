// A worker for ddprun's integration tests and benchmarks: runs a list of steps, each optionally only on
// one rank (RANK from the environment) and/or only in a worker started before a file existed.
//
//   test_worker [@RANK:][?PATH:]STEP ...   "?PATH:" runs STEP only if PATH (no ':' in it) did not exist when
//                                          this worker started: e.g. only in the first attempt of a restarted
//                                          job, whatever TORCHELASTIC_RESTART_COUNT says (torchrun 1.13 leaves
//                                          it at 0 on nodes that restart for another node's failure)
//   exit=N         exit with code N                 kill=SIG     raise SIG (default action restored first;
//                                                                kill=STOP stops us until SIGCONT/SIGKILL)
//   sleep=SEC      sleep (fractions allowed)        hang         sleep until a signal kills us
//   ignore=SIG     ignore SIG from now on           trap=SIG     on SIG print "rank R got SIGNAME", exit 0
//   print=TEXT     print TEXT and a newline         partial=TEXT print TEXT with no newline
//   eprint=TEXT    the same on stderr               lines=N      print N numbered lines "rank R line I"
//   flood=BYTES    write BYTES of 100-byte lines    binary=N     write bytes 0..255 N times
//   env=NAME       print "NAME=value" (or "NAME unset")
//   pidfile=PATH   append "rank pid pgid" to PATH   ready=DIR    create DIR/ready.RANK (tests wait for it)
//                  (children started later by fork= append their own line too, after the worker's: the
//                  first line of a rank is the worker's)
//   fork=KIND[:N]  start N (default 1) children that sleep forever: KIND "group" stays in our process group,
//                  "setsid" leaves it (a new session), "orphan" double-forks so it is re-parented, "daemon"
//                  double-forks, calls setsid and ignores SIGTERM/SIGINT/SIGHUP/SIGQUIT: only SIGKILL ends it.
//                  The step returns once every child is set up (own session, signals, pidfile line written).
//   sigrecord=PATH from now on append "<pid> <rank> <SIGNAME>" to PATH for every SIGTERM, SIGINT, SIGHUP,
//                  SIGQUIT, SIGUSR1 and SIGUSR2 this process (and every child forked later) receives; the
//                  process goes on running: without termexit= nothing but SIGKILL ends it
//   termexit=SEC   on the first SIGTERM/SIGINT/SIGHUP/SIGQUIT, _exit(128+sig) SEC seconds later (a second
//                  signal within SEC is still recorded); forked children inherit it, daemons do not. Without
//                  sigrecord= the same, minus the record (SIGUSR1/SIGUSR2 are then ignored)
//   termsave=SEC   the same, but _exit(0): a worker that saves a checkpoint for SEC seconds on a stop request
//   errorfile=MSG  write MSG to TORCHELASTIC_ERROR_FILE in torchelastic's JSON format
//   errortext=TEXT write TEXT as it is to TORCHELASTIC_ERROR_FILE (a file cut short, say)
//   waitfile=PATH  wait until PATH exists
//   beat=STEP      one heartbeat carrying STEP (DDPRUN_HEARTBEAT_FD/_OFFSET; nothing when they are unset)
//   beatfor=SEC[:MS[:WORK]] a heartbeat every MS (default 50) milliseconds for SEC seconds, steps 0, 1, 2, ...;
//                  with WORK, each step says WORK ms of its own work (the slot's +24) before it beats
//   beatstamp=PATH one heartbeat (step 0), then its CLOCK_MONOTONIC nanoseconds written to PATH (benchmarks)
//   quiet=SEC      open a quiet phase of at most SEC seconds (a beat; 0 closes the phase)
//   spin           a busy loop that never ends and never beats (a hang that burns a core)
//   stamp=PATH     append "<rank> <TORCHELASTIC_RESTART_COUNT> <pid> <CLOCK_REALTIME ns>" to PATH in one
//                  write (benchmarks)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace {
int g_rank = 0;
int g_attempt = 0;  // TORCHELASTIC_RESTART_COUNT
std::string g_pidfile;  // set by pidfile=: forked children append their own line to it

// sigrecord= / termexit= state, read by the signal handler (hence plain ints, set before handlers run).
int g_record_fd = -1;                     // sigrecord's file, O_APPEND so lines of many processes never mix
volatile std::sig_atomic_t g_termexit_ms = -1;  // -1: stopping signals are recorded and otherwise ignored
volatile std::sig_atomic_t g_exit_signal = 0;   // the first stopping signal, once termexit is counting down
volatile std::sig_atomic_t g_never_exit = 0;    // daemons: record, but only SIGKILL ends them
volatile std::sig_atomic_t g_termsave = 0;      // termsave=: the countdown ends with exit 0, not 128+sig
bool g_handlers_installed = false;

const int kRecordedSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

int signal_number(const std::string& s) {
  if (std::isdigit(static_cast<unsigned char>(s[0]))) return std::atoi(s.c_str());
  static const struct { const char* n; int v; } names[] = {{"TERM", SIGTERM}, {"INT", SIGINT}, {"KILL", SIGKILL},
      {"HUP", SIGHUP}, {"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"SEGV", SIGSEGV},
      {"ABRT", SIGABRT}, {"PIPE", SIGPIPE}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}, {"BUS", SIGBUS},
      {"FPE", SIGFPE}, {"ALRM", SIGALRM}};
  std::string n = s.rfind("SIG", 0) == 0 ? s.substr(3) : s;
  for (const auto& e : names)
    if (n == e.n) return e.v;
  std::fprintf(stderr, "test_worker: unknown signal %s\n", s.c_str());
  std::exit(2);
}

void write_out(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;  // a recorded signal arrived mid-write: go on writing
    if (n <= 0) std::exit(3);
    done += static_cast<size_t>(n);
  }
}

extern "C" void on_trap(int sig) {
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "rank %d got %s\n", g_rank, strsignal(sig));
  ssize_t ignored = ::write(1, buf, static_cast<size_t>(n));
  (void)ignored;
  ::_exit(0);
}

// Async-signal-safe formatting for the handler: no stdio, no allocation.
void append_text(char* buf, size_t& n, size_t cap, const char* text) {
  while (*text && n < cap) buf[n++] = *text++;
}

void append_number(char* buf, size_t& n, size_t cap, long v) {
  char digits[24];
  size_t d = 0;
  const bool negative = v < 0;
  unsigned long u = negative ? 0UL - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
  do {
    digits[d++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (negative && n < cap) buf[n++] = '-';
  while (d > 0 && n < cap) buf[n++] = digits[--d];
}

const char* recorded_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "SIG?";
  }
}

extern "C" void on_termexit_alarm(int) { ::_exit(g_termsave ? 0 : 128 + g_exit_signal); }

extern "C" void on_recorded_signal(int sig) {
  const int saved_errno = errno;
  if (g_record_fd >= 0) {
    // One write() of one whole line on an O_APPEND file: lines from many processes never interleave.
    char line[64];
    size_t n = 0;
    append_number(line, n, sizeof line, static_cast<long>(::getpid()));
    append_text(line, n, sizeof line, " ");
    append_number(line, n, sizeof line, g_rank);
    append_text(line, n, sizeof line, " ");
    append_text(line, n, sizeof line, recorded_name(sig));
    append_text(line, n, sizeof line, "\n");
    ssize_t ignored = ::write(g_record_fd, line, n);
    (void)ignored;
  }
  const bool stopping = sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
  if (stopping && g_termexit_ms >= 0 && !g_never_exit && g_exit_signal == 0) {
    g_exit_signal = sig;
    if (g_termexit_ms == 0) ::_exit(g_termsave ? 0 : 128 + sig);
    // setitimer is a plain system call (safe here); the timer is per process, so each forked child counts
    // down on its own first signal.
    struct itimerval t {};
    t.it_value.tv_sec = g_termexit_ms / 1000;
    t.it_value.tv_usec = static_cast<suseconds_t>(g_termexit_ms % 1000) * 1000;
    ::setitimer(ITIMER_REAL, &t, nullptr);
  }
  errno = saved_errno;
}

void install_recording_handlers() {
  if (g_handlers_installed) return;
  g_handlers_installed = true;
  struct sigaction sa {};
  sa.sa_handler = on_recorded_signal;
  // SA_RESTART: a recorded signal must not turn a write or a wait into an error; the other recorded signals
  // are blocked while one is handled so the handler's state changes stay simple.
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : kRecordedSignals) sigaddset(&sa.sa_mask, s);
  for (int s : kRecordedSignals) ::sigaction(s, &sa, nullptr);
  struct sigaction alarm {};
  alarm.sa_handler = on_termexit_alarm;
  sigemptyset(&alarm.sa_mask);
  ::sigaction(SIGALRM, &alarm, nullptr);
}

void sleep_forever() {
  for (;;) ::pause();
}

void append_pidfile_line(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "a");
  if (!f) return;
  std::fprintf(f, "%d %d %d\n", g_rank, static_cast<int>(::getpid()), static_cast<int>(::getpgrp()));
  std::fclose(f);
}

// Starts one child of `kind` and returns once it is set up: the child (or, for "orphan" and "daemon", the
// grandchild) writes one byte on a pipe when its session, signal dispositions and pidfile line are in
// place, so a later ready= step means every child can be found and behaves as asked.
void start_child(const std::string& kind) {
  int sync[2];
  if (::pipe2(sync, O_CLOEXEC) != 0) std::exit(4);
  const bool double_fork = kind == "orphan" || kind == "daemon";
  pid_t pid = ::fork();
  if (pid < 0) std::exit(4);
  if (pid != 0) {
    ::close(sync[1]);
    char byte;
    while (::read(sync[0], &byte, 1) < 0 && errno == EINTR) {
    }
    ::close(sync[0]);
    if (double_fork) ::waitpid(pid, nullptr, 0);
    return;
  }
  ::close(sync[0]);
  if (kind == "setsid") ::setsid();
  if (double_fork) {
    if (::fork() != 0) ::_exit(0);  // the grandchild is re-parented to the nearest subreaper
    ::setsid();
  }
  if (kind == "daemon") {
    if (g_handlers_installed) {
      g_never_exit = 1;  // keeps recording what it gets, but nothing short of SIGKILL ends it
    } else {
      for (int s : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) std::signal(s, SIG_IGN);
    }
  }
  if (!g_pidfile.empty()) append_pidfile_line(g_pidfile);
  const char byte = 1;
  while (::write(sync[1], &byte, 1) < 0 && errno == EINTR) {
  }
  ::close(sync[1]);
  sleep_forever();
}

// The heartbeat slot, as README "Hang detection" describes it: int64 step at +0, int64 CLOCK_MONOTONIC
// nanoseconds at +8 (written last), the end of a quiet phase at +16, the work so far at +24. Written by hand, as a program without
// the SDK would.
std::int64_t* heartbeat_slot() {
  static std::int64_t* slot = [] {
    const char* fd = std::getenv("DDPRUN_HEARTBEAT_FD");
    const char* off = std::getenv("DDPRUN_HEARTBEAT_OFFSET");
    if (!fd || !off) return static_cast<std::int64_t*>(nullptr);
    const long offset = std::atol(off);
    const long page = ::sysconf(_SC_PAGESIZE);
    void* p = ::mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_WRITE, MAP_SHARED, std::atoi(fd),
                     offset / page * page);
    if (p == MAP_FAILED) { std::perror("test_worker: mmap heartbeat"); std::exit(2); }
    return reinterpret_cast<std::int64_t*>(static_cast<char*>(p) + offset % page);
  }();
  return slot;
}

std::int64_t monotonic_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::int64_t beat(long long step) {
  std::int64_t* slot = heartbeat_slot();
  const std::int64_t now = monotonic_now();
  if (!slot) return now;
  __atomic_store_n(&slot[0], static_cast<std::int64_t>(step), __ATOMIC_RELAXED);
  __atomic_store_n(&slot[1], now, __ATOMIC_RELEASE);
  return now;
}

// Never inlined: the hang tests look for this frame in a captured stack.
__attribute__((noinline)) void run_step(const std::string& step) {
  const auto eq = step.find('=');
  const std::string verb = step.substr(0, eq);
  const std::string arg = eq == std::string::npos ? "" : step.substr(eq + 1);
  if (verb == "exit") std::exit(std::atoi(arg.c_str()));
  if (verb == "kill") {
    std::signal(signal_number(arg), SIG_DFL);
    ::raise(signal_number(arg));
    sleep_forever();
  }
  if (verb == "sleep") {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg.c_str())));
  } else if (verb == "hang") {
    sleep_forever();
  } else if (verb == "ignore") {
    std::signal(signal_number(arg), SIG_IGN);
  } else if (verb == "trap") {
    std::signal(signal_number(arg), on_trap);
  } else if (verb == "print") {
    write_out(1, arg + "\n");
  } else if (verb == "eprint") {
    write_out(2, arg + "\n");
  } else if (verb == "partial") {
    write_out(1, arg);
  } else if (verb == "lines") {
    const long n = std::atol(arg.c_str());
    std::string buf;
    for (long i = 0; i < n; ++i) {
      buf += "rank " + std::to_string(g_rank) + " line " + std::to_string(i) + "\n";
      if (buf.size() > 60000) { write_out(1, buf); buf.clear(); }
    }
    write_out(1, buf);
  } else if (verb == "flood") {
    const long long total = std::atoll(arg.c_str());
    std::string chunk;
    char line[128];
    long long written = 0, i = 0;
    while (written < total) {
      int n = std::snprintf(line, sizeof line, "rank %d step %lld loss %.6f lr %.6f throughput %.2f samples/s %s\n",
                            g_rank, i, 1.0 / static_cast<double>(i + 1), 0.01, 1234.5 + static_cast<double>(i % 100),
                            "................");
      chunk.append(line, static_cast<size_t>(n));
      written += n;
      ++i;
      if (chunk.size() >= 65536) { write_out(1, chunk); chunk.clear(); }
    }
    write_out(1, chunk);
  } else if (verb == "binary") {
    std::string bytes;
    for (int r = 0; r < std::atoi(arg.c_str()); ++r)
      for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
    write_out(1, bytes);
  } else if (verb == "env") {
    const char* v = std::getenv(arg.c_str());
    write_out(1, v ? arg + "=" + v + "\n" : arg + " unset\n");
  } else if (verb == "pidfile") {
    g_pidfile = arg;
    append_pidfile_line(arg);
  } else if (verb == "ready") {
    const std::string path = arg + "/ready." + std::to_string(g_rank);
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {  // said, not a crash: a test that made DIR too late reads why
      std::fprintf(stderr, "test_worker: ready=%s: cannot create %s: %s\n", arg.c_str(), tmp.c_str(),
                   std::strerror(errno));
      std::exit(99);
    }
    std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  } else if (verb == "fork") {
    const auto colon = arg.find(':');
    const int count = colon == std::string::npos ? 1 : std::atoi(arg.c_str() + colon + 1);
    const std::string kind = arg.substr(0, colon);
    if (kind != "group" && kind != "setsid" && kind != "orphan" && kind != "daemon") {
      std::fprintf(stderr, "test_worker: unknown fork kind %s\n", kind.c_str());
      std::exit(2);
    }
    for (int i = 0; i < count; ++i) start_child(kind);
  } else if (verb == "sigrecord") {
    if (g_record_fd >= 0) ::close(g_record_fd);
    g_record_fd = ::open(arg.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (g_record_fd < 0) {
      std::fprintf(stderr, "test_worker: cannot open %s: %s\n", arg.c_str(), std::strerror(errno));
      std::exit(2);
    }
    install_recording_handlers();
  } else if (verb == "termexit" || verb == "termsave") {
    g_termexit_ms = static_cast<std::sig_atomic_t>(std::atof(arg.c_str()) * 1000.0);
    g_termsave = verb == "termsave";
    install_recording_handlers();
  } else if (verb == "errorfile") {
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (path) {
      FILE* f = std::fopen(path, "w");
      std::fprintf(f, "{\"message\": {\"message\": \"%s\", \"extraInfo\": {\"py_callstack\": \"test_worker\", "
                   "\"timestamp\": \"%ld\"}}}\n", arg.c_str(), static_cast<long>(std::time(nullptr)));
      std::fclose(f);
    }
  } else if (verb == "errortext") {
    if (const char* path = std::getenv("TORCHELASTIC_ERROR_FILE")) {
      FILE* f = std::fopen(path, "w");
      std::fputs(arg.c_str(), f);
      std::fclose(f);
    }
  } else if (verb == "beat") {
    beat(std::atoll(arg.c_str()));
  } else if (verb == "quiet") {  // quiet=SEC: a quiet phase of at most SEC from now (0: ends it), then a beat
    const double secs = std::atof(arg.c_str());
    if (std::int64_t* slot = heartbeat_slot()) {
      const std::int64_t now = monotonic_now();
      __atomic_store_n(&slot[2], secs > 0 ? now + static_cast<std::int64_t>(secs * 1e9) : 0, __ATOMIC_RELAXED);
      __atomic_store_n(&slot[1], now, __ATOMIC_RELEASE);  // the beat that publishes it; the step stays
    }
  } else if (verb == "beatfor") {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(arg.c_str()));
    const auto colon = arg.find(':');
    const int every_ms = colon == std::string::npos ? 50 : std::atoi(arg.c_str() + colon + 1);
    const auto work = colon == std::string::npos ? std::string::npos : arg.find(':', colon + 1);
    const std::int64_t work_ns = work == std::string::npos ? 0 : std::atoll(arg.c_str() + work + 1) * 1000000;
    for (long long i = 0; std::chrono::steady_clock::now() < end; ++i) {
      if (std::int64_t* slot = heartbeat_slot(); slot && work_ns > 0)
        __atomic_fetch_add(&slot[3], work_ns, __ATOMIC_RELAXED);
      beat(i);
      std::this_thread::sleep_for(std::chrono::milliseconds(every_ms));
    }
  } else if (verb == "beatstamp") {
    const std::int64_t t = beat(0);
    FILE* f = std::fopen(arg.c_str(), "w");
    std::fprintf(f, "%lld\n", static_cast<long long>(t));
    std::fclose(f);
  } else if (verb == "stamp") {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    char line[96];
    const int n = std::snprintf(line, sizeof line, "%d %d %d %lld\n", g_rank, g_attempt, static_cast<int>(::getpid()),
                                static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec);
    const int fd = ::open(arg.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) { std::perror("test_worker: stamp"); std::exit(2); }
    write_out(fd, std::string(line, static_cast<size_t>(n)));
    ::close(fd);
  } else if (verb == "spin") {
    for (volatile unsigned long long n = 0;; n = n + 1) {
    }
  } else if (verb == "waitfile") {
    struct stat st;
    while (::stat(arg.c_str(), &st) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  } else {
    std::fprintf(stderr, "test_worker: unknown step %s\n", step.c_str());
    std::exit(2);
  }
}
}  // namespace

int main(int argc, char** argv) {
  const char* rank = std::getenv("RANK");
  g_rank = rank ? std::atoi(rank) : 0;
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  g_attempt = attempt ? std::atoi(attempt) : 0;
  // Every "?PATH:" is checked now, before any step runs (a step may create PATH).
  std::vector<bool> existed_at_start(static_cast<size_t>(argc), false);
  for (int i = 1; i < argc; ++i) {
    const std::string step = argv[i];
    for (size_t at = 0; at < step.size() && (step[at] == '@' || step[at] == '?');) {
      const auto colon = step.find(':', at);
      if (colon == std::string::npos) break;
      struct stat st;
      if (step[at] == '?' && ::stat(step.substr(at + 1, colon - at - 1).c_str(), &st) == 0)
        existed_at_start[static_cast<size_t>(i)] = true;
      at = colon + 1;
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::string step = argv[i];
    bool skip = existed_at_start[static_cast<size_t>(i)];
    while (!step.empty() && (step[0] == '@' || step[0] == '?')) {  // "@RANK:" and "?PATH:" combine
      const auto colon = step.find(':');
      if (colon == std::string::npos) break;
      if (step[0] == '@' && std::atoi(step.c_str() + 1) != g_rank) skip = true;
      step = step.substr(colon + 1);
    }
    if (!skip) run_step(step);
  }
  return 0;
}
