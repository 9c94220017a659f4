// Input generation for the rendezvous protocol fuzzer (fuzz_main.cpp): valid messages as seeds, and
// mutations of them at the byte level (what a broken or hostile peer can send) and at the JSON level
// (well-formed messages with one field wrong, which is where validation bugs live). Deterministic per seed.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun::rendezvous::fuzz {

using Rng = std::mt19937_64;

// Every message type either side sends, encoded as the real encoders do, in a few variants each.
std::vector<std::string> seed_payloads();

// Byte-level: flips, random bytes, inserted boundary tokens, deletions, duplications, splices, cuts.
std::string mutate_bytes(Rng& rng, std::string input, const std::vector<std::string>& corpus);

// JSON-level: one value somewhere in the message replaced (boundary numbers, odd strings, wrong types),
// or a key removed or added. Returns the input unchanged if it is not JSON.
std::string mutate_json(Rng& rng, const std::string& input);

// Pure noise of a random length.
std::string random_bytes(Rng& rng, std::size_t max_length);

}  // namespace ddprun::rendezvous::fuzz
