// The state machine's MUNGE rule, pure (no munged): the server's verdict rides on the hello, and with MUNGE
// required a wrong token, a wrong run id and a wrong user all get the one same refusal.
#include "common/error.hpp"
#include "tests/rendezvous/state_machine_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {
JobConfig munge_job() {
  JobConfig config = job(2, true);
  config.require_munge = true;
  return config;
}

Hello munge_hello(const Joiner& j, bool munge_ok, const std::string& problem = "") {
  Hello h = hello(j);
  h.munge_ok = munge_ok;
  h.munge_problem = problem;
  return h;
}

std::string log_text(const std::vector<Action>& actions) {
  std::string text;
  for (const auto& l : find_all<Log>(actions)) text += l.text + "\n";
  return text;
}
}  // namespace

TEST_CASE("with MUNGE required a node with a good credential and token joins") {
  RendezvousState state(munge_job(), Clock::time_point{});
  Joiner j;
  j.node_rank = 0;
  auto actions = step(state, munge_hello(j, true), at(0ms));
  CHECK(refusal(actions, j.conn).empty());
  CHECK(state.nodes.count(j.conn) == 1);
}

TEST_CASE("with MUNGE required a wrong user, a wrong token and a wrong run id get the same refusal") {
  RendezvousState state(munge_job(), Clock::time_point{});
  Joiner user, token, run;
  user.conn = 1, token.conn = 2, run.conn = 3;
  user.node_rank = token.node_rank = run.node_rank = 0;
  token.token = "wrong";
  run.run_id = "other-run";
  auto by_user = step(state, munge_hello(user, false, "MUNGE credential of uid 65534, not the job's uid 0"), at(0ms));
  auto by_token = step(state, munge_hello(token, true), at(0ms));
  auto by_run = step(state, munge_hello(run, true), at(0ms));
  const std::string said = refusal(by_user, user.conn);
  CHECK(said.find("not the job's user") != std::string::npos);
  CHECK(said == refusal(by_token, token.conn));
  CHECK(said == refusal(by_run, run.conn));
  CHECK(closes(by_user, user.conn));
  CHECK(state.nodes.empty());
  // The operator's log says which: the peer does not.
  CHECK(log_text(by_user).find("uid 65534") != std::string::npos);
  CHECK(log_text(by_token).find("wrong token") != std::string::npos);
  CHECK(log_text(by_run).find("\"other-run\" is not this run's") != std::string::npos);
}

TEST_CASE("with MUNGE required a hello the server did not check is refused: unchecked is not passed") {
  RendezvousState state(munge_job(), Clock::time_point{});
  Joiner j;
  j.node_rank = 0;
  auto actions = step(state, hello(j), at(0ms));  // munge_ok defaults to false
  CHECK(refusal(actions, j.conn).find("authentication failed") == 0);
  CHECK(state.nodes.empty());
}

TEST_CASE("without MUNGE the verdict is ignored and the refusal text is the token's") {
  RendezvousState state(job(2, true), Clock::time_point{});
  Joiner good, bad;
  good.node_rank = 0;
  bad.conn = 2, bad.node_rank = 1, bad.token = "wrong";
  CHECK(refusal(step(state, munge_hello(good, false), at(0ms)), good.conn).empty());
  const std::string said = refusal(step(state, munge_hello(bad, true), at(0ms)), bad.conn);
  CHECK(said.find("authentication failed: wrong job token or run id") == 0);
  CHECK(said.find("MUNGE") == std::string::npos);
}

TEST_CASE("the challenge's munge flag and the hello's credential cross the wire, and are absent when unused") {
  ChallengeMsg challenge;
  challenge.nonce = "ab12";
  challenge.heartbeat_interval_ms = 1000;
  challenge.heartbeat_timeout_ms = 5000;
  CHECK(encode(ServerMessage{challenge}).find("munge") == std::string::npos);
  challenge.munge = true;
  CHECK(std::get<ChallengeMsg>(decode_server_message(encode(ServerMessage{challenge}))).munge);

  HelloMsg message = hello(Joiner{}).hello;
  CHECK(encode(ClientMessage{message}).find("munge") == std::string::npos);
  message.munge_credential = "MUNGE:AwQFAAB=:";
  CHECK(std::get<HelloMsg>(decode_client_message(encode(ClientMessage{message}))).munge_credential == message.munge_credential);
  // Bounded like every field: a peer cannot make the server hand munged a credential of any size.
  message.munge_credential = "MUNGE:" + std::string(kMaxMungeCredentialBytes, 'A') + ":";
  CHECK_THROWS_AS(decode_client_message(encode(ClientMessage{message})), ProtocolError);
}
