// What the SDK throws: one exception type carrying where it was raised, so the error file and ddprun's
// root-cause report can show "file:line" instead of only a message.
#pragma once

#include <stdexcept>
#include <string>

namespace ddprun::sdk {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string where = {})
      : std::runtime_error(what), where_(std::move(where)) {}
  // "file.cpp:42" where the error was raised, or empty.
  const std::string& where() const noexcept { return where_; }

 private:
  std::string where_;
};

namespace detail {
[[noreturn]] void raise(const char* file, int line, const std::string& what);
}  // namespace detail

}  // namespace ddprun::sdk

// Throws ddprun::sdk::Error with `what` (a std::string expression) when `cond` is false.
#define DDPRUN_SDK_CHECK(cond, what)                                   \
  do {                                                                 \
    if (!(cond)) ::ddprun::sdk::detail::raise(__FILE__, __LINE__, (what)); \
  } while (false)
