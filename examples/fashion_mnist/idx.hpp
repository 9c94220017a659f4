// The IDX format of (Fashion-)MNIST, gzipped: a big-endian magic (0x00 0x00 type ndim), ndim big-endian
// u32 sizes, then the unsigned bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::examples {

struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

// Reads a gzipped (or plain: zlib reads both) IDX file of unsigned bytes. Throws std::runtime_error
// naming the file when it is missing or malformed.
IdxArray read_idx(const std::string& path);

// Writes `array` gzipped, for tests that need a small data set of the same shape.
void write_idx(const std::string& path, const IdxArray& array);

}  // namespace ddprun::examples
