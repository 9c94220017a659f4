// Where a user's other terminal finds a running job: each agent listens on a Unix socket in the user's own
// private directory, $XDG_RUNTIME_DIR/ddprun or /tmp/ddprun-<uid> (0700, owned by the user, checked, never
// followed through a link), named <run id>.<pid>.sock. ddprun-status (launcher/status_main.cpp) connects,
// writes one request line, and reads one JSON document back. Other users cannot enter the directory, and the
// agent also checks each peer's uid (SO_PEERCRED): refused, the connection is closed unanswered.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

namespace ddprun::agent {

// The private directory (common/runtime_dir.hpp), made when missing; "" with `problem` set when it is unsafe or
// cannot be made.
std::string status_directory(std::string& problem);

// The socket's name in `dir`: "<run id>.<pid>.sock", or, where that path would not fit a Unix socket address
// (108 bytes: issue 33, a run id of 90-128 characters ended ddprun with "internal error: File name too long"),
// "<status_run_name(run id)>.<pid>.sock". ddprun-status matches --run-id against either.
std::string status_socket_path(const std::string& dir, const std::string& run_id, long pid);
// A run id's short form in socket names: "~" and 16 hex digits of its hash.
std::string status_run_name(const std::string& run_id);

class StatusSocket {
 public:
  // `answer` is called on the loop for each request; it calls `reply` (once, maybe later) with the document.
  using Reply = std::function<void(const std::string& document)>;
  using Answer = std::function<void(Reply reply)>;

  StatusSocket(boost::asio::io_context& io, Answer answer);
  ~StatusSocket();  // close()
  // Listens at <directory>/<run_id>.<pid>.sock; false (with `problem`) when it cannot.
  bool open(const std::string& run_id, std::string& problem);
  void close();  // the socket file is removed
  const std::string& path() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddprun::agent
