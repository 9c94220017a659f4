// Looking up the rendezvous host's name without ever holding up this process's exit.
//
// getaddrinfo cannot be interrupted. Asio's resolver runs it on a private thread that its io_context joins on
// destruction, so an agent told to stop (scancel, Ctrl-C) while a DNS server does not answer waited for the
// look-up to time out first (3.05 s measured under SLURM, 51 ms otherwise). Here each look-up runs on a
// detached thread: a cancelled one is forgotten, and its late answer is dropped instead of delivered.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace ddprun::rendezvous {

struct LookupResult {
  bool ok = false;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints;  // every address, in the resolver's order, when ok
  std::string error;                        // the resolver's words, when not ok ("Name or service not known")
  bool no_such_name = false;                // the name does not exist (an authoritative answer, not a time-out)
};

class NameLookup {
 public:
  explicit NameLookup(boost::asio::io_context& io) : io_(io) {}
  ~NameLookup() { cancel(); }
  NameLookup(const NameLookup&) = delete;
  NameLookup& operator=(const NameLookup&) = delete;

  // One look-up at a time: a new one cancels the previous. `done` runs on `io`'s loop unless cancelled first.
  void start(const std::string& host, unsigned short port, std::function<void(const LookupResult&)> done);
  void cancel();  // the pending look-up's answer is dropped; returns at once

  struct Pending;

 private:
  boost::asio::io_context& io_;
  std::shared_ptr<Pending> pending_;
};

}  // namespace ddprun::rendezvous
