// "host:port", "[v6 address]:port" or "host": the one split of an endpoint's text, for every option that takes
// one (--rdzv-endpoint for a rendezvous server or for etcd's client URLs).
#pragma once

#include <string>

namespace ddprun {

// Splits `text` into host and port text (port left as it was when `text` names none; brackets removed).
// Returns "" on success, else what is wrong ("missing ']'", "not HOST:PORT").
std::string split_host_port(const std::string& text, std::string& host, std::string& port);

}  // namespace ddprun
