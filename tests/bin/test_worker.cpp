// A worker for ddprun's integration tests and benchmarks: runs a list of steps, each optionally only on
// one rank (RANK from the environment).
//
//   test_worker [@RANK:]STEP ...
//   exit=N         exit with code N                 kill=SIG     raise SIG (default action restored first)
//   sleep=SEC      sleep (fractions allowed)        hang         sleep until a signal kills us
//   ignore=SIG     ignore SIG from now on           trap=SIG     on SIG print "rank R got SIGNAME", exit 0
//   print=TEXT     print TEXT and a newline         partial=TEXT print TEXT with no newline
//   eprint=TEXT    the same on stderr               lines=N      print N numbered lines "rank R line I"
//   flood=BYTES    write BYTES of 100-byte lines    binary=N     write bytes 0..255 N times
//   env=NAME       print "NAME=value" (or "NAME unset")
//   pidfile=PATH   append "rank pid pgid" to PATH   ready=DIR    create DIR/ready.RANK (tests wait for it)
//   fork=KIND      start a child that sleeps forever: KIND "group" stays in our process group,
//                  "setsid" leaves it (a new session), "orphan" double-forks so it is re-parented
//   errorfile=MSG  write MSG to TORCHELASTIC_ERROR_FILE in torchelastic's JSON format
//   waitfile=PATH  wait until PATH exists
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cctype>
#include <chrono>
#include <ctime>
#include <string>
#include <thread>

namespace {
int g_rank = 0;

int signal_number(const std::string& s) {
  if (std::isdigit(static_cast<unsigned char>(s[0]))) return std::atoi(s.c_str());
  static const struct { const char* n; int v; } names[] = {{"TERM", SIGTERM}, {"INT", SIGINT}, {"KILL", SIGKILL},
      {"HUP", SIGHUP}, {"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"SEGV", SIGSEGV},
      {"ABRT", SIGABRT}, {"PIPE", SIGPIPE}};
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

void sleep_forever() {
  for (;;) ::pause();
}

void start_child(const std::string& kind) {
  pid_t pid = ::fork();
  if (pid != 0) {
    if (kind == "orphan") ::waitpid(pid, nullptr, 0);
    return;
  }
  if (kind == "setsid") ::setsid();
  if (kind == "orphan") {
    if (::fork() != 0) ::_exit(0);  // the grandchild is re-parented to the nearest subreaper
    ::setsid();
  }
  sleep_forever();
}

void run_step(const std::string& step) {
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
    FILE* f = std::fopen(arg.c_str(), "a");
    std::fprintf(f, "%d %d %d\n", g_rank, static_cast<int>(::getpid()), static_cast<int>(::getpgrp()));
    std::fclose(f);
  } else if (verb == "ready") {
    const std::string path = arg + "/ready." + std::to_string(g_rank);
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  } else if (verb == "fork") {
    start_child(arg);
  } else if (verb == "errorfile") {
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (path) {
      FILE* f = std::fopen(path, "w");
      std::fprintf(f, "{\"message\": {\"message\": \"%s\", \"extraInfo\": {\"py_callstack\": \"test_worker\", "
                   "\"timestamp\": \"%ld\"}}}\n", arg.c_str(), static_cast<long>(std::time(nullptr)));
      std::fclose(f);
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
  for (int i = 1; i < argc; ++i) {
    std::string step = argv[i];
    if (step[0] == '@') {  // "@RANK:STEP": only on that rank
      const auto colon = step.find(':');
      if (std::atoi(step.c_str() + 1) != g_rank) continue;
      step = step.substr(colon + 1);
    }
    run_step(step);
  }
  return 0;
}
