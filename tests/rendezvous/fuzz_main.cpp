// rendezvous_fuzz: random and mutated-valid input for the framing decoder, both message decoders and the
// state machine, with no libFuzzer needed. Anything but a ProtocolError escaping a decoder, a decoded
// message outside its documented bounds, or a server message the state machine emits that a client could
// not decode, is a failure: the input is printed (hex) and the exit status is 1. Sanitizer builds turn
// memory errors and UB into failures too (scripts/fuzz_rendezvous.sh).
//
//   rendezvous_fuzz [--seed S] [--inputs N] [--seconds T]     (defaults: a time-based seed, no input limit,
//                                                              10 s; whichever limit comes first ends the run)
// The same seed replays the same inputs.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>

#include "common/error.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/framing.hpp"
#include "rendezvous/state_machine.hpp"
#include "tests/rendezvous/fuzz_mutate.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::fuzz;

namespace {

struct Failed {
  std::string what;
};

void expect(bool ok, const std::string& what) {
  if (!ok) throw Failed{what};
}

std::string hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += {kDigits[c >> 4], kDigits[c & 0xf]};
  return out;
}

void check_failure(const Failure& f) {
  const int status = exit_status_of(f);
  expect(status >= 1 && status <= 255, "exit status out of 1..255");
  expect((f.rank < 0) == (f.local_rank < 0), "rank/local rank mix");
  expect(!f.signal || (*f.signal >= 1 && *f.signal <= 64), "signal out of range");
  expect(!f.exit_code || (*f.exit_code >= 0 && *f.exit_code <= 255), "exit code out of range");
  (void)describe(f);
}

// Decodes as a client message; if it decodes, its bounds hold and it re-encodes to something that decodes.
std::optional<ClientMessage> check_client(const std::string& payload) {
  try {
    ClientMessage m = decode_client_message(payload);
    if (auto* f = std::get_if<FailureMsg>(&m)) check_failure(f->failure);
    decode_client_message(encode(m));
    return m;
  } catch (const ProtocolError&) {
    return std::nullopt;
  }
}

void check_server(const std::string& payload) {
  try {
    ServerMessage m = decode_server_message(payload);
    if (auto* a = std::get_if<Assignment>(&m)) {
      expect(a->rank_offset + a->local_world_size() <= a->world_size, "assignment ranks beyond the world size");
      expect(a->master_port >= 1 && a->master_port <= 65535, "master port out of range");
    }
    if (auto* s = std::get_if<StopMsg>(&m)) check_failure(s->root_cause);
  } catch (const ProtocolError&) {
  }
}

// The payload as a frame stream fed in random pieces: what arrives whole must come out unchanged.
void check_framing(Rng& rng, const std::string& payload) {
  const std::size_t limit = std::uniform_int_distribution<std::size_t>(0, 2)(rng) == 0 ? 16 : kHandshakeMaxFrameBytes;
  std::string stream = encode_frame(payload, 1 << 24) + encode_frame("x");
  if (rng() % 8 == 0) stream = mutate_bytes(rng, stream, {payload});
  FrameDecoder decoder(limit);
  try {
    for (std::size_t at = 0; at < stream.size();) {
      const std::size_t n = 1 + rng() % 700;
      decoder.feed(std::string_view(stream).substr(at, n));
      at += n;
      while (auto p = decoder.next()) expect(p->size() <= limit, "frame over the limit handed out");
    }
  } catch (const ProtocolError&) {
  }
}

// One small job whose events come from decoded fuzz input. Whatever the peers say, what the server sends
// must decode at a client, and a root cause must map to a failing exit status.
class Job {
 public:
  Job() : state_(config(), Clock::time_point{}) {}

  void feed(Rng& rng, const ClientMessage& message) {
    const ConnId conn = 1 + rng() % 3;
    now_ += std::chrono::milliseconds(rng() % 400);
    for (const Action& action : step(state_, event_for(rng, conn, message), Now{now_, 1'700'000'000'000}))
      check(action);
    if (state_.root_cause) check_failure(*state_.root_cause);
  }

  bool finished() const { return state_.phase == Phase::kStopped || state_.phase == Phase::kComplete; }

 private:
  static JobConfig config() {
    JobConfig c;
    c.run_id = "job42";
    c.token = "tok";
    c.min_nodes = 2;
    c.max_nodes = 3;
    c.max_restarts = 1;
    return c;
  }

  static Event event_for(Rng& rng, ConnId conn, const ClientMessage& message) {
    if (auto* h = std::get_if<HelloMsg>(&message)) {
      Hello hello{conn, "00ff", *h, "10.0.0.9", "10.0.0.1", false, {}};
      if (rng() % 2) hello.hello.mac = compute_mac("tok", "00ff", h->run_id);  // past auth, into the rules
      return hello;
    }
    if (auto* f = std::get_if<FailureMsg>(&message)) return FailureReport{conn, f->failure};
    if (auto* d = std::get_if<NodeDoneMsg>(&message)) return NodeDone{conn, d->noticed};
    if (auto* s = std::get_if<StoppedMsg>(&message)) return NodeStopped{conn, s->master_port};
    if (auto* v = std::get_if<HangViewMsg>(&message)) return HangReport{conn, *v};
    if (auto* r = std::get_if<RoundReadyMsg>(&message)) return RoundReady{conn, r->round};
    if (rng() % 4 == 0) return Disconnected{conn, "fuzz"};
    if (rng() % 4 == 0) return Tick{};
    return Heartbeat{conn};
  }

  static void check(const Action& action) {
    auto decodes = [](const std::string& payload) {
      try {
        decode_server_message(payload);
      } catch (const ProtocolError& e) {
        throw Failed{std::string("the server sent what a client cannot decode: ") + e.what() + ": " + payload};
      }
    };
    if (auto* send = std::get_if<Send>(&action)) decodes(encode(send->message));
    if (auto* broadcast = std::get_if<Broadcast>(&action)) decodes(encode(broadcast->message));
    if (auto* assign = std::get_if<SendAssignments>(&action))
      for (const Slot& slot : assign->slots) decodes(encode_assignment(encode_round(assign->round), slot.node_rank, slot.rank_offset));
  }

  RendezvousState state_;
  Clock::time_point now_{};
};

std::string next_input(Rng& rng, const std::vector<std::string>& seeds) {
  const std::string& seed = seeds[rng() % seeds.size()];
  switch (rng() % 10) {
    case 0: case 1: case 2: case 3: return mutate_json(rng, seed);
    case 4: case 5: case 6: return mutate_bytes(rng, seed, seeds);
    case 7: return mutate_bytes(rng, mutate_json(rng, seed), seeds);
    case 8: return random_bytes(rng, 64);
    default: return seed;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::uint64_t max_inputs = 0;  // 0: no limit
  double seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--inputs")) max_inputs = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--seconds")) seconds = std::strtod(argv[i + 1], nullptr);
    else { std::cerr << "usage: rendezvous_fuzz [--seed S] [--inputs N] [--seconds T]\n"; return 2; }
  }
  std::cout << "rendezvous_fuzz: seed " << seed << std::endl;
  Rng rng(seed);
  const std::vector<std::string> seeds = seed_payloads();
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(seconds));
  auto job = std::make_unique<Job>();
  std::uint64_t n = 0, decoded = 0;
  std::string input;
  try {
    for (; max_inputs == 0 || n < max_inputs; ++n) {
      if (n % 256 == 0 && std::chrono::steady_clock::now() >= deadline) break;
      input = next_input(rng, seeds);
      check_framing(rng, input);
      check_server(input);
      if (auto message = check_client(input)) {
        ++decoded;
        job->feed(rng, *message);
        if (job->finished() || n % 2000 == 0) job = std::make_unique<Job>();
      }
    }
  } catch (const Failed& f) {
    std::cerr << "rendezvous_fuzz: FAILED at input " << n << " (seed " << seed << "): " << f.what << "\ninput (hex): " << hex(input) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "rendezvous_fuzz: FAILED at input " << n << " (seed " << seed << "): unexpected exception: "
              << e.what() << "\ninput (hex): " << hex(input) << "\n";
    return 1;
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rendezvous_fuzz: %llu inputs (%llu decoded as client messages) in %.1f s, seed %llu: no failures\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(decoded), took,
              static_cast<unsigned long long>(seed));
  return 0;
}
