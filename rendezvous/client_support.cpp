// The client's free functions: error raising, free-port picking, the summary block.
#include <cstring>
#include <sstream>

#include "common/process/ports.hpp"
#include "rendezvous/client.hpp"

namespace ddprun::rendezvous {

void ClientError::raise() const {
  switch (kind) {
    case ErrorKind::kRefused: throw RefusedError(message);
    case ErrorKind::kTimeout: throw TimeoutError(message);
    case ErrorKind::kLostServer: throw ConnectionError(message);
    case ErrorKind::kProtocol: throw ProtocolError(message);
    case ErrorKind::kUnavailable: break;  // a node could not start: the base error
  }
  throw RendezvousError(message);
}

std::uint16_t pick_free_port(const std::string& bind_address) {
  const int port = process::pick_master_port(bind_address);
  if (port <= 0) throw ConnectionError("cannot pick a free port on " + bind_address + ": " + std::strerror(-port));
  return static_cast<std::uint16_t>(port);
}

std::string format_summary(const Assignment& a, const std::string& host) {
  std::ostringstream out;
  int local = a.local_world_size();
  out << "rendezvous complete: run \"" << a.run_id << "\", round " << a.restart_count << " (--max-restarts "
      << a.max_restarts << ")"
      << "\n  node rank      " << a.node_rank << " of " << a.nnodes << " (host " << host << ")"
      << "\n  global ranks   " << a.rank_offset << ".." << a.rank_offset + local - 1 << " of world size "
      << a.world_size << " (" << local << " on this node)"
      << "\n  MASTER_ADDR    " << a.master_addr << "\n  MASTER_PORT    " << a.master_port
      << "\n  nprocs by node ";
  // Run-length form: 10k identical nodes print as one entry.
  std::size_t i = 0, runs = 0;
  while (i < a.nprocs.size()) {
    std::size_t j = i;
    while (j < a.nprocs.size() && a.nprocs[j] == a.nprocs[i]) ++j;
    if (++runs > 16) {
      out << " ...";
      break;
    }
    out << (runs > 1 ? ", " : "") << a.nprocs[i];
    if (j - i > 1) out << " x" << (j - i);
    i = j;
  }
  return out.str();
}

}  // namespace ddprun::rendezvous
