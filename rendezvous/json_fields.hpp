// Typed, bounded field access for decoding untrusted JSON: every miss, type mismatch or out-of-range value
// becomes a ProtocolError that names the field, so a malformed frame from a peer closes that connection
// with a readable reason. There is no unbounded accessor: every number has a range, every string a length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ddprun::rendezvous::json_fields {

// Host names (RFC 1123: 253) and address literals (IPv6 with a zone) fit; the set of characters is what
// those may contain, so a peer cannot put control characters or quotes into our logs and messages.
inline constexpr std::size_t kMaxHostBytes = 255;

const nlohmann::json& required(const nlohmann::json& obj, const char* key);
// An integer in [min, max]; int for ranges within int's.
std::int64_t get_int_in(const nlohmann::json& obj, const char* key, std::int64_t min, std::int64_t max);
int get_int_in(const nlohmann::json& obj, const char* key, int min, int max);
std::optional<int> get_optional_int_in(const nlohmann::json& obj, const char* key, int min, int max);
// A string of at most max_bytes.
std::string get_string(const nlohmann::json& obj, const char* key, std::size_t max_bytes);
std::string get_optional_string(const nlohmann::json& obj, const char* key, std::size_t max_bytes);  // "" if absent
// A host name or address: [A-Za-z0-9.:_%-], at most kMaxHostBytes.
std::string get_host(const nlohmann::json& obj, const char* key, bool allow_empty);
std::string get_optional_host(const nlohmann::json& obj, const char* key);  // "" when absent
// Lower-case hex of 1..max_chars characters (MACs, nonces).
std::string get_hex(const nlohmann::json& obj, const char* key, std::size_t max_chars);
bool get_bool(const nlohmann::json& obj, const char* key, bool fallback);

bool is_host_text(const std::string& text);

}  // namespace ddprun::rendezvous::json_fields
