// A typical worker failure, shared by the protocol tests and the fuzzer's seeds.
#pragma once

#include "rendezvous/failure.hpp"

namespace ddprun::rendezvous::testing {

inline Failure sample_failure() {
  Failure f;
  f.node_rank = 1;
  f.host = "gpu7";
  f.rank = 5;
  f.local_rank = 1;
  f.pid = 4242;
  f.exit_code = 3;
  f.time_unix_ms = 1700000000123;
  f.error_file_contents = R"({"message": "boom"})";
  return f;
}

}  // namespace ddprun::rendezvous::testing
