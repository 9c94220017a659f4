#include "agent/line_framer.hpp"

#include <cstring>

namespace ddprun::agent {

void LineFramer::feed(const char* data, std::size_t n, std::string& out) {
  std::size_t pos = 0;
  while (pos < n) {
    const void* hit = std::memchr(data + pos, '\n', n - pos);
    if (!hit) break;
    const std::size_t end = static_cast<std::size_t>(static_cast<const char*>(hit) - data) + 1;
    out += prefix_;
    if (!partial_.empty()) {
      out += partial_;
      partial_.clear();
    }
    out.append(data + pos, end - pos);
    pos = end;
  }
  if (pos < n) {
    partial_.append(data + pos, n - pos);
    while (partial_.size() >= max_line_) {
      out += prefix_;
      out.append(partial_, 0, max_line_);
      out += '\n';
      partial_.erase(0, max_line_);
    }
  }
}

void LineFramer::finish(std::string& out) {
  if (partial_.empty()) return;
  out += prefix_;
  out += partial_;
  out += '\n';
  partial_.clear();
}

bool expand_prefix(const std::string& format, int rank, int local_rank, int node_rank, const std::string& role,
                   std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}') return false;
    if (c != '{') {
      out += c;
      continue;
    }
    const std::size_t close = format.find('}', i);
    if (close == std::string::npos) return false;
    const std::string key = format.substr(i + 1, close - i - 1);
    if (key == "rank") out += std::to_string(rank);
    else if (key == "local_rank") out += std::to_string(local_rank);
    else if (key == "node_rank") out += std::to_string(node_rank);
    else if (key == "role") out += role;
    else return false;
    i = close;
  }
  return true;
}

}  // namespace ddprun::agent
