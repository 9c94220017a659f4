#include "worker_sdk/gloo_ring.hpp"

#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>

#include "worker_sdk/error.hpp"

namespace ddprun::sdk {
namespace {

template <typename T>
std::unique_ptr<gloo::Algorithm> make_allreduce(const std::shared_ptr<gloo::Context>& context, T* data,
                                                int count) {
  std::vector<T*> ptrs{data};
  // Two ranks: one exchange of the whole segment is optimal. More: the bandwidth-optimal chunked ring.
  if (context->size == 2) return std::make_unique<gloo::AllreduceRing<T>>(context, ptrs, count);
  return std::make_unique<gloo::AllreduceRingChunked<T>>(context, ptrs, count);
}

}  // namespace

bool GlooRing::supports(const std::vector<at::Tensor>& buffers) {
  for (const auto& b : buffers) {
    if (!b.device().is_cpu() || !b.is_contiguous() ||
        (b.scalar_type() != at::kFloat && b.scalar_type() != at::kDouble)) {
      return false;
    }
  }
  return true;
}

GlooRing::GlooRing(ProcessGroup& group, const std::vector<at::Tensor>& buffers, std::size_t segment_bytes) {
  DDPRUN_SDK_CHECK(supports(buffers), "GlooRing: buffers must be contiguous CPU float/double tensors");
  // Each GlooRing gets its own key space in the store, so several DDP instances never collide.
  const std::string prefix = "ddp_ring/" + std::to_string(group.next_sequence());
  c10d::ProcessGroupGloo::GlooStore store(c10::make_intrusive<c10d::PrefixStore>(prefix, group.store()));
  context_ = std::make_shared<gloo::rendezvous::Context>(group.rank(), group.size());
  context_->setTimeout(group.timeout());
  auto device = group.gloo_device();
  context_->connectFullMesh(store, device);
  std::shared_ptr<gloo::Context> base = context_;
  // Algorithms first: their receive buffers are registered while the pairs are still served by Gloo's event
  // loop, so a peer's early message always has a buffer to land in.
  handshake_ = make_allreduce(base, &handshake_value_, 1);
  for (const auto& b : buffers) {
    segments_.emplace_back();
    const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(segment_bytes) / b.element_size());
    for (int64_t offset = 0; offset < b.numel(); offset += per) {
      const int count = static_cast<int>(std::min(per, b.numel() - offset));
      if (b.scalar_type() == at::kFloat) {
        segments_.back().push_back(make_allreduce(base, b.data_ptr<float>() + offset, count));
      } else {
        segments_.back().push_back(make_allreduce(base, b.data_ptr<double>() + offset, count));
      }
    }
  }
  for (int peer = 0; peer < group.size(); ++peer) {
    if (peer != group.rank()) context_->getPair(peer)->setSync(true, /*busyPoll=*/false);
  }
  // Construction ends with a one-float exchange: no rank leaves it (and may exit, closing its sockets)
  // before every peer has switched its pairs to synchronous mode. Until then the event loop reads the
  // peer's sockets, and a FIN read there fails setSync with "Connection closed by peer". After it, the
  // pairs are read only by a reduction every rank takes part in, so closing them is always safe.
  if (std::getenv("DDPRUN_SDK_TEST_NO_HANDSHAKE") == nullptr) handshake_->run();
  thread_ = std::thread([this] { run(); });
}

GlooRing::~GlooRing() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void GlooRing::launch(std::size_t index) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(index);
    ++in_flight_;
  }
  wake_.notify_one();
}

void GlooRing::wait_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return in_flight_ == 0; });
  if (error_) std::rethrow_exception(error_);
}

void GlooRing::run_inline(std::size_t index, bool busy_poll) {
  wait_all();
  set_busy_poll(busy_poll);
  try {
    for (auto& segment : segments_[index]) segment->run();
  } catch (...) {
    set_busy_poll(false);
    throw;
  }
  set_busy_poll(false);
}

void GlooRing::set_busy_poll(bool on) {
  if (on == busy_poll_) return;
  for (int peer = 0; peer < context_->size; ++peer) {
    if (peer != context_->rank) context_->getPair(peer)->setSync(true, on);
  }
  busy_poll_ = on;
}

void GlooRing::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    std::size_t index = queue_.front();
    queue_.pop_front();
    lock.unlock();
    try {
      if (!error_) {
        for (auto& segment : segments_[index]) segment->run();
      }
    } catch (...) {
      error_ = std::current_exception();  // read by wait_all under the mutex, after in_flight_ drops
    }
    lock.lock();
    if (--in_flight_ == 0) done_.notify_all();
  }
}

}  // namespace ddprun::sdk
