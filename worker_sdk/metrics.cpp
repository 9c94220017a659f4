#include "worker_sdk/metrics.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "worker_sdk/error.hpp"

namespace ddprun::sdk {
namespace {

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.6g", v);
  }
  return buf;
}

// Field names are the program's own identifiers; quotes and backslashes are escaped all the same.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool append) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
  if (fd_ < 0) throw Error("metrics: cannot open " + path + ": " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

std::string MetricsLog::format(const std::string& kind, const Fields& fields) {
  std::string line = "{\"kind\":" + quoted(kind);
  for (const auto& [name, value] : fields) line += "," + quoted(name) + ":" + number(value);
  return line + "}";
}

void MetricsLog::record(const std::string& kind, const Fields& fields) const {
  if (fd_ < 0) return;
  const std::string line = format(kind, fields) + "\n";
  // Metrics are a by-product: a full disk must not kill the training run, so a failed write is dropped.
  ssize_t rc;
  do {
    rc = ::write(fd_, line.data(), line.size());
  } while (rc < 0 && errno == EINTR);
}

}  // namespace ddprun::sdk
