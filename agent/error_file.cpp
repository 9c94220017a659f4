#include "agent/error_file.hpp"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace ddprun::agent {
namespace {
constexpr std::size_t kMaxBytes = 64 * 1024;

std::string as_text(const nlohmann::json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }
}  // namespace

ErrorFileContents read_error_file(const std::string& path) {
  ErrorFileContents out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  out.raw.resize(kMaxBytes);
  in.read(out.raw.data(), static_cast<std::streamsize>(kMaxBytes));
  out.raw.resize(static_cast<std::size_t>(in.gcount()));
  if (out.raw.empty()) return out;
  out.present = true;
  const nlohmann::json j = nlohmann::json::parse(out.raw, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("message")) {
    const nlohmann::json& m = j["message"];
    if (m.is_object()) {
      if (m.contains("message")) out.message = as_text(m["message"]);
      if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
        const nlohmann::json& extra = m["extraInfo"];
        if (extra.contains("py_callstack")) out.where = as_text(extra["py_callstack"]);
        if (extra.contains("timestamp")) out.timestamp = as_text(extra["timestamp"]);
      }
    } else {
      out.message = as_text(m);
    }
  }
  if (out.message.empty()) out.message = out.raw.substr(0, 2000);
  return out;
}

}  // namespace ddprun::agent
