// Small text helpers shared by the state machine's and the client's messages.
#pragma once

#include <chrono>
#include <string>

namespace ddprun::rendezvous::text {

// "5.0 s"
std::string seconds(std::chrono::milliseconds duration);

// "host:port", with an IPv6 literal in brackets ("[fd42::1]:29400"), as users write endpoints.
std::string host_port(const std::string& host, unsigned port);

}  // namespace ddprun::rendezvous::text
