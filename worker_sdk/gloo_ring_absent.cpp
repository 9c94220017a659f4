// GlooRing in an SDK built without Gloo's headers (PyTorch's pip LibTorch, CUDA on NCCL): it supports no
// buffers, so DDP never builds one and reduces through the process group; building one anyway is an error.
#include "worker_sdk/error.hpp"
#include "worker_sdk/gloo_ring.hpp"

namespace ddprun::sdk {
namespace {

[[noreturn]] void no_gloo() {
  throw Error("GlooRing: this SDK was built without Gloo's headers (LibTorch ships none): no direct CPU ring");
}

}  // namespace

bool GlooRing::supports(const std::vector<at::Tensor>&) { return false; }
GlooRing::GlooRing(ProcessGroup&, const std::vector<at::Tensor>&, std::size_t) { no_gloo(); }
GlooRing::~GlooRing() = default;
void GlooRing::launch(std::size_t) { no_gloo(); }
void GlooRing::wait_all() { no_gloo(); }
void GlooRing::run_inline(std::size_t, bool) { no_gloo(); }
void GlooRing::run() { no_gloo(); }
void GlooRing::set_busy_poll(bool) { no_gloo(); }

}  // namespace ddprun::sdk
