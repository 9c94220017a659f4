#include "agent/line_framer.hpp"

#include <string.h>  // memrchr

#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/write_queue.hpp"

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

// The end (one past) of the last piece in data[0..n), 0 when there is none: every piece ends at a '\n' or a
// '\r', and the last '\n' or '\r' always ends one (a '\r' is only skipped when a '\n' follows it).
std::size_t last_piece_end(const char* data, std::size_t n) {
  const void* nl = ::memrchr(data, '\n', n);
  const void* cr = ::memrchr(data, '\r', n);
  const std::size_t a = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - data) + 1 : 0;
  const std::size_t b = cr ? static_cast<std::size_t>(static_cast<const char*>(cr) - data) + 1 : 0;
  return a > b ? a : b;
}

// The prefixed lines of a flood, the common case, at a few ns a line (memchr and two memcpy calls a line cost
// ~15 ns, 0.3 s of a core for 1.6 GB of 100-byte lines). Emits prefix + line for each line of data[pos..n)
// that ends in '\n' and holds no '\r'; returns where it stopped: the end, the start of a line that holds a '\r'
// (the caller's careful loop takes it from there), or the start of the incomplete last line.
constexpr std::size_t kSlack = 16;  // room a 16-byte store may use past what it means to write

#if defined(__SSE2__)
inline void copy_line(char* dst, const char* src, std::size_t len) {
  if (len < 16) {
    std::memcpy(dst, src, len);
    return;
  }
  for (std::size_t k = 0; k + 16 <= len; k += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + len - 16),
                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + len - 16)));
}

std::size_t prefix_lines(const char* data, std::size_t pos, std::size_t n, const std::string& prefix, Buffer& out) {
  const std::size_t plen = prefix.size();
  if (plen > 16) return pos;  // an unusual prefix: the careful loop
  alignas(16) char padded[16] = {};
  std::memcpy(padded, prefix.data(), plen);
  const __m128i pfx = _mm_load_si128(reinterpret_cast<const __m128i*>(padded));
  const __m128i nl = _mm_set1_epi8('\n');
  const __m128i cr = _mm_set1_epi8('\r');
  std::size_t line = pos;  // the start of the line being scanned
  for (std::size_t i = pos; i < n; i += 16) {
    std::uint32_t nl_mask, cr_mask;
    if (i + 16 <= n) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i));
      nl_mask = static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, nl)));
      cr_mask = static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, cr)));
    } else {  // the last few bytes: never read past the data
      nl_mask = cr_mask = 0;
      for (std::size_t k = i; k < n; ++k) {
        nl_mask |= static_cast<std::uint32_t>(data[k] == '\n') << (k - i);
        cr_mask |= static_cast<std::uint32_t>(data[k] == '\r') << (k - i);
      }
    }
    while (nl_mask != 0) {
      const std::size_t end = i + static_cast<std::size_t>(__builtin_ctz(nl_mask)) + 1;
      const std::uint32_t before = nl_mask & (~nl_mask + 1);  // lowest set bit: this '\n'
      if ((cr_mask & (before - 1)) != 0) return line;         // a '\r' in this line: the careful loop
      cr_mask &= ~((before << 1) - 1);
      nl_mask &= nl_mask - 1;
      const std::size_t len = end - line;
      out.reserve(out.size() + plen + len + kSlack);
      char* dst = out.data() + out.size();
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), pfx);  // plen bytes meant, the rest overwritten next
      copy_line(dst + plen, data + line, len);
      out.resize(out.size() + plen + len);
      line = end;
    }
    if (cr_mask != 0) return line;
  }
  return line;
}
#else
std::size_t prefix_lines(const char*, std::size_t pos, std::size_t, const std::string&, Buffer&) { return pos; }
#endif

}  // namespace

void LineFramer::cut_overlong(Buffer& out) {
  while (partial_.size() >= max_line_) {
    out.append(prefix_);
    out.append(partial_.data(), max_line_);
    out.push_back('\n');
    partial_.erase(0, max_line_);
  }
}

void LineFramer::feed(const char* data, std::size_t n, Buffer& out) {
  if (n == 0) return;
  if (prefix_.empty()) {  // the pieces' bytes in one go: only the last piece's end matters
    const std::size_t end = last_piece_end(data, n);
    if (end > 0) {
      out.append(partial_);
      partial_.clear();
      out.append(data, end);
      after_cr_ = data[end - 1] == '\r';
    } else {
      after_cr_ = false;
    }
    partial_.append(data + end, n - end);
    return cut_overlong(out);
  }
  // Room for ~100-byte lines with their prefixes; shorter lines grow `out` as they come.
  out.reserve(out.size() + partial_.size() + n + (n / 64 + 2) * prefix_.size() + kSlack);
  std::size_t pos = 0;
  if (after_cr_ && partial_.empty() && data[0] == '\n') {
    out.push_back('\n');  // the other half of a "\r\n" split across reads
    pos = 1;
  }
  after_cr_ = false;
  for (bool fast = partial_.empty(); pos < n; fast = true) {
    if (fast) {
      const std::size_t next = prefix_lines(data, pos, n, prefix_, out);
      if (next != pos) after_cr_ = false;  // the last piece emitted ended in '\n'
      pos = next;
    }
    const std::size_t end = pos < n ? piece_end(data, pos, n) : 0;
    if (end == 0) break;
    after_cr_ = data[end - 1] == '\r';
    out.append(prefix_);
    if (!partial_.empty()) {
      out.append(partial_);
      partial_.clear();
    }
    out.append(data + pos, end - pos);
    pos = end;
  }
  if (pos < n) {
    partial_.append(data + pos, n - pos);
    cut_overlong(out);
  }
}

void LineFramer::feed(const char* data, std::size_t n, std::string& out) {
  Buffer b;
  feed(data, n, b);
  out.append(b.data(), b.size());
}

void LineFramer::frame_in_place(Buffer& buf) {
  const std::size_t head = partial_.size();
  if (head != 0) std::memcpy(buf.data(), partial_.data(), head);
  partial_.clear();
  const std::size_t n = buf.size();
  if (n == head) {  // nothing new: the line stays carried
    partial_.assign(buf.data(), n);
    buf.clear();
    return;
  }
  // The carried line holds no piece end, so the last one is in the new bytes, or there is none.
  const std::size_t end = last_piece_end(buf.data(), n);
  after_cr_ = end > 0 && buf.data()[end - 1] == '\r';
  partial_.assign(buf.data() + end, n - end);
  buf.resize(end);
  cut_overlong(buf);
}

void LineFramer::finish(Buffer& out) {
  if (partial_.empty()) return;
  out.append(prefix_);
  out.append(partial_);
  out.push_back('\n');
  partial_.clear();
}

void LineFramer::finish(std::string& out) {
  Buffer b;
  finish(b);
  out.append(b.data(), b.size());
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
