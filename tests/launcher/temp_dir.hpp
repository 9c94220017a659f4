// A directory of the launcher tests' own under /tmp, removed with everything in it at the end of its scope.
#pragma once

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

struct TempDir {
  std::string path;
  TempDir() {
    char d[] = "/tmp/ddprun-launcher-test-XXXXXX";
    REQUIRE(::mkdtemp(d) != nullptr);
    path = d;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `text` to NAME (a path below the directory; its parents are made) with `mode`; returns its path.
  std::string file(const std::string& name, const std::string& text, mode_t mode = 0644) const {
    const std::string p = path + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << text;
    REQUIRE(::chmod(p.c_str(), mode) == 0);
    return p;
  }
};
