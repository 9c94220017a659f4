#include "agent/line_framer.hpp"

#include <cstring>

namespace ddprun::agent {

namespace {

// The end (one past) of the first piece in data[pos..n): through the first '\n', or through a '\r' that is
// not the first half of "\r\n". 0 when the data holds no complete piece.
// memchr, not a byte loop: the framer sits on the path of every byte a worker writes.
std::size_t piece_end(const char* data, std::size_t pos, std::size_t n) {
  const void* nl = std::memchr(data + pos, '\n', n - pos);
  const std::size_t limit = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - data) : n;
  std::size_t from = pos;
  while (const void* cr = std::memchr(data + from, '\r', limit - from)) {
    const std::size_t i = static_cast<std::size_t>(static_cast<const char*>(cr) - data);
    if (i + 1 == n || data[i + 1] != '\n') return i + 1;
    from = i + 1;
  }
  return nl ? limit + 1 : 0;
}

}  // namespace

void LineFramer::feed(const char* data, std::size_t n, std::string& out) {
  std::size_t pos = 0;
  if (n > 0 && after_cr_ && partial_.empty() && data[0] == '\n') {
    out += '\n';  // the other half of a "\r\n" split across reads
    pos = 1;
  }
  if (n > 0) after_cr_ = false;
  while (pos < n) {
    const std::size_t end = piece_end(data, pos, n);
    if (end == 0) break;
    after_cr_ = data[end - 1] == '\r';
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
                   const std::string& host, std::string& out) {
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
    else if (key == "host") out += host;
    else return false;
    i = close;
  }
  return true;
}

}  // namespace ddprun::agent
