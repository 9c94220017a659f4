// Hang views for the verdict's tests (hang_verdict_test.cpp, state_machine_hang_test.cpp): a rank's beat as its
// agent reports it, with its stacks' collective, and a node's view.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous::testing {

inline RankBeat beat(int rank, std::int64_t step, std::int64_t silent_ms, bool hung = true) {
  RankBeat r;
  r.rank = rank;
  r.local_rank = rank % 2;
  r.pid = 1000 + rank;
  r.step = step;
  r.silent_ms = silent_ms;
  r.hung = hung;
  return r;
}

inline RankBeat in(RankBeat r, std::string collective) {  // with its Python stack: in that call ("" = none)
  r.python_stack = true;
  r.collective = std::move(collective);
  return r;
}

inline HangViewMsg view(std::vector<RankBeat> ranks, bool suspect, std::string stacks) {
  HangViewMsg v;
  v.suspect = suspect;
  v.ranks = std::move(ranks);
  v.stacks = std::move(stacks);
  return v;
}

}  // namespace ddprun::rendezvous::testing
