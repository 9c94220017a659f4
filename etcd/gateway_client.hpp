// A client of etcd's v3 JSON gateway (etcd 3.4: POST /v3/kv/range, /v3/kv/txn, /v3/kv/deleterange,
// /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke): HTTP/1.1 with Boost.Beast, on the caller's Asio loop,
// one connection per request. Why the gateway and not gRPC: the rendezvous writes to etcd a handful of times per
// job (an election, a lease kept alive every few seconds, a clean-up), so a plain HTTP call costs nothing that
// matters, and it needs no code generator or gRPC runtime (docs/DESIGN-NOTES.md, "Rendezvous on etcd"). With TLS
// (OpenSSL through Asio) when etcd's client URLs are https.
//
// Failover: a request goes to the endpoint that answered last, then to the others in turn. A refused connection,
// a timeout (per endpoint) or a 5xx answer moves on (a 3-member cluster whose leader died answers on the other
// two); a 4xx answer is final (the request itself is wrong). Every endpoint failing is one error naming each.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <nlohmann/json.hpp>

#include "common/timeouts.hpp"

namespace ddprun::etcd {

struct Endpoint {
  std::string host;
  std::string port;
  std::string text() const;  // "host:port" ("[v6]:port")
};

// "host:port[,host:port...]", each optionally "http://host:port" or "https://host:port" (torchrun's form; whether
// to use TLS is the client's Tls, see names_https). Throws std::invalid_argument with a message fit to print: an
// empty item, a bad port.
std::vector<Endpoint> parse_endpoints(const std::string& text);
bool names_https(const std::string& text);  // an endpoint given as https://
std::string describe(const std::vector<Endpoint>& endpoints);  // "a:2379, b:2379"

// etcd's keys and values travel base64-encoded in the gateway's JSON.
std::string to_base64(const std::string& bytes);
std::string from_base64(const std::string& text);  // "" for text that is not base64
// The gateway writes int64 fields as JSON strings ("TTL": "10"); absent means 0.
std::int64_t int_field(const nlohmann::json& object, const char* name);
// An answer that says no for good (gRPC's InvalidArgument, PermissionDenied, Unauthenticated): asking again gets the
// same answer. kAuthentication: etcd's authentication is on and ddprun sends no user (Unauthenticated, or etcd's
// "user name is empty"); kOther: a role lacks the key prefix, a malformed request. Read here, once, from etcd's
// answer: the hint a person gets is chosen by this kind (issue 53: it was chosen by matching the words downstream).
enum class Refusal { kNone, kAuthentication, kOther };
Refusal refusal_of(const nlohmann::json& reply);

// What went wrong with a request; empty when it succeeded.
struct RequestError {
  std::string text;  // what went wrong at each endpoint tried, for people
  bool tls = false;  // a TLS handshake or a certificate check failed at one of them
  // An endpoint answered with what no etcd sends (not JSON, nested deeper than kMaxReplyNesting, not an object,
  // over kMaxReplyBytes): asking again would not help, and the job ends with it (issue 55).
  bool malformed = false;
  bool empty() const { return text.empty(); }
};
inline constexpr std::size_t kMaxReplyBytes = 4 << 20;
inline constexpr int kMaxReplyNesting = 16;  // etcd's answers nest 4 deep
std::ostream& operator<<(std::ostream& out, const RequestError& error);

// https (--rdzv-conf protocol=https, or https:// endpoints): etcd's certificate must name the host dialled (its name,
// or its address as an IP SAN) and be signed by `cacert` (PEM; empty: the system's CAs); `cert` and `key` (PEM) are
// this client's, for an etcd started with --client-cert-auth.
struct Tls {
  bool enabled = false;
  std::string cacert;
  std::string cert;
  std::string key;
};

// Loads `tls`'s files as a request would (the CA, this client's certificate, its key and whether they belong
// together): "" when they are usable, else one line naming the option and the file (issue 55: a certificate with
// another certificate's key ended every agent with "internal error", 70; the launcher now refuses it, 66).
std::string check_tls(const Tls& tls);

class GatewayClient {
 public:
  // error: empty on success; reply: the answer's JSON object.
  using Handler = std::function<void(const RequestError& error, const nlohmann::json& reply)>;

  // Throws std::invalid_argument naming the file when TLS material cannot be loaded.
  GatewayClient(boost::asio::io_context& io, std::vector<Endpoint> endpoints,
                std::chrono::milliseconds per_endpoint_timeout = timeouts::kEtcdRequest,
                const Tls& tls = Tls());
  ~GatewayClient();
  GatewayClient(const GatewayClient&) = delete;
  GatewayClient& operator=(const GatewayClient&) = delete;

  // POSTs `body` to `path` ("/v3/kv/range"); `done` runs on the loop once, unless cancel() came first.
  void post(const std::string& path, const nlohmann::json& body, Handler done);
  // Closes every request in flight; their handlers are never called. The loop is free of them at once.
  void cancel();
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }

 private:
  class Request;
  boost::asio::io_context& io_;
  std::vector<Endpoint> endpoints_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<boost::asio::ssl::context> tls_;  // null: plain HTTP
  std::size_t preferred_ = 0;  // the endpoint that answered last
  std::vector<std::weak_ptr<Request>> in_flight_;
};

}  // namespace ddprun::etcd
