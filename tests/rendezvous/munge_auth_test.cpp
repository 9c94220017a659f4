// MUNGE credentials against a real munged: tests/support/munged.py starts a private one and sets
// DDPRUN_MUNGE_SOCKET (ctest entry rendezvous.munge). Decoding, the payload binding, replay, forgery, the
// uid check, munged down; then the real server and clients over loopback.
#include <unistd.h>

#include <cstdlib>

#include "rendezvous/munge_auth.hpp"
#include "tests/rendezvous/socket_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {
std::string munge_socket() {
  const char* path = std::getenv("DDPRUN_MUNGE_SOCKET");
  REQUIRE_MESSAGE(path != nullptr, "run under tests/support/munged.py, which sets DDPRUN_MUNGE_SOCKET");
  return path;
}

const std::string kNowhere = "/nonexistent/ddprun-test/munge.socket";
}  // namespace

TEST_CASE("a credential for this nonce and run decodes to our uid") {
  const std::string socket = munge_socket();
  CHECK(munge_unavailable_reason(socket).empty());
  const std::string credential = make_munge_credential(socket, "n1", "run1");
  CHECK(credential.rfind("MUNGE:", 0) == 0);
  const MungeCheck check = check_munge_credential(socket, credential, "n1", "run1", ::geteuid());
  CHECK_MESSAGE(check.ok, check.problem);
  CHECK(check.uid == ::geteuid());
}

TEST_CASE("a credential made for another nonce or another run is refused") {
  const std::string socket = munge_socket();
  const MungeCheck nonce = check_munge_credential(socket, make_munge_credential(socket, "n1", "run1"), "n2", "run1",
                                                  ::geteuid());
  CHECK_FALSE(nonce.ok);
  CHECK(nonce.problem.find("another connection or run") != std::string::npos);
  const MungeCheck run = check_munge_credential(socket, make_munge_credential(socket, "n1", "run1"), "n1", "run2",
                                                ::geteuid());
  CHECK_FALSE(run.ok);
}

TEST_CASE("a credential decodes once: a replay is refused by munged's replay cache") {
  const std::string socket = munge_socket();
  const std::string credential = make_munge_credential(socket, "n1", "run1");
  CHECK(check_munge_credential(socket, credential, "n1", "run1", ::geteuid()).ok);
  const MungeCheck again = check_munge_credential(socket, credential, "n1", "run1", ::geteuid());
  CHECK_FALSE(again.ok);
  CHECK(again.problem.find("eplayed") != std::string::npos);
}

TEST_CASE("a forged or damaged credential is refused") {
  const std::string socket = munge_socket();
  std::string credential = make_munge_credential(socket, "n1", "run1");
  // One character of the sealed body changed (past "MUNGE:", before the trailing ':').
  char& c = credential[credential.size() / 2];
  c = c == 'A' ? 'B' : 'A';
  CHECK_FALSE(check_munge_credential(socket, credential, "n1", "run1", ::geteuid()).ok);
  CHECK_FALSE(check_munge_credential(socket, "MUNGE:not-a-credential:", "n1", "run1", ::geteuid()).ok);
  const MungeCheck none = check_munge_credential(socket, "", "n1", "run1", ::geteuid());
  CHECK_FALSE(none.ok);
  CHECK(none.problem == "no MUNGE credential");
}

TEST_CASE("a credential of another uid than the job's is refused naming both") {
  const std::string socket = munge_socket();
  const uid_t other = ::geteuid() + 1;
  const MungeCheck check = check_munge_credential(socket, make_munge_credential(socket, "n1", "run1"), "n1", "run1",
                                                  other);
  CHECK_FALSE(check.ok);
  CHECK(check.problem.find("not the job's uid " + std::to_string(other)) != std::string::npos);
}

TEST_CASE("munged unreachable: making a credential throws naming the socket") {
  CHECK(munge_unavailable_reason(kNowhere).find(kNowhere) != std::string::npos);
  CHECK_THROWS_AS(make_munge_credential(kNowhere, "n", "r"), MungeError);
  CHECK_FALSE(check_munge_credential(kNowhere, "MUNGE:x:", "n", "r", ::geteuid()).ok);
}

TEST_CASE("a MUNGE job over loopback: nodes with credentials join") {
  const std::string socket = munge_socket();
  asio::io_context io;
  JobConfig config = test_job(2, true);
  config.require_munge = true;
  config.munge_socket = socket;
  Server server(io, config, quiet_logger());
  server.start("127.0.0.1", 0);
  std::vector<std::unique_ptr<Agent>> agents;
  for (int rank = 0; rank < 2; ++rank) {
    ClientConfig c = client_config(server.port(), rank, 1);
    c.munge_socket = socket;
    agents.push_back(start_agent(io, c));
  }
  REQUIRE(run_until(io, [&] {
    return !agents[0]->events.assignments.empty() && !agents[1]->events.assignments.empty();
  }));
  CHECK_FALSE(agents[0]->events.error.has_value());
  CHECK(agents[1]->events.assignments.front().nnodes == 2);
}

TEST_CASE("a node without munged says it cannot join: the job ends at once, and a later node is told why") {
  const std::string socket = munge_socket();
  asio::io_context io;
  JobConfig config = test_job(3, true);
  config.require_munge = true;
  config.munge_socket = socket;
  Server server(io, config, quiet_logger());
  server.start("127.0.0.1", 0);

  ClientConfig first = client_config(server.port(), 0, 1);
  first.munge_socket = socket;
  auto node0 = start_agent(io, first);
  REQUIRE(run_until(io, [&] { return server.state().nodes.size() == 1; }));
  ClientConfig lost = client_config(server.port(), 1, 1);
  lost.munge_socket = kNowhere;
  auto without = start_agent(io, lost);
  REQUIRE(run_until(io, [&] { return without->events.error.has_value() && !node0->events.stops.empty(); }));
  CHECK(without->events.error->kind == ErrorKind::kUnavailable);
  CHECK(without->events.error->message.find("requires a MUNGE credential") != std::string::npos);
  CHECK(without->events.error->message.find(kNowhere) != std::string::npos);
  // Node 0, joined and waiting, is stopped with node 1's reason, which exits 69 everywhere.
  const Failure& cause = node0->events.stops.front().root_cause;
  CHECK(is_start_failure(cause));
  CHECK(cause.node_rank == 1);
  CHECK(exit_status_of(cause) == 69);
  CHECK(describe(cause).find("node 1 (host ") != std::string::npos);
  CHECK(describe(cause).find("could not start: the rendezvous requires a MUNGE credential") != std::string::npos);
  CHECK(server.phase() == Phase::kStopped);

  // Node 2 comes late, with a credential: it is told, not refused as a stranger.
  ClientConfig late = client_config(server.port(), 2, 1);
  late.munge_socket = socket;
  auto node2 = start_agent(io, late);
  REQUIRE(run_until(io, [&] { return node2->events.error.has_value(); }));
  CHECK(node2->events.error->kind == ErrorKind::kUnavailable);
  CHECK(node2->events.error->message.find("the job ended before this node joined: node 1") != std::string::npos);
  CHECK(every_node_informed(server.state()));
}

TEST_CASE("a MUNGE job refuses a hello without a credential the same way as a wrong token") {
  const std::string socket = munge_socket();
  asio::io_context io;
  JobConfig config = test_job(1, true);
  config.require_munge = true;
  config.munge_socket = socket;
  Server server(io, config, quiet_logger());
  server.start("127.0.0.1", 0);
  auto refusal_of = [&](const std::string& token, bool with_credential) {
    RawPeer peer(io, server.port());
    // As an agent does (the connection's proof, then a sealed hello): with another token the seal does not open.
    peer.handshake(0, 1, token, kProtocolVersion, "job42", [&](HelloMsg& hello, const ChallengeMsg& challenge) {
      CHECK(challenge.munge);
      hello.host = "h";
      hello.master_port = 29500;
      if (with_credential) hello.munge_credential = make_munge_credential(socket, challenge.nonce, "job42");
    });
    auto reply = decode_server_message(peer.read_frame().value());
    return std::get<ErrorMsg>(reply).message;
  };
  const std::string no_credential = refusal_of("s3cret", false);
  CHECK(no_credential.find("authentication failed") == 0);
  CHECK(no_credential == refusal_of("wrong", true));
}
