// Addresses of a name raced as RFC 8305 says (rendezvous/address_race.hpp), and the dual-stack listener
// (rendezvous/listener.hpp), with real sockets on 127.0.0.1 and ::1. The IPv6 cases say why they skip where this
// machine has no IPv6 loopback.
#include "rendezvous/address_race.hpp"
#include "rendezvous/listener.hpp"
#include "rendezvous/text.hpp"
#include "tests/rendezvous/socket_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {

const asio::ip::address kV4 = asio::ip::make_address("127.0.0.1");
const asio::ip::address kV6 = asio::ip::make_address("::1");

bool have_ipv6_loopback() {
  asio::io_context io;
  tcp::acceptor probe(io);
  boost::system::error_code ec;
  probe.open(tcp::v6(), ec);
  if (!ec) probe.bind(tcp::endpoint(kV6, 0), ec);
  return !ec;
}

// True, saying so, where the IPv6 cases cannot run.
bool skipped_without_ipv6() {
  if (have_ipv6_loopback()) return false;
  MESSAGE("skipped: this machine has no IPv6 loopback (::1 cannot be bound)");
  return true;
}

// A port on `address` where nothing listens: bound, then closed.
std::uint16_t refusing_port(asio::io_context& io, const asio::ip::address& address) {
  tcp::acceptor a(io, tcp::endpoint(address, 0));
  return a.local_endpoint().port();
}

// A listener whose accept queue is full: the kernel drops further SYNs, so a connect to it neither succeeds nor
// fails for a second or more (a firewall that drops, a wedged host), without any traffic beyond loopback.
struct BlackHole {
  tcp::acceptor acceptor;
  std::vector<std::unique_ptr<tcp::socket>> fillers;
  explicit BlackHole(asio::io_context& io) : acceptor(io, tcp::endpoint(kV4, 0)) {
    acceptor.listen(0);
    // Linux admits backlog + 1 connections before it drops SYNs: fill it. Asynchronously: the SYN leaves at once
    // (Asio calls connect() as it starts the operation), and the one that is dropped must not hold the test (a
    // synchronous connect waits out every SYN retry, ~2 minutes).
    for (int i = 0; i < 2; ++i) {
      auto s = std::make_unique<tcp::socket>(io);
      s->async_connect(acceptor.local_endpoint(), [](boost::system::error_code) {});
      fillers.push_back(std::move(s));
    }
  }
  tcp::endpoint endpoint() const { return acceptor.local_endpoint(); }
};

struct Outcome {
  bool finished = false;
  bool ok = false;
  tcp::endpoint winner;
  std::string why;
  tcp::socket socket;
  explicit Outcome(asio::io_context& io) : socket(io) {}
  std::function<void(const RaceResult&)> handler() {
    return [this](const RaceResult& r) {
      finished = true;
      ok = r.ok;
      why = r.why;
      if (r.ok) {
        winner = r.endpoint;
        socket = std::move(*r.socket);
      }
    };
  }
};

}  // namespace

TEST_CASE("families alternate, the resolver's first family first (RFC 8305 section 4)") {
  const tcp::endpoint a6(asio::ip::make_address("fd42::1"), 1), b6(asio::ip::make_address("fd42::2"), 1);
  const tcp::endpoint a4(asio::ip::make_address("10.0.0.1"), 1), b4(asio::ip::make_address("10.0.0.2"), 1);
  CHECK(AddressRace::interleave({a6, b6, a4, b4}) == std::vector<tcp::endpoint>{a6, a4, b6, b4});
  CHECK(AddressRace::interleave({a4, a6, b6}) == std::vector<tcp::endpoint>{a4, a6, b6});
  CHECK(AddressRace::interleave({a4, b4}) == std::vector<tcp::endpoint>{a4, b4});
  CHECK(AddressRace::interleave({}).empty());
}

TEST_CASE("an IPv6 literal is written in brackets wherever an endpoint is named") {
  CHECK(text::host_port("fd42::1", 29400) == "[fd42::1]:29400");
  CHECK(text::host_port("::1", 1) == "[::1]:1");
  CHECK(text::host_port("node-1", 29400) == "node-1:29400");
  CHECK(text::host_port("10.0.0.1", 29400) == "10.0.0.1:29400");
  CHECK(text::host_port("", 5) == ":5");
}

TEST_CASE("a refused address is passed over for the next one, which wins") {
  asio::io_context io;
  tcp::acceptor server(io, tcp::endpoint(kV4, 0));
  const tcp::endpoint refused(kV4, refusing_port(io, kV4));
  AddressRace race(io, 60s);  // the refusal, not the stagger, must start the second address (run_until: 5 s)
  Outcome out(io);
  race.start({refused, server.local_endpoint()}, out.handler());
  REQUIRE(run_until(io, [&] { return out.finished; }));
  CHECK(out.ok);
  CHECK(out.winner == server.local_endpoint());
  CHECK(out.socket.is_open());
  const std::string answers = race.answers();
  CHECK(answers.find(text::host_port("127.0.0.1", refused.port()) + " refused") != std::string::npos);
  CHECK(answers.find(" connected") != std::string::npos);
}

TEST_CASE("a source address set for the race is where the connection comes from") {
  // The load generator spreads its simulated agents over 127.0.0.0/8 this way (ClientConfig::source_address).
  asio::io_context io;
  tcp::acceptor server(io, tcp::endpoint(kV4, 0));
  AddressRace race(io, 60s);
  race.set_source(asio::ip::make_address("127.0.0.7"));
  Outcome out(io);
  race.start({server.local_endpoint()}, out.handler());
  REQUIRE(run_until(io, [&] { return out.finished; }));
  REQUIRE(out.ok);
  CHECK(out.socket.local_endpoint().address().to_string() == "127.0.0.7");
  tcp::socket accepted = server.accept();
  CHECK(accepted.remote_endpoint().address().to_string() == "127.0.0.7");
}

TEST_CASE("an address that does not answer is raced after the stagger, and the first to connect wins") {
  asio::io_context io;
  BlackHole hole(io);
  tcp::acceptor server(io, tcp::endpoint(kV4, 0));
  AddressRace race(io, 100ms);
  Outcome out(io);
  race.start({hole.endpoint(), server.local_endpoint()}, out.handler());
  REQUIRE(run_until(io, [&] { return out.finished; }));
  CHECK(out.ok);
  CHECK(out.winner == server.local_endpoint());
  // The first address was still connecting when the second won: the stagger started it, not a failure.
  CHECK(race.answers().find(text::host_port("127.0.0.1", hole.endpoint().port()) + " no answer yet") !=
        std::string::npos);
}

TEST_CASE("every address refused: one failure that names each with its answer") {
  asio::io_context io;
  const tcp::endpoint a(kV4, refusing_port(io, kV4)), b(kV4, refusing_port(io, kV4));
  AddressRace race(io);
  Outcome out(io);
  race.start({a, b}, out.handler());
  REQUIRE(run_until(io, [&] { return out.finished; }));
  CHECK_FALSE(out.ok);
  CHECK(out.why == text::host_port("127.0.0.1", a.port()) + " refused, " + text::host_port("127.0.0.1", b.port()) +
                       " refused");
  Outcome one(io);
  race.start({a}, one.handler());
  REQUIRE(run_until(io, [&] { return one.finished; }));
  CHECK(one.why == "Connection refused");  // one address: the OS's words, as ever
}

TEST_CASE("a cancelled race never reports, and a new start replaces the old one") {
  asio::io_context io;
  BlackHole hole(io);
  tcp::acceptor server(io, tcp::endpoint(kV4, 0));
  AddressRace race(io, 50ms);
  Outcome first(io), second(io);
  race.start({hole.endpoint(), server.local_endpoint()}, first.handler());
  race.cancel();
  run_for(io, 300ms);
  CHECK_FALSE(first.finished);
  race.start({server.local_endpoint()}, first.handler());
  race.start({server.local_endpoint()}, second.handler());
  REQUIRE(run_until(io, [&] { return second.finished; }));
  run_for(io, 100ms);
  CHECK_FALSE(first.finished);
  CHECK(second.ok);
}

TEST_CASE("the default listener takes IPv6 and IPv4 clients on one port") {
  if (skipped_without_ipv6()) return;
  asio::io_context io;
  tcp::acceptor acceptor = open_listener(io, kEveryAddress, 0);
  const auto port = acceptor.local_endpoint().port();
  CHECK(acceptor.local_endpoint().address().is_v6());
  for (const auto& address : {kV4, kV6}) {
    tcp::socket client(io);
    boost::system::error_code ec;
    client.connect(tcp::endpoint(address, port), ec);
    CHECK_MESSAGE(!ec, address.to_string() << ": " << ec.message());
  }
}

TEST_CASE("a job over a dual-stack server: an IPv6 node and an IPv4 node, node 0's address as IPv4 it came") {
  if (skipped_without_ipv6()) return;
  asio::io_context io;
  Server server(io, test_job(2, true), quiet_logger());
  server.start(kEveryAddress, 0);
  auto v4 = client_config(server.port(), 0, 1);
  auto v6 = client_config(server.port(), 1, 1);
  v6.server_host = "::1";
  auto n0 = start_agent(io, v4);
  auto n1 = start_agent(io, v6);
  REQUIRE(run_until(io, [&] { return !n0->events.assignments.empty() && !n1->events.assignments.empty(); }));
  // The IPv4 node reached a v6 socket as ::ffff:127.0.0.1: the workers get the address the way it was meant.
  CHECK(n1->events.assignments[0].master_addr == "127.0.0.1");
}

TEST_CASE("a client given an IPv6 literal reaches a server on ::1 and names it in brackets") {
  if (skipped_without_ipv6()) return;
  asio::io_context io;
  Server server(io, test_job(1, true), quiet_logger());
  server.start("::1", 0);
  auto config = client_config(server.port(), 0, 1);
  config.server_host = "::1";
  auto n0 = start_agent(io, config);
  REQUIRE(run_until(io, [&] { return !n0->events.assignments.empty(); }));
  CHECK(n0->events.assignments[0].master_addr == "::1");
}
