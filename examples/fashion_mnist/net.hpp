// The models of the example and of the benchmarks: the seeds' MNIST CNN (optionally with BatchNorm or
// SyncBatchNorm after each convolution) and a small MLP where per-step overhead dominates.
#pragma once

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <memory>

#include "worker_sdk/sync_batch_norm.hpp"

namespace ddprun::examples {

namespace F = torch::nn::functional;

// conv 1→20 5×5, max-pool 2, conv 20→50 5×5, max-pool 2, fc 800→500, relu, fc 500→10, log-softmax.
struct NetImpl : torch::nn::Module {
  // group non-null: a SyncBatchNorm after each convolution (the --norm syncbn variant). `batch_norm`: a
  // per-rank BatchNorm there instead (the example's default: see main.cpp). The two are registered
  // under different names (bn*, norm*), so a checkpoint of one never loads silently into the other.
  explicit NetImpl(std::shared_ptr<sdk::ProcessGroup> syncbn_group = nullptr, bool batch_norm = false)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 20, 5)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(20, 50, 5)))),
        fc1(register_module("fc1", torch::nn::Linear(800, 500))),
        fc2(register_module("fc2", torch::nn::Linear(500, 10))) {
    if (syncbn_group) {
      bn1 = register_module("bn1", sdk::SyncBatchNorm(20, syncbn_group));
      bn2 = register_module("bn2", sdk::SyncBatchNorm(50, syncbn_group));
    } else if (batch_norm) {
      norm1 = register_module("norm1", torch::nn::BatchNorm2d(20));
      norm2 = register_module("norm2", torch::nn::BatchNorm2d(50));
    }
  }

  at::Tensor forward(at::Tensor x) {
    x = conv1->forward(x);
    if (bn1) x = bn1->forward(x);
    if (norm1) x = norm1->forward(x);
    x = F::max_pool2d(torch::relu(x), F::MaxPool2dFuncOptions(2));
    x = conv2->forward(x);
    if (bn2) x = bn2->forward(x);
    if (norm2) x = norm2->forward(x);
    x = F::max_pool2d(torch::relu(x), F::MaxPool2dFuncOptions(2));
    x = torch::relu(fc1->forward(x.view({-1, 800})));
    return torch::log_softmax(fc2->forward(x), 1);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
  sdk::SyncBatchNorm bn1{nullptr}, bn2{nullptr};
  torch::nn::BatchNorm2d norm1{nullptr}, norm2{nullptr};
};
TORCH_MODULE(Net);

// 784-128-10 with relu and log-softmax.
struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  at::Tensor forward(const at::Tensor& x) {
    return torch::log_softmax(fc2->forward(torch::relu(fc1->forward(x.view({-1, 784})))), 1);
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

}  // namespace ddprun::examples
