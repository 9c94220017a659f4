#include "worker_sdk/world.hpp"

#include <cerrno>
#include <cstdlib>

#include "common/contract/worker_contract.hpp"
#include "worker_sdk/error.hpp"

namespace ddprun::sdk {

namespace detail {
void raise(const char* file, int line, const std::string& what) {
  throw Error(what, std::string(file) + ":" + std::to_string(line));
}
}  // namespace detail

namespace {

const char* require(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw Error(std::string("environment variable ") + name +
                " is not set: this program is a distributed worker; start it with ddprun "
                "(e.g. `ddprun --standalone --nproc-per-node 2 <program>`), or, if it supports embedded "
                "spawn, alone with --nproc N");
  }
  return value;
}

int to_int(const char* name, const char* text, int min) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > 1 << 30) {
    throw Error(std::string("environment variable ") + name + "='" + text + "' is not an integer >= " +
                std::to_string(min));
  }
  return static_cast<int>(v);
}

int int_or(const char* name, int fallback, int min) {
  const char* value = std::getenv(name);
  return value == nullptr || *value == '\0' ? fallback : to_int(name, value, min);
}

}  // namespace

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value == nullptr ? fallback : std::string(value);
}

bool WorldInfo::present_in_env() {
  return std::getenv(contract::kRank) != nullptr && std::getenv(contract::kWorldSize) != nullptr;
}

WorldInfo WorldInfo::from_env() {
  WorldInfo w;
  w.rank = to_int(contract::kRank, require(contract::kRank), 0);
  w.world_size = to_int(contract::kWorldSize, require(contract::kWorldSize), 1);
  w.local_rank = to_int(contract::kLocalRank, require(contract::kLocalRank), 0);
  w.local_world_size = to_int(contract::kLocalWorldSize, require(contract::kLocalWorldSize), 1);
  w.master_addr = require(contract::kMasterAddr);
  w.master_port = to_int(contract::kMasterPort, require(contract::kMasterPort), 1);
  w.node_rank = int_or(contract::kGroupRank, 0, 0);
  w.restart_count = int_or(contract::kRestartCount, 0, 0);
  w.error_file = env_or(contract::kErrorFile, "");
  if (w.rank >= w.world_size) {
    throw Error("RANK=" + std::to_string(w.rank) + " is not below WORLD_SIZE=" + std::to_string(w.world_size));
  }
  if (w.local_rank >= w.local_world_size) {
    throw Error("LOCAL_RANK=" + std::to_string(w.local_rank) + " is not below LOCAL_WORLD_SIZE=" +
                std::to_string(w.local_world_size));
  }
  if (w.master_port > 65535) throw Error("MASTER_PORT=" + std::to_string(w.master_port) + " is not a port");
  return w;
}

}  // namespace ddprun::sdk
