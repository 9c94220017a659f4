#include "rendezvous/json_fields.hpp"

#include "common/error.hpp"

namespace ddprun::rendezvous::json_fields {

namespace {
[[noreturn]] void bad(const char* key, const std::string& what) {
  throw ProtocolError(std::string("field \"") + key + "\" " + what);
}

const nlohmann::json* optional(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) throw ProtocolError("expected a JSON object");
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}
}  // namespace

const nlohmann::json& required(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) throw ProtocolError("expected a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) throw ProtocolError(std::string("missing field \"") + key + "\"");
  return *it;
}

std::int64_t get_int_in(const nlohmann::json& obj, const char* key, std::int64_t min, std::int64_t max) {
  const auto& value = required(obj, key);
  // Unsigned JSON numbers above INT64_MAX are out of every range we accept; reject before converting.
  if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(max))
    bad(key, "is out of range");
  if (!value.is_number_integer()) bad(key, "is not an integer");
  const auto n = value.get<std::int64_t>();
  if (n < min || n > max) bad(key, "= " + std::to_string(n) + " is out of range");
  return n;
}

int get_int_in(const nlohmann::json& obj, const char* key, int min, int max) {
  return static_cast<int>(get_int_in(obj, key, static_cast<std::int64_t>(min), static_cast<std::int64_t>(max)));
}

std::optional<int> get_optional_int_in(const nlohmann::json& obj, const char* key, int min, int max) {
  if (!optional(obj, key)) return std::nullopt;
  return get_int_in(obj, key, min, max);
}

std::string get_string(const nlohmann::json& obj, const char* key, std::size_t max_bytes) {
  const auto& value = required(obj, key);
  if (!value.is_string()) bad(key, "is not a string");
  const auto& text = value.get_ref<const std::string&>();
  if (text.size() > max_bytes) bad(key, "is longer than " + std::to_string(max_bytes) + " bytes");
  return text;
}

std::string get_optional_string(const nlohmann::json& obj, const char* key, std::size_t max_bytes) {
  if (!obj.is_object()) throw ProtocolError("expected a JSON object");
  if (obj.find(key) == obj.end()) return {};
  return get_string(obj, key, max_bytes);
}

bool is_host_text(const std::string& text) {
  if (text.size() > kMaxHostBytes) return false;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == ':' || c == '_' || c == '%' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string get_host(const nlohmann::json& obj, const char* key, bool allow_empty) {
  std::string text = get_string(obj, key, kMaxHostBytes);
  if (text.empty() && !allow_empty) bad(key, "is empty");
  if (!is_host_text(text)) bad(key, "is not a host name or address");
  return text;
}

std::string get_optional_host(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) throw ProtocolError("expected a JSON object");
  if (obj.find(key) == obj.end()) return {};
  return get_host(obj, key, /*allow_empty=*/true);
}

std::string get_hex(const nlohmann::json& obj, const char* key, std::size_t max_chars) {
  std::string text = get_string(obj, key, max_chars);
  if (text.empty() || text.find_first_not_of("0123456789abcdef") != std::string::npos) bad(key, "is not hex");
  return text;
}

bool get_bool(const nlohmann::json& obj, const char* key, bool fallback) {
  const nlohmann::json* value = optional(obj, key);
  if (!value) return fallback;
  if (!value->is_boolean()) bad(key, "is not a boolean");
  return value->get<bool>();
}

}  // namespace ddprun::rendezvous::json_fields
