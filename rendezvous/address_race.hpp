// Connecting to a name with several addresses: RFC 8305's "Happy Eyeballs", as the rendezvous client needs it.
//
// A dual-stack name (A and AAAA) may answer on one family only: a server bound to 0.0.0.0, a node whose IPv6
// route is broken, a firewall that drops one family's SYNs. Trying the first address alone (as before) kept a
// node retrying "Connection refused" on ::1 until the rendezvous timeout while the server listened on 127.0.0.1.
// Here the addresses are tried in the order of RFC 8305 §4 (families alternate, the resolver's first family
// first), the next one starts when the previous one fails or after a stagger, and the first to connect wins;
// the others are closed. What each address answered is kept for the client's messages.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace ddprun::rendezvous {

// RFC 8305 §5 recommends 250 ms between starts: a SYN lost on the first family costs that much, not a timeout.
inline constexpr std::chrono::milliseconds kAddressStagger{250};

struct RaceResult {
  bool ok = false;
  boost::asio::ip::tcp::socket* socket = nullptr;  // the winner, to move from, when ok (valid during the call)
  boost::asio::ip::tcp::endpoint endpoint;         // the winner's address, when ok
  std::string why;  // when not ok: the one error, or every address with its answer
};

class AddressRace {
 public:
  explicit AddressRace(boost::asio::io_context& io, std::chrono::milliseconds stagger = kAddressStagger)
      : io_(io), stagger_(stagger) {}
  ~AddressRace() { cancel(); }
  AddressRace(const AddressRace&) = delete;
  AddressRace& operator=(const AddressRace&) = delete;

  // Binds every later attempt of the same family to this source address before it connects (the port is still
  // the kernel's, picked at connect: IP_BIND_ADDRESS_NO_PORT). A load generator spreads its simulated agents
  // over 127.0.0.0/8 so, since one source address's ephemeral ports run out near 28 000 connections.
  void set_source(const boost::asio::ip::address& source) { source_ = source; }
  // Starts a race (cancelling one still running); `done` runs once on the io_context's loop unless cancelled first.
  void start(std::vector<boost::asio::ip::tcp::endpoint> endpoints, std::function<void(const RaceResult&)> done);
  // Closes every socket of the running race; its `done` does not run. What each address answered is kept.
  void cancel();
  // Every address of the last race with its answer: "[::1]:29400 refused, 127.0.0.1:29400 no answer yet".
  std::string answers() const;
  std::size_t addresses() const;  // how many the last race had

  // RFC 8305 §4: the addresses with families alternating, starting with the resolver's first family.
  static std::vector<boost::asio::ip::tcp::endpoint> interleave(std::vector<boost::asio::ip::tcp::endpoint> endpoints);

  struct Run;

 private:
  boost::asio::io_context& io_;
  std::chrono::milliseconds stagger_;
  std::optional<boost::asio::ip::address> source_;
  std::shared_ptr<Run> run_;
};

}  // namespace ddprun::rendezvous
