#include "rendezvous/remembered_round.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/fnv1a.hpp"
#include "common/json_depth.hpp"

namespace ddprun::rendezvous {
using nlohmann::json;

namespace {
constexpr const char* kFormat = "ddprun-rdzv/1 remembered round";
constexpr std::size_t kMaxFileBytes = 64u << 20;  // 1M nodes' seats with room; a file larger is not ours

bool is_seat(const std::string& s) {
  return s.empty() || (s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos);
}
}  // namespace

std::string remembered_round_path(const std::string& dir, const std::string& run_id, int port) {
  return dir + "/rdzv-" + fnv1a_hex(run_id) + "-" + std::to_string(port) + ".round";
}

std::optional<RememberedRound> decode_remembered_round(const std::string& text, const std::string& run_id,
                                                       const std::string& where, std::string& problem) {
  try {
    // From a file, or from etcd (a host's successor reads it): hostile until checked. The deepest a host writes is
    // 3 levels; the parser recurses once per level (issue 55).
    if (!json_nesting_within(text, 8)) throw std::runtime_error("nested deeper than a remembered round");
    const json j = json::parse(text);
    if (j.at("format").get<std::string>() != kFormat) throw std::runtime_error("not a remembered round");
    if (j.at("run_id").get<std::string>() != run_id) {
      problem = where + " is of another run id";
      return std::nullopt;
    }
    RememberedRound r;
    ResumeClaim& c = r.round;
    c.restart_count = j.at("restart_count").get<int>();
    c.nnodes = j.at("nnodes").get<int>();
    c.world_size = j.at("world_size").get<int>();
    c.master_addr = j.at("master_addr").get<std::string>();
    c.master_port = j.at("master_port").get<int>();
    c.fingerprint = j.at("nprocs").get<std::string>();
    r.seats = j.at("seats").get<std::vector<std::string>>();
    if (c.nnodes < 1 || c.nnodes > kMaxNodes || static_cast<int>(r.seats.size()) != c.nnodes)
      throw std::runtime_error("its seats are not one per node");
    for (const std::string& seat : r.seats)
      if (!is_seat(seat)) throw std::runtime_error("a seat is not 64 hex digits");
    if (j.contains("hosts")) {  // absent in rounds kept before the hosts were
      r.hosts = j.at("hosts").get<std::vector<std::string>>();
      if (r.hosts.size() != r.seats.size()) throw std::runtime_error("its hosts are not one per node");
      for (std::string& host : r.hosts)
        if (host.size() > 255) host.resize(255);
    }
    return r;
  } catch (const std::exception& e) {
    problem = where + " is not a round a rendezvous server wrote (" + e.what() + "): ignored";
    return std::nullopt;
  }
}

std::string encode_remembered_round(const std::string& run_id, const RememberedRound& round) {
  const ResumeClaim& c = round.round;
  return json{{"format", kFormat},           {"run_id", run_id},
              {"restart_count", c.restart_count}, {"nnodes", c.nnodes},
              {"world_size", c.world_size},       {"master_addr", c.master_addr},
              {"master_port", c.master_port},     {"nprocs", c.fingerprint},
              {"seats", round.seats},             {"hosts", round.hosts}}
             .dump() + "\n";
}

std::optional<RememberedRound> read_remembered_round(const std::string& path, const std::string& run_id,
                                                     std::string& problem) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) problem = "cannot read " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::string text;
  char buffer[65536];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0 && text.size() < kMaxFileBytes;)
    text.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return decode_remembered_round(text, run_id, path, problem);
}

bool write_remembered_round(const std::string& path, const std::string& run_id, const RememberedRound& round,
                            std::string& problem) {
  const std::string text = encode_remembered_round(run_id, round);
  const std::string temporary = path + ".new";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  for (std::size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  if (fd >= 0 && ::close(fd) != 0) ok = false;
  if (ok) ok = ::rename(temporary.c_str(), path.c_str()) == 0;
  if (!ok) {
    problem = "cannot keep the round in " + path + ": " + std::strerror(errno);
    ::unlink(temporary.c_str());
    ::unlink(path.c_str());  // an older round must not outlive this one
  }
  return ok;
}

}  // namespace ddprun::rendezvous
