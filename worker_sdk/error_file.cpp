#include "worker_sdk/error_file.hpp"

#include <c10/util/Exception.h>
#include <cxxabi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>

#include "common/contract/worker_contract.hpp"
#include "worker_sdk/error.hpp"
#include "worker_sdk/world.hpp"

namespace ddprun::sdk {
namespace {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string default_where() {
  std::string where = "main";
  if (const char* rank = std::getenv("RANK")) where += " (rank " + std::string(rank) + ")";
  return where + " pid " + std::to_string(::getpid());
}

}  // namespace

ErrorRecord describe_exception(const std::exception_ptr& error) {
  ErrorRecord r;
  r.timestamp = static_cast<long long>(std::time(nullptr));
  r.where = default_where();
  const std::type_info* type = nullptr;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    r.type = "ddprun::sdk::Error";
    r.message = e.what();
    if (!e.where().empty()) r.where = e.where() + " in " + r.where;
  } catch (const c10::Error& e) {
    // LibTorch's what() carries a multi-line C++ backtrace; the message and the raising site suffice.
    r.message = e.what_without_backtrace();
    type = &typeid(e);
  } catch (const std::exception& e) {
    r.message = e.what();
    type = &typeid(e);
  } catch (...) {
    type = abi::__cxa_current_exception_type();  // valid only inside this handler
    r.message = "exception not derived from std::exception";
  }
  if (r.type.empty()) r.type = type != nullptr ? demangle(type->name()) : "unknown";
  return r;
}

std::string error_json(const ErrorRecord& record) {
  namespace c = ddprun::contract;
  const auto key = [](const char* name) { return std::string("\"") + name + "\": "; };
  return "{" + key(c::kErrorMessageKey) + "{" + key(c::kErrorMessageKey) + "\"" +
         json_escape(record.type + ": " + record.message) + "\", " + key(c::kErrorExtraInfoKey) + "{" +
         key(c::kErrorCallstackKey) + "\"" + json_escape(record.where) + "\", " + key(c::kErrorTimestampKey) + "\"" +
         std::to_string(record.timestamp) + "\"}}}\n";
}

void write_error_file(const std::string& path, const ErrorRecord& record) {
  if (path.empty()) return;
  std::ofstream out(path, std::ios::trunc);
  out << error_json(record);
  out.flush();
  if (!out) std::cerr << "ddprun sdk: could not write error file " << path << "\n";
}

int run_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (...) {
    ErrorRecord r = describe_exception(std::current_exception());
    std::cerr << "error: " << r.type << ": " << r.message << " (at " << r.where << ")" << std::endl;
    write_error_file(env_or("TORCHELASTIC_ERROR_FILE", ""), r);
    return 1;
  }
}

}  // namespace ddprun::sdk
