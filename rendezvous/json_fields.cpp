#include "rendezvous/json_fields.hpp"

#include <limits>

#include "common/error.hpp"

namespace ddprun::rendezvous::json_fields {

const nlohmann::json& required(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) throw ProtocolError("expected a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) throw ProtocolError(std::string("missing field \"") + key + "\"");
  return *it;
}

std::int64_t get_int(const nlohmann::json& obj, const char* key) {
  const auto& value = required(obj, key);
  if (!value.is_number_integer()) throw ProtocolError(std::string("field \"") + key + "\" is not an integer");
  return value.get<std::int64_t>();
}

std::optional<std::int64_t> get_optional_int(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) throw ProtocolError("expected a JSON object");
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  return get_int(obj, key);
}

int get_int32(const nlohmann::json& obj, const char* key) {
  std::int64_t value = get_int(obj, key);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max())
    throw ProtocolError(std::string("field \"") + key + "\" is out of range");
  return static_cast<int>(value);
}

std::optional<int> get_optional_int32(const nlohmann::json& obj, const char* key) {
  if (!get_optional_int(obj, key)) return std::nullopt;
  return get_int32(obj, key);
}

std::string get_string(const nlohmann::json& obj, const char* key) {
  const auto& value = required(obj, key);
  if (!value.is_string()) throw ProtocolError(std::string("field \"") + key + "\" is not a string");
  return value.get<std::string>();
}

std::string get_optional_string(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) throw ProtocolError("expected a JSON object");
  if (obj.find(key) == obj.end()) return {};
  return get_string(obj, key);
}

bool get_bool(const nlohmann::json& obj, const char* key, bool fallback) {
  if (!obj.is_object()) throw ProtocolError("expected a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  if (!it->is_boolean()) throw ProtocolError(std::string("field \"") + key + "\" is not a boolean");
  return it->get<bool>();
}

}  // namespace ddprun::rendezvous::json_fields
