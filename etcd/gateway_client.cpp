#include "etcd/gateway_client.hpp"

#include "common/json_depth.hpp"

#include <sodium.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "common/host_port.hpp"

namespace ddprun::etcd {
namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace ssl = boost::asio::ssl;
using nlohmann::json;

namespace {
// An answer larger than this is not one of ours (a range of a few small keys): refused, not buffered.

std::string ec_text(const boost::system::error_code& ec) { return ec.message(); }
}  // namespace

std::string Endpoint::text() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
}

std::vector<Endpoint> parse_endpoints(const std::string& text) {
  std::vector<Endpoint> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (item.rfind("https://", 0) == 0) item = item.substr(8);  // TLS is the client's (Tls), for every endpoint
    else if (item.rfind("http://", 0) == 0) item = item.substr(7);
    while (!item.empty() && item.back() == '/') item.pop_back();
    if (item.empty()) throw std::invalid_argument("etcd endpoints '" + text + "': an empty item");
    Endpoint e;
    e.port = "2379";  // etcd's client port
    const std::string wrong = split_host_port(item, e.host, e.port);
    if (!wrong.empty()) throw std::invalid_argument("etcd endpoint '" + item + "': " + wrong);
    int port = 0;
    try {
      std::size_t used = 0;
      port = std::stoi(e.port, &used);
      if (used != e.port.size()) port = 0;
    } catch (const std::exception&) {
      port = 0;
    }
    if (e.host.empty() || port < 1 || port > 65535)
      throw std::invalid_argument("etcd endpoint '" + item + "' is not HOST:PORT with a port of 1-65535");
    out.push_back(std::move(e));
  }
  return out;
}

bool names_https(const std::string& text) { return text.find("https://") != std::string::npos; }

std::string describe(const std::vector<Endpoint>& endpoints) {
  std::string out;
  for (const Endpoint& e : endpoints) out += (out.empty() ? "" : ", ") + e.text();
  return out;
}

std::string to_base64(const std::string& bytes) {
  const int variant = sodium_base64_VARIANT_ORIGINAL;
  std::string out(sodium_base64_encoded_len(bytes.size(), variant), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                    variant);
  out.resize(out.find('\0'));
  return out;
}

std::string from_base64(const std::string& text) {
  std::string out(text.size(), '\0');
  std::size_t len = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(), text.size(), nullptr,
                        &len, nullptr, sodium_base64_VARIANT_ORIGINAL) != 0)
    return "";
  out.resize(len);
  return out;
}

Refusal refusal_of(const nlohmann::json& reply) {
  if (!reply.is_object() || !reply.contains("code") || !reply["code"].is_number_integer()) return Refusal::kNone;
  const int code = reply["code"].get<int>();
  if (code == 16) return Refusal::kAuthentication;  // Unauthenticated: "invalid auth token"
  if (code != 3 && code != 7) return Refusal::kNone;  // InvalidArgument, PermissionDenied
  // etcd 3.4 answers a request without a user, authentication on, with InvalidArgument and these words.
  const auto message = reply.find("message");
  const std::string said = message != reply.end() && message->is_string() ? message->get<std::string>() : "";
  return said.find("user name is empty") != std::string::npos ? Refusal::kAuthentication : Refusal::kOther;
}

std::ostream& operator<<(std::ostream& out, const RequestError& error) { return out << error.text; }

std::int64_t int_field(const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (!it->is_string()) return 0;
  try {
    return std::stoll(it->get<std::string>());
  } catch (const std::exception&) {
    return 0;
  }
}

// One POST, tried at each endpoint in turn from the preferred one. Owns itself through the async chain.
class GatewayClient::Request : public std::enable_shared_from_this<Request> {
 public:
  Request(asio::io_context& io, ssl::context* tls, const std::vector<Endpoint>& endpoints, std::size_t first,
          std::chrono::milliseconds timeout, std::function<void(std::size_t)> answered, std::string path,
          const json& body, Handler done)
      : io_(io), tls_context_(tls), endpoints_(endpoints), next_(first), timeout_(timeout),
        answered_(std::move(answered)), resolver_(io), stream_(io), timer_(io), done_(std::move(done)) {
    request_.method(http::verb::post);
    request_.target(path);
    request_.version(11);
    request_.set(http::field::content_type, "application/json");
    request_.set(http::field::connection, "close");
    request_.body() = body.dump();
    request_.prepare_payload();
  }

  void start() { try_endpoint(); }

  void cancel() {
    cancelled_ = true;
    stop_attempt();
  }

 private:
  void try_endpoint() {
    if (tried_ == endpoints_.size()) return finish(errors_, json());
    const Endpoint& e = endpoints_[next_ % endpoints_.size()];
    at_ = next_ % endpoints_.size();
    ++tried_;
    ++next_;
    request_.set(http::field::host, e.text());
    response_.emplace();
    response_->body_limit(kMaxReplyBytes);
    buffer_.clear();
    auto self = shared_from_this();
    const unsigned attempt = ++attempt_;
    timer_.expires_after(timeout_);
    timer_.async_wait([self, attempt](const boost::system::error_code& ec) {
      if (ec || self->attempt_ != attempt || self->cancelled_) return;
      self->timed_out_ = true;
      self->stop_attempt();
    });
    if (tls_context_) tls_stream_.emplace(io_, *tls_context_);
    resolver_.async_resolve(e.host, e.port, [self, attempt](const boost::system::error_code& ec,
                                                            const asio::ip::tcp::resolver::results_type& found) {
      if (!self->current(attempt)) return;
      if (ec) return self->failed("cannot resolve: " + ec_text(ec));
      auto& tcp = self->tls_stream_ ? self->tls_stream_->next_layer() : self->stream_;
      tcp.async_connect(found, [self, attempt](const boost::system::error_code& ec2, const asio::ip::tcp::endpoint&) {
        if (!self->current(attempt)) return;
        if (ec2) return self->failed(ec2);
        if (!self->tls_stream_) return self->exchange(self->stream_, attempt);
        self->handshake(attempt);
      });
    });
  }

  // TLS: the name or address we dialled must be in etcd's certificate (SNI sent for names), signed by the CA given.
  void handshake(unsigned attempt) {
    const std::string& host = endpoints_[at_].host;
    boost::system::error_code not_an_address;
    asio::ip::make_address(host, not_an_address);
    if (not_an_address)  // SSL_set_tlsext_host_name, without its macro's C cast
      SSL_ctrl(tls_stream_->native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(host.c_str()));
    tls_stream_->set_verify_callback(ssl::host_name_verification(host));
    auto self = shared_from_this();
    tls_stream_->async_handshake(ssl::stream_base::client, [self, attempt](const boost::system::error_code& ec) {
      if (!self->current(attempt)) return;
      if (ec) return self->failed("TLS handshake: " + ec_text(ec), /*tls=*/true);  // a timeout says so too
      self->exchange(*self->tls_stream_, attempt);
    });
  }

  template <typename Stream>
  void exchange(Stream& stream, unsigned attempt) {
    auto self = shared_from_this();
    http::async_write(stream, request_, [self, &stream, attempt](const boost::system::error_code& ec, std::size_t) {
      if (!self->current(attempt)) return;
      if (ec) return self->failed(ec);
      http::async_read(stream, self->buffer_, *self->response_,
                       [self, attempt](const boost::system::error_code& ec2, std::size_t) {
                         if (!self->current(attempt)) return;
                         if (ec2) return self->failed(ec2);
                         self->on_response();
                       });
    });
  }

  bool current(unsigned attempt) const { return !cancelled_ && attempt == attempt_; }

  void failed(const boost::system::error_code& ec) {
    if (timed_out_) return failed("no answer in " + std::to_string(timeout_.count()) + " ms");
    if (ec == http::error::body_limit)  // etcd's answers to ddprun's requests are a few kB
      return failed("an answer larger than " + std::to_string(kMaxReplyBytes >> 20) + " MiB: not etcd's", false,
                    /*malformed=*/true);
    // OpenSSL's own words ("certificate verify failed", "sslv3 alert bad certificate"), said to be TLS's
    const bool tls = ec.category() == asio::error::get_ssl_category();
    failed((tls ? "TLS: " : "") + ec_text(ec), tls);
  }

  void failed(const std::string& why, bool tls = false, bool malformed = false) {
    tls_failed_ = tls_failed_ || tls;
    malformed_ = malformed_ || malformed;
    errors_ += (errors_.empty() ? "" : "; ") + endpoints_[at_].text() + ": " + why;
    stop_attempt();
    ++attempt_;  // the stopped attempt's handlers, still queued, see they are stale
    try_endpoint();
  }

  void on_response() {
    const auto& res = response_->get();
    const unsigned status = res.result_int();
    // The parser's body_limit did not stop a 5 MiB answer in the test (issue 55): said here whatever the reader did.
    if (res.body().size() > kMaxReplyBytes)
      return failed("an answer larger than " + std::to_string(kMaxReplyBytes >> 20) + " MiB: not etcd's", false,
                    /*malformed=*/true);
    // Checked before it is parsed: the parser recurses once per level (issue 55: a million-deep answer overflowed
    // the stack). Not an answer etcd gives, at any status: the next endpoint is tried, and the job ends with it.
    if (!json_nesting_within(res.body(), kMaxReplyNesting))
      return failed("HTTP " + std::to_string(status) + ", an answer nested deeper than " +
                        std::to_string(kMaxReplyNesting) + " levels: not etcd's",
                    false, /*malformed=*/true);
    json reply = json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
    if (reply.is_discarded() || !reply.is_object()) {
      if (status >= 500) return failed("HTTP " + std::to_string(status));  // a proxy's error page, say: try another
      return failed("HTTP " + std::to_string(status) + ", an answer that is not a JSON object: not etcd's", false,
                    /*malformed=*/true);
    }
    if (status >= 500) {
      const auto said = reply.find("message");
      return failed("HTTP " + std::to_string(status) +
                    (said != reply.end() && said->is_string() ? " (" + said->get<std::string>() + ")" : ""));
    }
    stop_attempt();
    answered_(at_);
    if (status >= 400) {  // the request is wrong: every endpoint would say so
      std::string said;
      for (const char* key : {"message", "error"})
        if (const auto it = reply.find(key); said.empty() && it != reply.end() && it->is_string()) said = *it;
      return finish(endpoints_[at_].text() + ": HTTP " + std::to_string(status) + (said.empty() ? "" : ": " + said),
                    reply);
    }
    finish("", reply);
  }

  void stop_attempt() {
    boost::system::error_code ignored;
    timer_.cancel();
    resolver_.cancel();
    stream_.socket().close(ignored);
    if (tls_stream_) tls_stream_->next_layer().socket().close(ignored);
  }

  void finish(const std::string& error, const json& reply) {
    if (cancelled_) return;
    cancelled_ = true;  // once
    Handler done = std::move(done_);
    done(RequestError{error, !error.empty() && tls_failed_, !error.empty() && malformed_}, reply);
  }

  asio::io_context& io_;
  ssl::context* tls_context_;
  const std::vector<Endpoint>& endpoints_;
  std::size_t next_;
  std::size_t tried_ = 0;
  std::size_t at_ = 0;
  std::chrono::milliseconds timeout_;
  std::function<void(std::size_t)> answered_;
  asio::ip::tcp::resolver resolver_;
  boost::beast::tcp_stream stream_;                                          // plain HTTP
  std::optional<boost::beast::ssl_stream<boost::beast::tcp_stream>> tls_stream_;  // https: one per attempt
  asio::steady_timer timer_;
  http::request<http::string_body> request_;
  std::optional<http::response_parser<http::string_body>> response_;
  boost::beast::flat_buffer buffer_;
  Handler done_;
  std::string errors_;
  bool tls_failed_ = false;  // a TLS handshake or certificate check failed at an endpoint tried
  bool malformed_ = false;   // an endpoint answered with what etcd never sends
  unsigned attempt_ = 0;
  bool timed_out_ = false;
  bool cancelled_ = false;
};

namespace {
// Throws std::invalid_argument naming the option and the file.
std::unique_ptr<ssl::context> tls_context(const Tls& tls) {
  auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
  context->set_verify_mode(ssl::verify_peer);
  auto load = [](const char* what, const std::string& file, const std::function<void()>& use) {
    try {
      use();
    } catch (const boost::system::system_error& e) {
      throw std::invalid_argument(std::string("etcd TLS: cannot use --rdzv-conf ") + what + " " + file + ": " +
                                  e.code().message());
    }
  };
  if (tls.cacert.empty()) context->set_default_verify_paths();
  else load("cacert", tls.cacert, [&] { context->load_verify_file(tls.cacert); });
  if (!tls.cert.empty()) load("cert", tls.cert, [&] { context->use_certificate_chain_file(tls.cert); });
  if (!tls.key.empty()) load("key", tls.key, [&] { context->use_private_key_file(tls.key, ssl::context::pem); });
  return context;
}
}  // namespace

std::string check_tls(const Tls& tls) {
  if (!tls.enabled) return "";
  try {
    tls_context(tls);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

GatewayClient::GatewayClient(asio::io_context& io, std::vector<Endpoint> endpoints,
                             std::chrono::milliseconds per_endpoint_timeout, const Tls& tls)
    : io_(io), endpoints_(std::move(endpoints)), timeout_(per_endpoint_timeout) {
  if (endpoints_.empty()) throw std::invalid_argument("no etcd endpoint");
  if (sodium_init() < 0) throw std::runtime_error("libsodium failed to initialise");
  if (tls.enabled) tls_ = tls_context(tls);
}

GatewayClient::~GatewayClient() { cancel(); }

void GatewayClient::post(const std::string& path, const json& body, Handler done) {
  // Requests hold a reference to endpoints_: a client outlives its requests' handlers (cancel() in the
  // destructor stops them before they run).
  auto request = std::make_shared<Request>(io_, tls_.get(), endpoints_, preferred_, timeout_,
                                           [this](std::size_t at) { preferred_ = at; }, path, body,
                                           std::move(done));
  in_flight_.erase(std::remove_if(in_flight_.begin(), in_flight_.end(),
                                  [](const std::weak_ptr<Request>& r) { return r.expired(); }),
                   in_flight_.end());
  in_flight_.push_back(request);
  request->start();
}

void GatewayClient::cancel() {
  for (const auto& weak : in_flight_)
    if (auto r = weak.lock()) r->cancel();
  in_flight_.clear();
}

}  // namespace ddprun::etcd
