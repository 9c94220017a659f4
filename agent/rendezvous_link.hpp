// This node's tie to the job: the rendezvous client, and the server too when this node hosts it (standalone,
// single node, static node 0, or the dynamic endpoint's own machine). Both share the agent's Asio loop.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "agent/agent_config.hpp"
#include "common/exit_codes.hpp"
#include "rendezvous/client.hpp"
#include "rendezvous/server.hpp"

namespace ddprun::agent {

// ddprun's exit code for a rendezvous outcome (common/exit_codes.hpp: kExitRdzv*).
int exit_code_of(const rendezvous::ClientError& error);

class RendezvousLink {
 public:
  RendezvousLink(boost::asio::io_context& io, const AgentConfig& config, rendezvous::ClientHandlers handlers);
  ~RendezvousLink();

  // Hosts the server when asked, then starts the client. Throws rendezvous::ConnectionError when the
  // server must be hosted here and cannot listen.
  void start();
  rendezvous::Client& client() { return *client_; }
  bool hosting() const { return server_ != nullptr; }
  std::uint16_t server_port() const;

  // Closes the client; a hosted server stays until the other nodes have read their last message (at most
  // 2 s), so that this node's exit never turns into "lost the server" elsewhere. Then `done`.
  void finish(std::function<void()> done);

 private:
  bool wants_munge(const RendezvousConfig& r);

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  rendezvous::ClientHandlers handlers_;
  Logger log_;
  std::unique_ptr<rendezvous::Server> server_;
  std::unique_ptr<rendezvous::Client> client_;
};

}  // namespace ddprun::agent
