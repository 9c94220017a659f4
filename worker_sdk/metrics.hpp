// Training metrics as JSON lines, one object per record, for plots and dashboards
// (scripts/plot_metrics draws loss and accuracy curves from them):
//   {"kind":"step","epoch":1,"step":100,"global_step":100,"loss":0.61,"lr":0.05,"samples_per_s":1510.2,"time_s":8.4}
//   {"kind":"epoch","epoch":1,"train_loss":0.52,"test_loss":0.38,"accuracy":86.1,"samples_per_s":1488.0,"seconds":41.2}
// Each record is written with one write(2) on an O_APPEND descriptor, so a reader that tails the file (or a
// job killed mid-run) never sees half a line. Plain C++ (no LibTorch): any rank may use it, usually rank 0.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddprun::sdk {

class MetricsLog {
 public:
  using Fields = std::vector<std::pair<std::string, double>>;

  MetricsLog() = default;  // disabled: record() does nothing
  // Opens `path`, truncating it unless `append` (a resumed run continues its file). Throws sdk::Error
  // naming the path when it cannot.
  MetricsLog(const std::string& path, bool append);
  ~MetricsLog();
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  bool enabled() const { return fd_ >= 0; }
  // Writes {"kind":kind, name:value...}. Integral values are written without a fraction, non-finite
  // values (a diverged loss) as null, which JSON can carry and NaN cannot.
  void record(const std::string& kind, const Fields& fields) const;

  // The line record() writes, without the newline: exposed for tests.
  static std::string format(const std::string& kind, const Fields& fields);

 private:
  int fd_ = -1;
};

}  // namespace ddprun::sdk
