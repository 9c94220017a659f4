// Typed field access for decoding untrusted JSON: every miss or type mismatch becomes a ProtocolError that
// names the field, so a malformed frame from a peer closes that connection with a readable reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ddprun::rendezvous::json_fields {

const nlohmann::json& required(const nlohmann::json& obj, const char* key);
std::int64_t get_int(const nlohmann::json& obj, const char* key);
std::optional<std::int64_t> get_optional_int(const nlohmann::json& obj, const char* key);
int get_int32(const nlohmann::json& obj, const char* key);  // rejects values outside int's range
std::optional<int> get_optional_int32(const nlohmann::json& obj, const char* key);
std::string get_string(const nlohmann::json& obj, const char* key);
std::string get_optional_string(const nlohmann::json& obj, const char* key);  // "" when absent
bool get_bool(const nlohmann::json& obj, const char* key, bool fallback);

}  // namespace ddprun::rendezvous::json_fields
