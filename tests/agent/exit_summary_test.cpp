// The summary's advice when argparse stopped a Python worker over torch.distributed.launch's --local_rank.
#include <doctest/doctest.h>

#include "agent/exit_summary.hpp"

using ddprun::agent::local_rank_arg_advice;

TEST_CASE("argparse's word on --local_rank names the --local-rank-arg that fixes it") {
  // Required, and ddprun passed nothing (the declaration was in another file): the spelling argparse names.
  CHECK(local_rank_arg_advice("train.py: error: the following arguments are required: --local_rank", "") ==
        "script requires --local_rank, which torch.distributed.launch passed and torchrun does not; ddprun passes "
        "it when the script's own file declares it: --local-rank-arg underscore passes --local_rank=N to every "
        "worker");
  CHECK(local_rank_arg_advice("t.py: error: the following arguments are required: --lr, --local-rank", "")
            .find("--local-rank-arg dash passes --local-rank=N") != std::string::npos);
  // Given a spelling the script does not take: the other one, or none.
  CHECK(local_rank_arg_advice("t.py: error: unrecognized arguments: --local-rank=1", "--local-rank") ==
        "script does not take the --local-rank=N ddprun passed: --local-rank-arg underscore passes --local_rank=N "
        "instead, --local-rank-arg none passes nothing");
  CHECK(local_rank_arg_advice("t.py: error: unrecognized arguments: --x --local_rank=0", "--local_rank")
            .find("--local-rank-arg dash passes --local-rank=N instead") != std::string::npos);
  // Anything else is not about it.
  CHECK(local_rank_arg_advice("t.py: error: unrecognized arguments: --lr=1", "--local_rank").empty());
  CHECK(local_rank_arg_advice("t.py: error: the following arguments are required: --lr", "").empty());
  CHECK(local_rank_arg_advice("t.py: error: the following arguments are required: --local_rank", "--local_rank")
            .empty());  // given and still missing: not the switch's doing
  CHECK(local_rank_arg_advice("t.py: error: unrecognized arguments: --local_rank=0", "").empty());
  CHECK(local_rank_arg_advice("ValueError: --local_rank", "").empty());
  CHECK(local_rank_arg_advice("", "").empty());
}
