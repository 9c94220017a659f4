#include "agent/round_fence.hpp"

namespace ddprun::agent {

bool round_fence_applies(const RoundFenceCase& c) {
  return c.elastic && !c.hosting && c.workers_running && c.server_silent;
}

std::string round_fence_reason(const std::string& lost_why) {
  return "the rendezvous server fell silent (" + lost_why +
         ") and this elastic job may re-form without this node: its workers stop now (SIGKILL), so that two rounds "
         "never run at once";
}

}  // namespace ddprun::agent
