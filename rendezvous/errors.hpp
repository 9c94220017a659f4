// Rendezvous errors beyond common/error.hpp's hierarchy, and the asynchronous form a Client reports.
#pragma once

#include <string>

#include "common/error.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous {

// The server refused this agent: wrong token, run id or protocol version, a duplicate or out-of-range
// node rank, a closed rendezvous. The message says which, fit to print.
class RefusedError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

// Delivered to ClientHandlers::on_error; raise() throws the matching exception for callers that prefer one:
// kRefused → RefusedError, kTimeout → TimeoutError, kLostServer → ConnectionError, kProtocol → ProtocolError.
struct ClientError {
  ErrorKind kind = ErrorKind::kLostServer;
  std::string message;

  [[noreturn]] void raise() const;
};

}  // namespace ddprun::rendezvous
