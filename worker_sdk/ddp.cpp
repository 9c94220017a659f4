#include "worker_sdk/ddp.hpp"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <sched.h>

#include <mutex>

#include "worker_sdk/error.hpp"
#include "worker_sdk/gloo_ring.hpp"
#include "worker_sdk/heartbeat.hpp"

namespace ddprun::sdk {
namespace {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

}  // namespace

struct DistributedDataParallel::State : std::enable_shared_from_this<State> {
  struct Param {
    std::string name;
    at::Tensor variable;
    at::Tensor grad_view;  // this parameter's slice of its bucket's flat buffer
    std::size_t bucket = 0;
    bool ready = false;
    std::shared_ptr<torch::autograd::Node> accumulator;  // kept alive: the variable holds it weakly
    std::uintptr_t hook_key = 0;
  };
  struct Bucket {
    at::Tensor flat;
    std::vector<std::size_t> params;
    std::size_t pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };

  std::shared_ptr<ProcessGroup> group;
  DdpOptions options;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::unique_ptr<GlooRing> ring;  // the direct CPU path; null: the process group's allreduce
  bool last_inline = false;        // the last bucket is ready: finish_backward reduces it itself
  bool busy_poll = false;          // DdpOptions::busy_poll_last_bucket, decided
  std::size_t next_launch = 0;  // buckets launch strictly in index order
  bool in_backward = false;
  bool no_sync = false;
  std::mutex mutex;  // CUDA backward runs hooks on device threads; CPU backward on the caller's

  void start_backward();
  void mark_ready(std::size_t index);
  void launch_ready_buckets();
  void finish_backward();
};

void DistributedDataParallel::State::start_backward() {
  in_backward = true;
  next_launch = 0;
  for (auto& p : params) p.ready = false;
  for (auto& b : buckets) b.pending = b.params.size();
  // Runs once the whole backward pass is done, before backward() returns.
  std::weak_ptr<State> weak = weak_from_this();
  torch::autograd::Engine::get_default_engine().queue_callback([weak] {
    if (auto self = weak.lock()) self->finish_backward();
  });
}

void DistributedDataParallel::State::mark_ready(std::size_t index) {
  std::lock_guard<std::mutex> lock(mutex);
  if (no_sync) return;
  if (!in_backward) start_backward();
  Param& p = params[index];
  if (p.ready) return;  // a second accumulation in one backward (reentrant use): already counted
  p.ready = true;
  at::Tensor& grad = p.variable.mutable_grad();
  // After the first synchronised step .grad is the bucket view and AccumulateGrad adds into it in place;
  // a fresh .grad (first step, set to none, or accumulated under no_sync) is copied in once.
  if (!grad.defined() || grad.data_ptr() != p.grad_view.data_ptr()) {
    p.grad_view.copy_(grad);
    grad = p.grad_view;
  }
  if (--buckets[p.bucket].pending == 0) launch_ready_buckets();
}

void DistributedDataParallel::State::launch_ready_buckets() {
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
    Bucket& b = buckets[next_launch++];
    if (group->size() == 1) continue;
    b.flat.div_(group->size());  // average; dividing first keeps the sum in range as PyTorch does
    if (ring && next_launch == buckets.size()) {
      last_inline = true;
    } else if (ring) {
      ring->launch(next_launch - 1);
    } else {
      b.work = group->allreduce_async(b.flat);
    }
  }
}

void DistributedDataParallel::State::finish_backward() {
  std::unique_lock<std::mutex> lock(mutex);
  in_backward = false;
  if (next_launch < buckets.size()) {
    std::string unused;
    for (auto& p : params) {
      if (p.ready) continue;
      unused += (unused.empty() ? "" : ", ") + p.name;
      at::Tensor& grad = p.variable.mutable_grad();
      // An unused parameter contributes zero (or what it accumulated under no_sync) on this rank.
      if (!grad.defined()) {
        p.grad_view.zero_();
      } else if (grad.data_ptr() != p.grad_view.data_ptr()) {
        p.grad_view.copy_(grad);
      }
      grad = p.grad_view;
      p.ready = true;
      --buckets[p.bucket].pending;
    }
    if (!options.expect_unused_parameters) {
      // The buckets launched so far are being reduced with the other ranks right now (they see the same
      // unused parameters and launched the same buckets): finish them before reporting. Otherwise this
      // rank would tear its ring down mid-exchange and its peers would fail with "connection closed".
      if (ring) ring->wait_all();
      for (auto& b : buckets) {
        if (b.work) b.work->wait();
        b.work.reset();
      }
      throw Error("DistributedDataParallel: parameters received no gradient in this backward: " + unused +
                  ". Every parameter must take part in the loss on every rank, or construct DDP with "
                  "DdpOptions::expect_unused_parameters = true");
    }
    launch_ready_buckets();
  }
  {
    PeerWait waiting;  // the backward's own work is done: from here on this rank waits for the others
    if (ring) ring->wait_all();
    if (last_inline) {
      last_inline = false;
      ring->run_inline(buckets.size() - 1, busy_poll);
    }
    for (auto& b : buckets) {
      if (b.work) b.work->wait();
      b.work.reset();
    }
  }
  heartbeat();  // every gradient of this step is reduced: the rank made progress (ddprun --hang-timeout)
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group, DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)), state_(std::make_shared<State>()) {
  DDPRUN_SDK_CHECK(module_ && group_, "DistributedDataParallel: null module or process group");
  state_->group = group_;
  state_->options = options;

  // Replicas start identical: rank 0's parameters and buffers win.
  std::vector<at::Tensor> to_broadcast;
  for (auto& p : module_->parameters()) to_broadcast.push_back(p);
  for (auto& b : module_->buffers()) to_broadcast.push_back(b);
  if (!to_broadcast.empty()) group_->broadcast_coalesced(to_broadcast, 0);

  // Buckets in reverse registration order: backward produces the last layers' gradients first.
  auto named = module_->named_parameters();
  std::vector<std::size_t> order;
  for (std::size_t i = named.size(); i-- > 0;) {
    if (named[i].value().requires_grad()) order.push_back(i);
  }
  DDPRUN_SDK_CHECK(!order.empty(), "DistributedDataParallel: the module has no parameter that requires grad");
  std::vector<std::vector<std::size_t>> groups(1);
  std::size_t bytes = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const at::Tensor& t = named[order[k]].value();
    if (!groups.back().empty()) {
      const at::Tensor& first = named[groups.back().front()].value();
      std::size_t cap = groups.size() == 1 ? options.first_bucket_cap_bytes : options.bucket_cap_bytes;
      if (bytes >= cap || first.scalar_type() != t.scalar_type() || first.device() != t.device()) {
        groups.emplace_back();
        bytes = 0;
      }
    }
    groups.back().push_back(order[k]);
    bytes += static_cast<std::size_t>(t.numel()) * t.element_size();
  }

  for (auto& members : groups) {
    State::Bucket bucket;
    int64_t total = 0;
    for (auto i : members) total += named[i].value().numel();
    bucket.flat = torch::zeros({total}, named[members.front()].value().options().requires_grad(false));
    int64_t offset = 0;
    for (auto i : members) {
      const at::Tensor& v = named[i].value();
      State::Param p;
      p.name = named[i].key();
      p.variable = v;
      // Shares the bucket's storage without being an autograd view: optimizers detach_() gradients in
      // zero_grad, which a view refuses.
      p.grad_view = torch::empty({0}, bucket.flat.options());
      p.grad_view.set_(bucket.flat.storage(), offset, v.sizes());
      p.bucket = state_->buckets.size();
      offset += v.numel();
      bucket.params.push_back(state_->params.size());
      state_->params.push_back(std::move(p));
    }
    state_->buckets.push_back(std::move(bucket));
  }

  std::vector<at::Tensor> flats;
  for (auto& b : state_->buckets) flats.push_back(b.flat);
  using BusyPoll = DdpOptions::BusyPoll;
  state_->busy_poll = options.busy_poll_last_bucket == BusyPoll::kAlways ||
                      (options.busy_poll_last_bucket == BusyPoll::kAuto && usable_cpus() > group_->local_size());
  if (options.direct_gloo && group_->size() > 1 && GlooRing::supports(flats)) {
    state_->ring = std::make_unique<GlooRing>(*group_, flats, options.segment_bytes);
  }

  std::weak_ptr<State> weak = state_;
  for (std::size_t i = 0; i < state_->params.size(); ++i) {
    auto& p = state_->params[i];
    p.accumulator = torch::autograd::impl::grad_accumulator(p.variable);
    p.hook_key = p.accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [weak, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (auto s = weak.lock()) s->mark_ready(i);
          return outputs;
        }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& p : state_->params) p.accumulator->del_post_hook(p.hook_key);
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.state_->no_sync) {
  ddp_.state_->no_sync = true;
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.state_->no_sync = previous_; }

void DistributedDataParallel::sync_buffers() {
  auto buffers = module_->buffers();
  if (!buffers.empty()) group_->broadcast_coalesced(buffers, 0);
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (auto& b : state_->buckets) {
    out.emplace_back();
    for (auto i : b.params) out.back().push_back(state_->params[i].name);
  }
  return out;
}

}  // namespace ddprun::sdk
