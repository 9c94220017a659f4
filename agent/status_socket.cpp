#include "agent/status_socket.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "common/fnv1a.hpp"
#include "common/runtime_dir.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using boost::system::error_code;

namespace {
constexpr std::size_t kMaxRequestBytes = 256;
constexpr std::chrono::milliseconds kAcceptRetry{100};  // after a failed accept (out of descriptors)
}  // namespace

std::string status_directory(std::string& problem) { return private_runtime_dir(problem); }

std::string status_run_name(const std::string& run_id) {
  return "~" + fnv1a_hex(run_id);  // ddprun and ddprun-status must compute the same name
}

std::string status_socket_path(const std::string& dir, const std::string& run_id, long pid) {
  const std::string tail = "." + std::to_string(pid) + ".sock";
  std::string path = dir + "/" + run_id + tail;
  if (path.size() < sizeof(sockaddr_un{}.sun_path)) return path;
  return dir + "/" + status_run_name(run_id) + tail;
}

class StatusSocket::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, Answer answer) : io_(io), acceptor_(io), answer_(std::move(answer)) {}

  bool open(const std::string& run_id, std::string& problem) {
    const std::string dir = status_directory(problem);
    if (dir.empty()) return false;
    path_ = status_socket_path(dir, run_id, ::getpid());
    if (path_.size() >= sizeof(sockaddr_un{}.sun_path)) {  // the directory's own path is too long
      problem = "the live view's socket path " + path_ + " is longer than a Unix socket address allows";
      path_.clear();
      return false;
    }
    ::unlink(path_.c_str());  // a pid's old socket: that process is gone (pids are unique among the living)
    error_code ec;
    acceptor_.open(local(), ec);
    if (!ec) acceptor_.bind(local::endpoint(path_), ec);
    if (!ec) acceptor_.listen(16, ec);
    if (ec) {
      problem = "cannot listen on " + path_ + ": " + ec.message();
      path_.clear();
      return false;
    }
    accept();
    return true;
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ignored;
    acceptor_.close(ignored);
    retry_timer_.cancel();
    if (!path_.empty()) ::unlink(path_.c_str());
    // A client still connected (silent, stopped, or not reading a long answer) must not hold the agent's loop,
    // and with it ddprun's exit: its reads and writes end now.
    for (const auto& weak : peers_)
      if (const auto peer = weak.lock()) peer->socket.close(ignored);
    peers_.clear();
  }

  const std::string& path() const { return path_; }

 private:
  struct Peer {
    explicit Peer(asio::io_context& io) : socket(io) {}
    local::socket socket;
    asio::streambuf request{kMaxRequestBytes};
    std::string reply;
  };

  void accept() {
    auto peer = std::make_shared<Peer>(io_);
    acceptor_.async_accept(peer->socket, [self = shared_from_this(), peer](error_code ec) {
      if (ec == asio::error::operation_aborted || self->closed_) return;
      if (!ec && self->same_user(*peer)) {
        auto& peers = self->peers_;
        peers.erase(std::remove_if(peers.begin(), peers.end(), [](const auto& p) { return p.expired(); }), peers.end());
        self->peers_.push_back(peer);
        self->read_request(peer);
      }
      if (!ec) return self->accept();
      // Out of descriptors (EMFILE, ENFILE), or memory: the connection stays queued and accept would fail again
      // at once, a busy loop that takes the agent's loop (issue 33). Try again a little later.
      self->retry_timer_.expires_after(kAcceptRetry);
      self->retry_timer_.async_wait([self](error_code wait_ec) {
        if (!wait_ec && !self->closed_) self->accept();
      });
    });
  }

  static bool same_user(Peer& peer) {
    ucred cred{};
    socklen_t len = sizeof cred;
    return ::getsockopt(peer.socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
           cred.uid == ::geteuid();
  }

  void read_request(const std::shared_ptr<Peer>& peer) {
    asio::async_read_until(peer->socket, peer->request, '\n', [self = shared_from_this(), peer](error_code ec, std::size_t) {
      if (ec || self->closed_) return;
      self->answer_([self, peer](const std::string& document) {
        peer->reply = document + "\n";
        asio::async_write(peer->socket, asio::buffer(peer->reply), [peer](error_code, std::size_t) {
          error_code ignored;
          peer->socket.close(ignored);
        });
      });
    });
  }

  asio::io_context& io_;
  local::acceptor acceptor_;
  asio::steady_timer retry_timer_{io_};  // after a failed accept
  Answer answer_;
  std::string path_;
  bool closed_ = false;
  std::vector<std::weak_ptr<Peer>> peers_;  // connected clients: close() ends them
};

StatusSocket::StatusSocket(asio::io_context& io, Answer answer)
    : impl_(std::make_shared<Impl>(io, std::move(answer))) {}
StatusSocket::~StatusSocket() { impl_->close(); }
bool StatusSocket::open(const std::string& run_id, std::string& problem) { return impl_->open(run_id, problem); }
void StatusSocket::close() { impl_->close(); }
const std::string& StatusSocket::path() const { return impl_->path(); }

}  // namespace ddprun::agent
