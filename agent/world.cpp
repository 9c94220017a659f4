#include "agent/world.hpp"

#include "rendezvous/protocol.hpp"

namespace ddprun::agent {

void take_assignment(World& w, const rendezvous::Assignment& a) {
  w.node_rank = a.node_rank;
  w.nnodes = a.nnodes;
  w.rank_offset = a.rank_offset;
  w.world_size = a.world_size;
  w.nprocs = a.nprocs;
  w.master_addr = a.master_addr;
  w.master_port = a.master_port;
  w.run_id = a.run_id;
  w.restart_count = a.restart_count;
  w.max_restarts = a.max_restarts;
}

}  // namespace ddprun::agent
