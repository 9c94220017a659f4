// A stand-in for etcd on 127.0.0.1 for the etcd module's tests: a gateway that answers as each test says
// (real sockets, one process), and an election's outcomes recorded. Shared by gateway_client_test.cpp and
// election_test.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "etcd/coordinator_election.hpp"
#include "etcd/gateway_client.hpp"

namespace fake_etcd {

using namespace ddprun::etcd;
using nlohmann::json;
namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

// A stand-in for etcd's gateway on 127.0.0.1: answers each request with what `answer` says (status and body), or
// not at all (nullopt: the connection stays open and silent). Every request's path and body are kept.
class FakeGateway {
 public:
  using Answer = std::function<std::optional<std::pair<unsigned, std::string>>(const std::string& path,
                                                                                const json& body)>;
  FakeGateway(asio::io_context& io, Answer answer) : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
                                                     answer_(std::move(answer)) {
    accept();
  }
  Endpoint endpoint() const { return {"127.0.0.1", std::to_string(acceptor_.local_endpoint().port())}; }
  std::vector<std::pair<std::string, json>> seen;
  // An answer with status 0 is held back (a slow etcd) until release_held() sends it with status 200.
  void release_held() {
    for (auto& conn : held_) send(conn, 200, conn->response.body());
    held_.clear();
  }

 private:
  struct Conn {
    explicit Conn(tcp::socket s) : socket(std::move(s)) {}
    tcp::socket socket;
    boost::beast::flat_buffer buffer;
    http::request<http::string_body> request;
    http::response<http::string_body> response;
  };

  void accept() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec) return;
      auto conn = std::make_shared<Conn>(std::move(socket));
      kept_.push_back(conn);
      http::async_read(conn->socket, conn->buffer, conn->request, [this, conn](const boost::system::error_code& e,
                                                                               std::size_t) {
        if (e) return;
        const json body = json::parse(conn->request.body(), nullptr, false);
        seen.emplace_back(std::string(conn->request.target()), body);
        const auto said = answer_(std::string(conn->request.target()), body);
        if (!said) return;  // silent
        if (said->first == 0) {
          conn->response.body() = said->second;
          return held_.push_back(conn);
        }
        send(conn, said->first, said->second);
      });
      accept();
    });
  }

  static void send(const std::shared_ptr<Conn>& conn, unsigned status, std::string body) {
    conn->response.result(status);
    conn->response.version(11);
    conn->response.set(http::field::content_type, "application/json");
    conn->response.body() = std::move(body);
    conn->response.prepare_payload();
    http::async_write(conn->socket, conn->response, [conn](const boost::system::error_code&, std::size_t) {
      boost::system::error_code ignored;
      conn->socket.shutdown(tcp::socket::shutdown_both, ignored);
    });
  }

  tcp::acceptor acceptor_;
  Answer answer_;
  std::vector<std::shared_ptr<Conn>> kept_;
  std::vector<std::shared_ptr<Conn>> held_;
};

// A port nobody listens on (bound, then closed).
inline Endpoint closed_endpoint(asio::io_context& io) {
  tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return {"127.0.0.1", std::to_string(a.local_endpoint().port())};
}

inline FakeGateway::Answer fixed(unsigned status, std::string body) {
  return [status, body](const std::string&, const json&) { return std::make_optional(std::make_pair(status, body)); };
}

// Runs the loop until `done` or 10 s.
inline void run_until(asio::io_context& io, const bool& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done && std::chrono::steady_clock::now() < deadline) io.run_one_for(std::chrono::milliseconds(50));
}

// A gateway that plays etcd for one election: grants lease 42; the key is free or held by `holder` (for reads
// and for the transaction); `range_holder`, when given, is what reads see instead (a race: free when read, taken
// by the transaction).
// `ended`: the job's end recorded (reads and a failed transaction see it; run id "j").
inline FakeGateway::Answer election_etcd(std::optional<std::string> holder,
                                  std::function<std::optional<std::string>()> range_holder = nullptr,
                                  std::optional<std::string> ended = std::nullopt) {
  return [holder, range_holder, ended](const std::string& path,
                                       const json&) -> std::optional<std::pair<unsigned, std::string>> {
    const auto job_keys = [&ended](const std::optional<std::string>& coordinator) {
      json kvs = json::array();
      if (coordinator) kvs.push_back({{"key", to_base64("/ddprun/j/coordinator")}, {"value", to_base64(*coordinator)}});
      if (ended) kvs.push_back({{"key", to_base64("/ddprun/j/end")}, {"value", to_base64(*ended)}});
      return kvs.empty() ? json::object() : json{{"kvs", kvs}};
    };
    if (path == "/v3/lease/grant") return std::make_pair(200u, std::string(R"({"ID":"42","TTL":"10"})"));
    if (path == "/v3/kv/range") return std::make_pair(200u, job_keys(range_holder ? range_holder() : holder).dump());
    if (path == "/v3/kv/txn") {
      if (!holder && !ended) {  // won: the put's answer, and the range of the round key (a round kept by a former host)
        const json kept = {{"kvs", {{{"key", to_base64("r")}, {"value", to_base64("round 3")}}}}};
        return std::make_pair(200u, json{{"header", {{"revision", "9"}}},
                                         {"succeeded", true},
                                         {"responses", {{{"response_put", json::object()}},
                                                        {{"response_range", kept}}}}}.dump());
      }
      return std::make_pair(200u, json{{"responses", json::array({{{"response_range", job_keys(holder)}}})}}.dump());
    }
    if (path == "/v3/lease/keepalive") return std::make_pair(200u, std::string(R"({"result":{"ID":"42","TTL":"10"}})"));
    if (path == "/v3/lease/revoke" || path == "/v3/kv/put" || path == "/v3/kv/deleterange")
      return std::make_pair(200u, std::string("{}"));
    return std::make_pair(404u, std::string("{}"));
  };
}

struct Outcome {
  bool won = false;
  std::string round;
  std::optional<std::string> lost;
  std::optional<std::string> error;
  std::optional<std::string> ended;
  bool refused = false;
  bool malformed = false;
  std::vector<bool> standing;  // on_lease_standing's calls: true lapsing, false renewed again
  bool any() const { return won || lost || error || ended; }
};

inline CoordinatorElection::Handlers record(Outcome& o) {
  return {[&o](const std::string& round) {
            o.won = true;
            o.round = round;
          },
          [&o](const std::string& v) { o.lost = v; },
          [&o](const std::string& why, ElectionFailure kind) {
            o.error = why;
            o.refused = kind == ElectionFailure::kRefused;
            o.malformed = kind == ElectionFailure::kMalformed;
          },
          [&o](const std::string& end) { o.ended = end; },
          [&o](bool lapsing) { o.standing.push_back(lapsing); }};
}

inline ddprun::Logger quiet() { return ddprun::Logger(ddprun::LogLevel::kOff, "", ""); }

// Runs `election` until it has won.
inline void win(asio::io_context& io, CoordinatorElection& election, const Outcome& o) {
  election.run("mine");
  run_until(io, o.won);
  REQUIRE(o.won);
}

// finish(), and the loop until its answer.
inline CoordinatorElection::EndOutcome finish_now(asio::io_context& io, CoordinatorElection& election,
                                           const std::string& record, std::chrono::milliseconds patience) {
  std::optional<CoordinatorElection::EndOutcome> end;
  bool finished = false;
  election.finish(record, patience, [&](const CoordinatorElection::EndOutcome& e) {
    end = e;
    finished = true;
  });
  run_until(io, finished);
  REQUIRE(end);
  return *end;
}

// An election of run "j" that wins at `etcd`, then finishes with `end_record` (2 s of patience): what finish()
// learned.
inline CoordinatorElection::EndOutcome win_then_finish(asio::io_context& io, const FakeGateway& etcd,
                                                       const std::string& end_record) {
  ElectionConfig config;
  config.run_id = "j";
  Outcome o;
  CoordinatorElection election(io, {etcd.endpoint()}, config, record(o), quiet());
  win(io, election, o);
  return finish_now(io, election, end_record, std::chrono::milliseconds(2000));
}

}  // namespace fake_etcd
