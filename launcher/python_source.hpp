// What ddprun reads in a Python worker's own source before starting it: whether the script's argparse
// declares torch.distributed.launch's local rank option (--local_rank or --local-rank), which launch filled in
// on the command line and torchrun never does (docs/TORCHRUN.md "torch.distributed.launch").
#pragma once

#include <string>
#include <vector>

namespace ddprun::launcher {

// The spelling of the first local rank option that `source` (Python text) declares in an add_argument call,
// "--local_rank" or "--local-rank"; "" when none does. A plain reading of the text, not of Python: the option
// strings are the string literals that open the call's arguments; a call after a '#' on its line is a comment.
std::string declared_local_rank_option(const std::string& source);

// The same for a file: reads at most its first MiB; "" when it cannot be read.
std::string declared_local_rank_option_in_file(const std::string& path);

// The file `python -m MODULE` would run, looked up where Python's -m looks first: the working directory,
// then each PYTHONPATH directory of `env`; MODULE.py or MODULE/__main__.py with dots as directories.
// "" when none is there (an installed package's module, for one: not read).
std::string module_source_file(const std::string& module, const std::vector<std::string>& env);

}  // namespace ddprun::launcher
