#include "rendezvous/name_lookup.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <cstring>
#include <mutex>
#include <thread>

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

// Shared by the loop and the look-up thread: whoever comes second sees the other's word under the mutex.
struct NameLookup::Pending {
  std::mutex mutex;
  asio::io_context* io = nullptr;  // null once cancelled: the answer goes nowhere
  std::function<void(const LookupResult&)> done;
};

namespace {

LookupResult look_up(const std::string& host, unsigned short port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  LookupResult r;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (rc != 0 || list == nullptr) {
    r.error = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
    r.no_such_name = rc == EAI_NONAME;
    if (list != nullptr) ::freeaddrinfo(list);
    return r;
  }
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      sockaddr_in in{};
      std::memcpy(&in, a->ai_addr, sizeof in);
      asio::ip::address_v4::bytes_type bytes;
      std::memcpy(bytes.data(), &in.sin_addr, bytes.size());
      r.endpoints.emplace_back(asio::ip::address_v4(bytes), port);
    } else if (a->ai_family == AF_INET6) {
      sockaddr_in6 in6{};
      std::memcpy(&in6, a->ai_addr, sizeof in6);
      asio::ip::address_v6::bytes_type bytes;
      std::memcpy(bytes.data(), &in6.sin6_addr, bytes.size());
      r.endpoints.emplace_back(asio::ip::address_v6(bytes, in6.sin6_scope_id), port);
    }
  }
  ::freeaddrinfo(list);
  r.ok = !r.endpoints.empty();
  if (!r.ok) r.error = "no address";
  return r;
}

}  // namespace

void NameLookup::start(const std::string& host, unsigned short port, std::function<void(const LookupResult&)> done) {
  cancel();
  pending_ = std::make_shared<Pending>();
  pending_->io = &io_;
  pending_->done = std::move(done);
  std::thread([pending = pending_, host, port] {
    LookupResult result = look_up(host, port);
    std::lock_guard<std::mutex> lock(pending->mutex);
    if (pending->io == nullptr) return;
    asio::post(*pending->io, [pending, result = std::move(result)] {
      std::function<void(const LookupResult&)> deliver;
      {
        std::lock_guard<std::mutex> inner(pending->mutex);
        if (pending->io == nullptr) return;  // cancelled after the answer was posted
        deliver = std::move(pending->done);
        pending->io = nullptr;
      }
      if (deliver) deliver(result);
    });
  }).detach();
}

void NameLookup::cancel() {
  if (!pending_) return;
  std::lock_guard<std::mutex> lock(pending_->mutex);
  pending_->io = nullptr;
  pending_->done = nullptr;
  pending_.reset();
}

}  // namespace ddprun::rendezvous
