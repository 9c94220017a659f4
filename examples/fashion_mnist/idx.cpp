#include "examples/fashion_mnist/idx.hpp"

#include <zlib.h>

#include <memory>
#include <stdexcept>

namespace ddprun::examples {
namespace {

using GzFile = std::unique_ptr<gzFile_s, int (*)(gzFile)>;

void read_exact(gzFile f, void* out, std::size_t n, const std::string& path) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    unsigned chunk = n > (1u << 30) ? (1u << 30) : static_cast<unsigned>(n);
    int got = gzread(f, p, chunk);
    if (got <= 0) throw std::runtime_error("IDX file " + path + " is truncated or not gzip/IDX");
    p += got;
    n -= static_cast<std::size_t>(got);
  }
}

std::uint32_t big_endian(const unsigned char b[4]) {
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  GzFile f(gzopen(path.c_str(), "rb"), gzclose);
  if (!f) throw std::runtime_error("cannot open IDX file " + path);
  unsigned char magic[4];
  read_exact(f.get(), magic, 4, path);
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] == 0 || magic[3] > 4) {
    throw std::runtime_error(path + " is not an IDX file of unsigned bytes");
  }
  IdxArray a;
  std::size_t total = 1;
  for (int d = 0; d < magic[3]; ++d) {
    unsigned char b[4];
    read_exact(f.get(), b, 4, path);
    a.dims.push_back(big_endian(b));
    total *= big_endian(b);
  }
  a.data.resize(total);
  read_exact(f.get(), a.data.data(), total, path);
  return a;
}

void write_idx(const std::string& path, const IdxArray& array) {
  GzFile f(gzopen(path.c_str(), "wb1"), gzclose);
  if (!f) throw std::runtime_error("cannot create " + path);
  std::vector<unsigned char> header{0, 0, 0x08, static_cast<unsigned char>(array.dims.size())};
  for (auto d : array.dims) {
    auto v = static_cast<std::uint32_t>(d);
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<unsigned char>(v >> shift));
  }
  bool ok = gzwrite(f.get(), header.data(), static_cast<unsigned>(header.size())) > 0 &&
            (array.data.empty() ||
             gzwrite(f.get(), array.data.data(), static_cast<unsigned>(array.data.size())) > 0);
  if (!ok) throw std::runtime_error("cannot write " + path);
}

}  // namespace ddprun::examples
