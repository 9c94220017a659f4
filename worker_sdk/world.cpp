#include "worker_sdk/world.hpp"

#include <cerrno>
#include <cstdlib>

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
  return std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr;
}

WorldInfo WorldInfo::from_env() {
  WorldInfo w;
  w.rank = to_int("RANK", require("RANK"), 0);
  w.world_size = to_int("WORLD_SIZE", require("WORLD_SIZE"), 1);
  w.local_rank = to_int("LOCAL_RANK", require("LOCAL_RANK"), 0);
  w.local_world_size = to_int("LOCAL_WORLD_SIZE", require("LOCAL_WORLD_SIZE"), 1);
  w.master_addr = require("MASTER_ADDR");
  w.master_port = to_int("MASTER_PORT", require("MASTER_PORT"), 1);
  w.node_rank = int_or("GROUP_RANK", 0, 0);
  w.restart_count = int_or("TORCHELASTIC_RESTART_COUNT", 0, 0);
  w.error_file = env_or("TORCHELASTIC_ERROR_FILE", "");
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
