#include "rendezvous/recorded_end.hpp"

#include <nlohmann/json.hpp>

#include "common/json_depth.hpp"
#include "rendezvous/state_machine.hpp"

namespace ddprun::rendezvous {
using nlohmann::json;

namespace {
constexpr const char* kFormat = "ddprun-job-end/1";
// A root cause carries an error file of at most kMaxErrorFileBytes and a message of kMaxMessageBytes.
constexpr std::size_t kMaxRecordBytes = 2 * kMaxErrorFileBytes + kMaxMessageBytes;
}  // namespace

std::optional<RecordedEnd> recorded_end_of(const RendezvousState& state, const std::string& host,
                                           std::int64_t now_unix_ms) {
  if (state.phase != Phase::kComplete && state.phase != Phase::kStopped) return std::nullopt;
  RecordedEnd end;
  end.complete = state.phase == Phase::kComplete;
  end.noticed = end.complete && state.noticed;
  if (!end.complete) end.root_cause = state.root_cause;
  if (!end.complete && !end.root_cause) end.reason = "the rendezvous ended before any round formed";
  end.host = host;
  end.time_unix_ms = now_unix_ms;
  return end;
}

std::string encode_recorded_end(const std::string& run_id, const RecordedEnd& end) {
  json j = {{"format", kFormat}, {"run_id", run_id}, {"complete", end.complete}, {"reason", end.reason},
            {"host", end.host}, {"time_unix_ms", end.time_unix_ms}};
  if (end.root_cause) j["root_cause"] = *end.root_cause;
  if (end.noticed) j["noticed"] = true;
  return j.dump();
}

std::optional<RecordedEnd> decode_recorded_end(const std::string& text, const std::string& run_id,
                                               std::string& problem) {
  if (text.size() > kMaxRecordBytes) {
    problem = "the job's end recorded in etcd is " + std::to_string(text.size()) + " bytes, more than a host writes";
    return std::nullopt;
  }
  try {
    // The parser recurses once per level: a record half a megabyte deep would overflow the stack (issue 55). A
    // host's record nests 3 levels.
    if (!json_nesting_within(text, 8)) throw std::runtime_error("nested deeper than a job's end");
    const json j = json::parse(text);
    if (!j.is_object() || j.value("format", std::string()) != kFormat) throw std::runtime_error("not a job's end");
    if (j.at("run_id").get<std::string>() != run_id) throw std::runtime_error("of another run id");
    RecordedEnd end;
    end.complete = j.at("complete").get<bool>();
    end.reason = j.at("reason").get<std::string>().substr(0, kMaxMessageBytes);
    end.host = j.at("host").get<std::string>().substr(0, 255);
    end.time_unix_ms = j.at("time_unix_ms").get<std::int64_t>();
    end.noticed = end.complete && j.value("noticed", false);
    if (j.contains("root_cause")) end.root_cause = j.at("root_cause").get<Failure>();
    if (!end.complete && !end.root_cause && end.reason.empty()) throw std::runtime_error("no outcome");
    return end;
  } catch (const std::exception& e) {
    problem = std::string("the job's end recorded in etcd is not one a ddprun host wrote (") + e.what() + ")";
    return std::nullopt;
  }
}

std::string describe(const RecordedEnd& end) {
  if (end.complete) return end.noticed ? "the job completed after a scheduler's notice (preempted)" : "the job completed";
  if (end.root_cause) return "the job failed: " + describe(*end.root_cause);
  return "the job ended: " + end.reason;
}

}  // namespace ddprun::rendezvous
