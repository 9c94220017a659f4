#include "common/supervision/error_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>

#include "common/contract/worker_contract.hpp"

namespace ddprun::supervision {
namespace {
constexpr std::size_t kMaxBytes = 64 * 1024;
constexpr int kMaxDepth = 32;

// A JSON value as far as the error file needs it: strings decoded, objects by member, anything else (numbers,
// literals, arrays) kept as its text.
struct Value {
  enum class Kind { kString, kObject, kOther } kind = Kind::kOther;
  std::string text;  // kString: decoded; else the value's source text
  std::map<std::string, std::shared_ptr<Value>> members;
  const Value* member(const std::string& name) const {
    auto it = members.find(name);
    return it == members.end() ? nullptr : it->second.get();
  }
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  bool document(Value& out) {
    if (!value(out, 0)) return false;
    skip_space();
    return i_ == s_.size();
  }

 private:
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool hex4(std::uint32_t& cp) {
    if (i_ + 4 > s_.size()) return false;
    cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      cp <<= 4;
      if (c >= '0' && c <= '9') cp |= static_cast<std::uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') cp |= static_cast<std::uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') cp |= static_cast<std::uint32_t>(c - 'A' + 10);
      else return false;
    }
    return true;
  }
  bool string(std::string& out) {
    ++i_;  // the opening quote
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case '"': case '\\': case '/': out += e; break;
        case 'u': {
          std::uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00 && i_ + 1 < s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u') {
            i_ += 2;
            std::uint32_t low = 0;
            if (!hex4(low)) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: return false;
      }
    }
    return false;
  }
  // At an opening bracket: `item` for each comma-separated element, up to `close` (an empty one included).
  template <typename Item>
  bool sequence(char close, Item item) {
    ++i_;
    skip_space();
    if (i_ < s_.size() && s_[i_] == close) {
      ++i_;
      return true;
    }
    for (;;) {
      if (!item()) return false;
      skip_space();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == close) {
        ++i_;
        return true;
      }
      return false;
    }
  }
  bool value(Value& out, int depth) {
    if (depth > kMaxDepth) return false;
    skip_space();
    if (i_ >= s_.size()) return false;
    const std::size_t start = i_;
    if (s_[i_] == '"') {
      out.kind = Value::Kind::kString;
      return string(out.text);
    }
    if (s_[i_] == '{') {
      out.kind = Value::Kind::kObject;
      if (!sequence('}', [&] {
            skip_space();
            std::string name;
            if (i_ >= s_.size() || s_[i_] != '"' || !string(name)) return false;
            skip_space();
            if (i_ >= s_.size() || s_[i_++] != ':') return false;
            auto v = std::make_shared<Value>();
            if (!value(*v, depth + 1)) return false;
            out.members[name] = v;
            return true;
          }))
        return false;
      out.text = s_.substr(start, i_ - start);
      return true;
    }
    if (s_[i_] == '[') {  // kept as text: the error file has no arrays that matter
      if (!sequence(']', [&] {
            Value element;
            return value(element, depth + 1);
          }))
        return false;
      out.text = s_.substr(start, i_ - start);
      return true;
    }
    // A number or a literal: up to the next delimiter.
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']' && s_[i_] != ' ' && s_[i_] != '\n' &&
           s_[i_] != '\t' && s_[i_] != '\r')
      ++i_;
    out.text = s_.substr(start, i_ - start);
    return i_ > start;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};
}  // namespace

ErrorFileContents parse_error_file(std::string text) {
  ErrorFileContents out;
  out.raw = std::move(text);
  if (out.raw.empty()) return out;
  out.present = true;
  Value root;
  if (Parser(out.raw).document(root) && root.kind == Value::Kind::kObject) {
    if (const Value* m = root.member(contract::kErrorMessageKey)) {
      out.whole = true;
      if (m->kind == Value::Kind::kObject) {
        if (const Value* text_of = m->member(contract::kErrorMessageKey)) out.message = text_of->text;
        const Value* extra = m->member(contract::kErrorExtraInfoKey);
        if (extra != nullptr && extra->kind == Value::Kind::kObject) {
          if (const Value* stack = extra->member(contract::kErrorCallstackKey)) out.where = stack->text;
          if (const Value* ts = extra->member(contract::kErrorTimestampKey)) out.timestamp = ts->text;
        }
      } else {
        out.message = m->text;
      }
    }
  }
  if (out.message.empty()) out.message = out.raw.substr(0, 2000);
  return out;
}

ErrorFileContents read_error_file(const std::string& path) {
  // O_NOFOLLOW: a link a worker planted there (issue 33) would put its target's start in the failure report and the
  // summary; torch's @record writes a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return {};
  std::string text(kMaxBytes, '\0');
  std::size_t got = 0;
  while (got < kMaxBytes) {
    const ssize_t n = ::read(fd, &text[got], kMaxBytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  return parse_error_file(std::move(text));
}

}  // namespace ddprun::supervision
