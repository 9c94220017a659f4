#include "common/error.hpp"

#include <cstring>

namespace ddprun {

SystemError::SystemError(const std::string& call, int err)
    : Error(call + ": " + std::strerror(err)), err_(err) {}

namespace detail {
void check_failed(const char* file, int line, const std::string& what) {
  throw std::logic_error(std::string("ddprun internal check failed at ") + file + ":" + std::to_string(line) +
                         ": " + what);
}
}  // namespace detail

}  // namespace ddprun
