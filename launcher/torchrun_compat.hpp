// What torchrun (and torch.distributed.launch) command lines mean to ddprun beyond plain option names:
// the torchrun options ddprun refuses and why, torchrun's PET_* environment variables, --rdzv-conf keys,
// and the values of options ddprun accepts but does not need (--start-method, --signals-to-handle, ...).
// docs/TORCHRUN.md is the user-facing table.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "launcher/arg_matching.hpp"
#include "launcher/topology.hpp"

namespace ddprun::launcher {

// torchrun options ddprun refuses, as OptionNames entries with their one-line refusal (so that prefixes
// and suggestions know them too).
std::vector<OptionNames> refused_torchrun_options();

// torchrun reads each option it does not see on the command line from PET_<DEST>, e.g. PET_NPROC_PER_NODE
// (Kubeflow's PyTorchJob configures pods this way). Returns "--canonical=value" words for the torchrun
// options set there and not in `given`; flags are integers as torchrun reads them (nonzero: on). `sources`
// gets "canonical=PET_NAME" for each, to name the variable in an error. Throws UsageError (64).
std::vector<std::string> options_from_pet_env(const std::vector<std::string>& env, const std::set<std::string>& given,
                                              std::vector<std::pair<std::string, std::string>>& sources);

// --rdzv-conf "k=v,k=v": timeout/join_timeout → --rdzv-timeout, keep_alive_interval → --heartbeat-interval,
// keep_alive_max_attempt → --heartbeat-timeout (interval × attempts), is_host → o.is_host, last_call_timeout →
// o.last_call (elastic jobs), max_departures, join_policy, join_min_interval (ddprun's own) → o's fields of the
// same names; read_timeout is checked and
// ignored (noted at debug level), except with etcd (how long etcd may stay silent), where key_prefix, protocol,
// cacert, cert and key are understood too. An option given by its ddprun name wins.
// Other keys: UsageError naming the key.
void apply_rdzv_conf(const std::string& text, const std::set<std::string>& given, TopologyOptions& o,
                     std::vector<std::string>& notes);

// Options accepted for torchrun's sake: checked, then noted at debug level ("debug: ..." notes).
void check_start_method(const std::string& value, std::vector<std::string>& notes);
void check_signals_to_handle(const std::string& value, std::vector<std::string>& notes);
void check_event_log_handler(const std::string& value);

// torch.distributed.launch's --local_rank=N: the option each worker gets as "NAME=<its local rank>" right
// after its program, or "" for none. `value` is --local-rank-arg: "dash" → "--local-rank" (launch in torch
// 2.x), "underscore" → "--local_rank" (1.x), "none" → ""; dash or underscore with --use-env (which told launch
// *not* to pass it) contradict: UsageError (64).
// Not given (""): nothing, as torchrun; started as ddprun-launch (`launch_style`) "--local_rank" as launch gave
// it (torch 1.x's spelling, which scripts written for 2.x also accept), with a note saying how to turn it off,
// and nothing under --use-env.
std::string local_rank_arg_name(const std::string& value, bool use_env, bool launch_style,
                                std::vector<std::string>& notes);

}  // namespace ddprun::launcher
