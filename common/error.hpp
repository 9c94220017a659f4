// The error hierarchy of ddprun's libraries, and the one invariant-check macro.
//
// Library APIs throw these (each header says which); worker failures are never exceptions, they are data
// (rendezvous/failure.hpp, common/supervision/supervision_policy.hpp). Inside Asio handlers code works with error_code and converts in one place.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ddprun {

// Base of everything ddprun throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input from the user: a message fit to print as one line, and the exit code to leave with.
class UsageError : public Error {
 public:
  UsageError(const std::string& what, int exit_code) : Error(what), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

// An operating-system call failed; the message names the call and errno's text.
class SystemError : public Error {
 public:
  SystemError(const std::string& call, int err);
  explicit SystemError(const std::string& message) : Error(message), err_(0) {}  // no errno to show
  int error_number() const noexcept { return err_; }

 private:
  int err_;
};

// A file or directory the user asked ddprun to write (--log-dir, --events-file) cannot be created or
// written: exit 73 (EX_CANTCREAT), whatever the errno.
class CantCreateError : public SystemError {
 public:
  using SystemError::SystemError;
};

namespace rendezvous {
class RendezvousError : public Error { public: using Error::Error; };
class ClosedError : public RendezvousError { public: using RendezvousError::RendezvousError; };
class TimeoutError : public RendezvousError { public: using RendezvousError::RendezvousError; };
class ConnectionError : public RendezvousError { public: using RendezvousError::RendezvousError; };
class ProtocolError : public RendezvousError { public: using RendezvousError::RendezvousError; };
}  // namespace rendezvous

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const std::string& what);

template <typename A, typename B>
[[noreturn]] void check_op_failed(const char* file, int line, const char* expr, const A& a, const B& b) {
  std::ostringstream out;
  out << expr << " (" << a << " vs " << b << ")";
  check_failed(file, line, out.str());
}
}  // namespace detail

}  // namespace ddprun

// Invariants: a broken one is a bug in ddprun, reported with file:line and both values.
#define DDPRUN_CHECK(cond) \
  do { if (!(cond)) ::ddprun::detail::check_failed(__FILE__, __LINE__, #cond); } while (0)
#define DDPRUN_CHECK_OP(a, op, b)                                                        \
  do {                                                                                   \
    const auto& ddprun_a_ = (a);                                                         \
    const auto& ddprun_b_ = (b);                                                         \
    if (!(ddprun_a_ op ddprun_b_))                                                       \
      ::ddprun::detail::check_op_failed(__FILE__, __LINE__, #a " " #op " " #b, ddprun_a_, ddprun_b_); \
  } while (0)
#define DDPRUN_CHECK_EQ(a, b) DDPRUN_CHECK_OP(a, ==, b)
#define DDPRUN_CHECK_LT(a, b) DDPRUN_CHECK_OP(a, <, b)
#define DDPRUN_CHECK_LE(a, b) DDPRUN_CHECK_OP(a, <=, b)
