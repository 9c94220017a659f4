#include "rendezvous/address_race.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>

#include <netinet/in.h>

#include "rendezvous/text.hpp"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// One race, kept alive by its pending operations: a cancelled race's late completions find `done` empty.
struct AddressRace::Run : std::enable_shared_from_this<AddressRace::Run> {
  struct Attempt {
    tcp::endpoint endpoint;
    tcp::socket socket;
    std::string answer;  // empty: not started; "trying": connecting
    bool pending = false;
  };

  Run(asio::io_context& context, std::chrono::milliseconds between) : stagger(between), timer(context) {}

  std::chrono::milliseconds stagger;
  asio::steady_timer timer;
  std::deque<Attempt> attempts;  // a deque: sockets stay where they are while others are added
  std::size_t next = 0;
  std::function<void(const RaceResult&)> done;  // empty once finished or cancelled

  void launch_next() {
    if (!done || next >= attempts.size()) return;
    const std::size_t i = next++;
    Attempt& a = attempts[i];
    a.pending = true;
    a.answer = "no answer yet";
    a.socket.async_connect(a.endpoint, [self = shared_from_this(), i](error_code ec) { self->on_connect(i, ec); });
    if (next < attempts.size()) {
      timer.expires_after(stagger);
      timer.async_wait([self = shared_from_this()](error_code ec) {
        if (!ec) self->launch_next();
      });
    }
  }

  void on_connect(std::size_t i, error_code ec) {
    Attempt& a = attempts[i];
    a.pending = false;
    if (!done) return;
    // A TCP self-connect: nothing listens on a port of this machine's ephemeral range and the kernel picked that
    // very port as our source (simultaneous open). Held, it would keep a restarting server from binding it.
    error_code local_ec, remote_ec;
    if (!ec && a.socket.local_endpoint(local_ec) == a.socket.remote_endpoint(remote_ec) && !local_ec)
      ec = asio::error::connection_refused;
    if (!ec) return win(i);
    a.answer = ec == asio::error::connection_refused ? "refused" : ec.message();
    error_code ignored;
    a.socket.close(ignored);  // now: the port is free for a restarting server at once
    if (next < attempts.size()) {  // a failure starts the next address at once, not after the stagger
      timer.cancel();
      return launch_next();
    }
    for (const Attempt& other : attempts)
      if (other.pending) return;
    lose();
  }

  void win(std::size_t i) {
    attempts[i].answer = "connected";
    RaceResult result;
    result.ok = true;
    result.socket = &attempts[i].socket;
    result.endpoint = attempts[i].endpoint;
    finish(result, i);
  }

  void lose() {
    RaceResult result;
    result.why = attempts.size() == 1 ? attempts.front().answer : answers();
    if (result.why == "refused") result.why = "Connection refused";  // the OS's words, as for one address before
    finish(result, attempts.size());
  }

  void finish(const RaceResult& result, std::size_t keep) {
    auto deliver = std::move(done);
    done = nullptr;
    close_all(keep);
    deliver(result);
  }

  void close_all(std::size_t keep) {
    error_code ignored;
    timer.cancel();
    for (std::size_t i = 0; i < attempts.size(); ++i)
      if (i != keep) attempts[i].socket.close(ignored);
  }

  std::string answers() const {
    std::string out;
    for (const Attempt& a : attempts) {
      out += out.empty() ? "" : ", ";
      out += text::host_port(a.endpoint.address().to_string(), a.endpoint.port()) + " " +
             (a.answer.empty() ? "not tried yet" : a.answer);
    }
    return out;
  }
};

namespace {
void bind_source(tcp::socket& socket, const asio::ip::address& source, error_code& ec) {
#ifdef IP_BIND_ADDRESS_NO_PORT
  // The port is chosen at connect, by the whole 4-tuple: bound without it, each source would have its port
  // reserved for every destination, and a busy source address runs out of them sooner.
  const int on = 1;
  ::setsockopt(socket.native_handle(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof on);
#endif
  socket.bind(tcp::endpoint(source, 0), ec);
}
}  // namespace

void AddressRace::start(std::vector<tcp::endpoint> endpoints, std::function<void(const RaceResult&)> done) {
  cancel();
  run_ = std::make_shared<Run>(io_, stagger_);
  for (const tcp::endpoint& e : interleave(std::move(endpoints))) {
    run_->attempts.push_back(Run::Attempt{e, tcp::socket(io_), "", false});
    error_code ec;
    tcp::socket& socket = run_->attempts.back().socket;
    socket.open(e.protocol(), ec);
    if (!ec && source_ && source_->is_v6() == e.address().is_v6()) bind_source(socket, *source_, ec);
    if (ec) run_->attempts.back().answer = ec.message();  // async_connect reports it again, on the loop
  }
  run_->done = std::move(done);
  if (run_->attempts.empty()) {
    return asio::post(io_, [run = run_] {
      if (run->done) run->finish(RaceResult{false, nullptr, {}, "no address"}, 0);
    });
  }
  run_->launch_next();
}

void AddressRace::cancel() {
  if (!run_ || !run_->done) return;
  run_->done = nullptr;
  run_->close_all(run_->attempts.size());
}

std::string AddressRace::answers() const { return run_ ? run_->answers() : std::string(); }

std::size_t AddressRace::addresses() const { return run_ ? run_->attempts.size() : 0; }

std::vector<tcp::endpoint> AddressRace::interleave(std::vector<tcp::endpoint> endpoints) {
  if (endpoints.empty()) return endpoints;
  const bool first_v6 = endpoints.front().address().is_v6();
  std::vector<tcp::endpoint> same, other, out;
  for (tcp::endpoint& e : endpoints) (e.address().is_v6() == first_v6 ? same : other).push_back(std::move(e));
  for (std::size_t i = 0; i < same.size() || i < other.size(); ++i) {
    if (i < same.size()) out.push_back(same[i]);
    if (i < other.size()) out.push_back(other[i]);
  }
  return out;
}

}  // namespace ddprun::rendezvous
