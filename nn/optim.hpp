// Optimizers (SGD with momentum, Adam, AdamW), learning-rate schedules and gradient clipping.
//
// An optimizer holds handles to the model's parameters (named_parameters()) and updates them in
// place from their .grad(). Its state is exposed as named tensors so a checkpoint can save and
// restore it exactly:
//   SGD:  "momentum_buffer.<param>"                       (when momentum != 0)
//   Adam: "exp_avg.<param>", "exp_avg_sq.<param>"
//   all:  "step" (a one-element tensor holding the number of steps taken)
// Parameters whose gradient is undefined at step() are skipped (PyTorch does the same).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "autograd/tensor.hpp"
#include "nn/module.hpp"

namespace tg::nn {

class Optimizer {
 public:
  explicit Optimizer(NamedTensors params, float lr);
  virtual ~Optimizer() = default;

  // One update from the current gradients; increments step_count() first (steps count from 1).
  void step() { step(1.0f); }
  // The same with every gradient read as grad * grad_scale (clip_coef: gradient clipping folded
  // into the update, the gradients themselves left as they are).
  virtual void step(float grad_scale) = 0;
  void zero_grad();  // drops every parameter's gradient

  void set_lr(float lr) { lr_ = lr; }
  float lr() const { return lr_; }
  int64_t step_count() const { return step_; }

  // State as named tensors (copies, safe to write to a file) including "step".
  virtual NamedTensors state() const;
  // Restores state(); throws std::invalid_argument naming a missing, unexpected or mis-shaped entry.
  virtual void load_state(const NamedTensors& state);

  const NamedTensors& params() const { return params_; }

 protected:
  // Named per-parameter buffers ("<prefix>.<param>"), zero-initialised, same shapes as the params.
  std::vector<Tensor>& add_buffers(const std::string& prefix);

  NamedTensors params_;
  float lr_;
  int64_t step_ = 0;

 private:
  std::deque<std::pair<std::string, std::vector<Tensor>>> buffers_;  // deque: references stay valid
};

struct SGDOptions {
  float lr = 0.1f, momentum = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
};

// PyTorch SGD: g += wd * p;  buf = momentum * buf + g (buf = g on the first step);
// p -= lr * (nesterov ? g + momentum * buf : buf).
class SGD : public Optimizer {
 public:
  SGD(NamedTensors params, const SGDOptions& opt);
  using Optimizer::step;
  void step(float grad_scale) override;
  SGDOptions options;

 private:
  std::vector<Tensor>* momentum_ = nullptr;
};

struct AdamOptions {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  // Weight decay on parameters of 2 or more dimensions only (matrices and embeddings), none on
  // biases and layernorm gains: GPT-2's and nanoGPT's two parameter groups.
  bool decay_matrices_only = false;
};

// Adam (L2 weight decay added to the gradient) via ops::adam_update.
class Adam : public Optimizer {
 public:
  Adam(NamedTensors params, const AdamOptions& opt);
  using Optimizer::step;
  void step(float grad_scale) override;
  AdamOptions options;

 protected:
  bool decoupled_ = false;

 private:
  std::vector<Tensor>*exp_avg_ = nullptr, *exp_avg_sq_ = nullptr;
};

// AdamW: Adam with decoupled weight decay (p -= lr * wd * p). Default wd 0.01 as PyTorch.
class AdamW : public Adam {
 public:
  AdamW(NamedTensors params, AdamOptions opt = {.lr = 1e-3f, .weight_decay = 0.01f});
};

// Learning-rate schedules, evaluated at step s = 1, 2, ... (the step about to be taken).
//   constant: lr
//   noam:     lr * min(s / warmup, sqrt(warmup / s))   (Vaswani et al.'s schedule, scaled so the
//             peak at s = warmup is lr; their d^-0.5 factor is folded into lr)
//   cosine:   linear warmup to lr, then lr_min + (lr - lr_min) * (1 + cos(pi * p)) / 2 with
//             p = (s - warmup) / (total - warmup), clamped to [0, 1]
struct LrSchedule {
  enum class Kind { constant, noam, cosine };
  Kind kind = Kind::constant;
  float lr = 1e-3f;
  int64_t warmup = 0;
  int64_t total = 0;  // cosine only
  float lr_min = 0.0f;
  float at(int64_t step) const;
  static Kind parse(const std::string& s);  // "constant" | "noam" | "cosine", else throws
};

// Scales all gradients so their global L2 norm is at most max_norm (no-op when it already is).
// Returns the norm before clipping. Parameters without a gradient are ignored.
double clip_grad_norm(const NamedTensors& params, double max_norm);
// The same when the norm is already known (grad_norm(params), e.g. from a NaN check).
void clip_grad_norm(const NamedTensors& params, double max_norm, double norm);
// The factor clipping scales the gradients by: max_norm / (norm + 1e-6) when that is below 1, else
// 1. opt.step(clip_coef(max_norm, grad_norm(params))) is clip_grad_norm then opt.step() in one
// pass over the parameters.
float clip_coef(double max_norm, double norm);
double grad_norm(const NamedTensors& params);

}  // namespace tg::nn
