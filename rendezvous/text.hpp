// Small text helpers shared by the state machine's and the client's messages.
#pragma once

#include <chrono>
#include <string>

namespace ddprun::rendezvous::text {

// "5.0 s"
std::string seconds(std::chrono::milliseconds duration);

}  // namespace ddprun::rendezvous::text
