#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/etcd/fake_etcd.hpp"

using namespace fake_etcd;  // and with it ddprun::etcd, json, asio, http, tcp

TEST_CASE("etcd endpoints: lists, torchrun's http:// URLs, IPv6, etcd's default port; bad ones said") {
  const auto e = parse_endpoints("a:1,[::1]:2,http://b:3/,c");
  REQUIRE(e.size() == 4);
  CHECK(e[0].text() == "a:1");
  CHECK(e[1].host == "::1");
  CHECK(e[1].text() == "[::1]:2");
  CHECK(e[2].text() == "b:3");
  CHECK(e[3].text() == "c:2379");
  CHECK(parse_endpoints("https://a:1,https://b")[1].text() == "b:2379");
  CHECK(names_https("a:1,https://b"));
  CHECK_FALSE(names_https("http://a:1,b"));
  CHECK_THROWS_WITH_AS(parse_endpoints("a:1,"), doctest::Contains("an empty item"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_endpoints("a:0"), doctest::Contains("port of 1-65535"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_endpoints("a:x"), doctest::Contains("port of 1-65535"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_endpoints("[::1"), doctest::Contains("missing ']'"), std::invalid_argument);
}

TEST_CASE("base64 both ways, and int64 fields written as strings") {
  CHECK(to_base64("/ddprun/j/coordinator") == "L2RkcHJ1bi9qL2Nvb3JkaW5hdG9y");
  CHECK(from_base64(to_base64(std::string("a\0b", 3))) == std::string("a\0b", 3));
  CHECK(from_base64("not base64!") == "");
  CHECK(int_field(json{{"TTL", "10"}}, "TTL") == 10);
  CHECK(int_field(json{{"TTL", 7}}, "TTL") == 7);
  CHECK(int_field(json::object(), "TTL") == 0);
}

TEST_CASE("a request fails over from a refused, a silent and a failing endpoint to one that answers, then prefers it") {
  asio::io_context io;
  FakeGateway silent(io, [](const std::string&, const json&) { return std::nullopt; });
  FakeGateway failing(io, fixed(503, R"({"message":"etcdserver: leader changed"})"));
  FakeGateway good(io, fixed(200, R"({"header":{},"count":"1"})"));
  GatewayClient client(io, {closed_endpoint(io), silent.endpoint(), failing.endpoint(), good.endpoint()},
                       std::chrono::milliseconds(300));
  bool done = false;
  std::string error = "unset";
  json reply;
  client.post("/v3/kv/range", json{{"key", to_base64("k")}}, [&](const RequestError& e, const json& r) {
    error = e.text;
    reply = r;
    done = true;
  });
  run_until(io, done);
  REQUIRE(done);
  CHECK(error == "");
  CHECK(int_field(reply, "count") == 1);
  REQUIRE(good.seen.size() == 1);
  CHECK(good.seen[0].first == "/v3/kv/range");
  CHECK(from_base64(good.seen[0].second["key"]) == "k");
  CHECK(failing.seen.size() == 1);
  // The next request goes to the endpoint that answered, first.
  done = false;
  client.post("/v3/kv/range", json::object(), [&](const RequestError& e, const json&) {
    error = e.text;
    done = true;
  });
  run_until(io, done);
  CHECK(error == "");
  CHECK(good.seen.size() == 2);
  CHECK(failing.seen.size() == 1);
  CHECK(silent.seen.size() == 1);
}

TEST_CASE("every endpoint failing is one error naming each; a 4xx answer is final") {
  asio::io_context io;
  const Endpoint closed = closed_endpoint(io);
  FakeGateway silent(io, [](const std::string&, const json&) { return std::nullopt; });
  {
    GatewayClient client(io, {closed, silent.endpoint()}, std::chrono::milliseconds(200));
    bool done = false;
    std::string error;
    client.post("/v3/lease/grant", json::object(), [&](const RequestError& e, const json&) {
      error = e.text;
      done = true;
    });
    run_until(io, done);
    CHECK(error.find(closed.text() + ": ") != std::string::npos);
    CHECK(error.find(silent.endpoint().text() + ": no answer in 200 ms") != std::string::npos);
  }
  FakeGateway wrong(io, fixed(400, R"({"error":"bad","message":"etcdserver: request is malformed"})"));
  FakeGateway good(io, fixed(200, "{}"));
  GatewayClient client(io, {wrong.endpoint(), good.endpoint()});
  bool done = false;
  std::string error;
  client.post("/v3/kv/txn", json::object(), [&](const RequestError& e, const json&) {
    error = e.text;
    done = true;
  });
  run_until(io, done);
  CHECK(error.find("HTTP 400: etcdserver: request is malformed") != std::string::npos);
  CHECK(good.seen.empty());
}

TEST_CASE("cancel() frees the loop at once and no handler runs") {
  asio::io_context io;
  FakeGateway silent(io, [](const std::string&, const json&) { return std::nullopt; });
  bool called = false;
  {
    GatewayClient client(io, {silent.endpoint()}, std::chrono::milliseconds(5000));
    client.post("/v3/kv/range", json::object(), [&](const RequestError&, const json&) { called = true; });
    for (int i = 0; i < 20 && silent.seen.empty(); ++i) io.run_one_for(std::chrono::milliseconds(50));
    REQUIRE(silent.seen.size() == 1);
    client.cancel();
  }
  const auto t0 = std::chrono::steady_clock::now();
  io.poll();  // the cancelled request's handlers, now aborted
  io.run_for(std::chrono::milliseconds(100));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  CHECK_FALSE(called);
}
