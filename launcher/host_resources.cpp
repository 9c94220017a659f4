#include "launcher/host_resources.hpp"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <thread>

namespace ddprun::launcher {

int usable_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

int visible_gpu_count(const std::string& cvd, bool cvd_set) {
  if (cvd_set) {
    // "0,1,2", "GPU-<uuid>,MIG-<uuid>"; "-1" or "" hide every device; a bad entry ends the list.
    int count = 0;
    std::size_t start = 0;
    while (start < cvd.size()) {
      std::size_t end = cvd.find(',', start);
      if (end == std::string::npos) end = cvd.size();
      std::string entry = cvd.substr(start, end - start);
      const bool index = !entry.empty() && std::all_of(entry.begin(), entry.end(), [](unsigned char c) {
        return std::isdigit(c);
      });
      const bool uuid = entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0;
      if (!index && !uuid) break;
      ++count;
      start = end + 1;
    }
    return count;
  }
  int count = 0;
  if (DIR* dev = ::opendir("/dev")) {
    while (dirent* e = ::readdir(dev)) {
      const char* n = e->d_name;
      if (std::strncmp(n, "nvidia", 6) != 0 || !n[6]) continue;
      bool digits = true;
      for (const char* p = n + 6; *p; ++p) digits = digits && std::isdigit(static_cast<unsigned char>(*p));
      if (digits) ++count;
    }
    ::closedir(dev);
  }
  return count;
}

}  // namespace ddprun::launcher
