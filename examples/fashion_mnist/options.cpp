#include "examples/fashion_mnist/options.hpp"

#include <initializer_list>
#include <stdexcept>

namespace ddprun::examples {

const char* const kUsage =
    "usage: fashion_mnist [--epochs N] [--batch-size N (per rank)] [--lr X (peak, per 256 samples)]\n"
    "                     [--momentum X] [--weight-decay X] [--schedule onecycle|constant] [--warmup F]\n"
    "                     [--norm batchnorm|syncbn|none] [--syncbn] [--seed N] [--data-dir DIR]\n"
    "                     [--checkpoint-dir DIR] [--resume] [--max-steps N] [--nproc N] [--log-every N]\n"
    "                     [--metrics-every N] [--threads N]\n"
    "Trains the MNIST CNN on Fashion-MNIST with DDP. Under ddprun it is one worker; started alone it\n"
    "launches --nproc workers itself. With --checkpoint-dir it saves DIR/checkpoint.pt after each epoch and\n"
    "writes DIR/metrics.jsonl: a step record every --metrics-every steps (default 10: the loss averaged over\n"
    "the ranks, and each rank's steps/s), an epoch record after each epoch. --log-every (default 100): the\n"
    "steps between two progress lines (in a log; a terminal gets a bar). SIGUSR1 or SIGTERM: it saves a checkpoint and exits 0; --resume goes on from\n"
    "the checkpoint (from the step where it stopped).\n";

namespace {

template <typename T>
T number(const std::string& flag, const std::string& text, T min) {
  try {
    size_t used = 0;
    T v;
    if constexpr (std::is_floating_point_v<T>) {
      v = static_cast<T>(std::stod(text, &used));
    } else {
      v = static_cast<T>(std::stoll(text, &used));
    }
    if (used == text.size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(flag + " expects a number >= " + std::to_string(min) + ", got '" + text + "'");
}

std::string one_of(const std::string& flag, const std::string& value, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return value;
    list += list.empty() ? a : std::string(", ") + a;
  }
  throw std::invalid_argument(flag + " expects one of " + list + ", got '" + value + "'");
}

}  // namespace

TrainOptions parse_options(int argc, char** argv) {
  TrainOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    if (auto eq = flag.find('='); eq != std::string::npos && flag.rfind("--", 0) == 0) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    auto next = [&]() -> std::string {
      if (!value.empty()) return value;
      if (i + 1 >= argc) throw std::invalid_argument(flag + " expects a value");
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") o.help = true;
    else if (flag == "--epochs") o.epochs = number<int>(flag, next(), 1);
    else if (flag == "--batch-size") o.batch_size = number<int>(flag, next(), 1);
    else if (flag == "--lr") o.lr = number<double>(flag, next(), 0.0);
    else if (flag == "--momentum") o.momentum = number<double>(flag, next(), 0.0);
    else if (flag == "--weight-decay") o.weight_decay = number<double>(flag, next(), 0.0);
    else if (flag == "--warmup") o.warmup = number<double>(flag, next(), 0.0);
    else if (flag == "--schedule") o.schedule = one_of(flag, next(), {"onecycle", "constant"});
    else if (flag == "--norm") o.norm = one_of(flag, next(), {"batchnorm", "syncbn", "none"});
    else if (flag == "--seed") o.seed = number<std::uint64_t>(flag, next(), 0);
    else if (flag == "--data-dir") o.data_dir = next();
    else if (flag == "--checkpoint-dir") o.checkpoint_dir = next();
    else if (flag == "--resume") o.resume = true;
    else if (flag == "--max-steps") o.max_steps = number<std::int64_t>(flag, next(), 0);
    else if (flag == "--nproc") o.nproc = number<int>(flag, next(), 1);
    else if (flag == "--syncbn") o.norm = "syncbn";
    else if (flag == "--log-every") o.log_every = number<int>(flag, next(), 1);
    else if (flag == "--metrics-every") o.metrics_every = number<int>(flag, next(), 1);
    else if (flag == "--threads") o.threads = number<int>(flag, next(), 0);
    else throw std::invalid_argument("unknown option '" + flag + "'");
  }
  if (o.warmup >= 1.0) throw std::invalid_argument("--warmup is a fraction of the steps (below 1), got " + std::to_string(o.warmup));
  return o;
}

}  // namespace ddprun::examples
