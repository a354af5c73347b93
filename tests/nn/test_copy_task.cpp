// Convergence: a small Transformer learns the copy task (vocab 11, length 10) to 100% exact match
// under greedy decoding on held-out sequences, from a fixed seed, in a few hundred steps.
// (examples/copy_task.cpp is the readable, configurable version of this loop.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/precision.hpp"
#include "autograd/tape.hpp"
#include "nn/decode.hpp"
#include "nn/loss.hpp"
#include "nn/optim.hpp"
#include "nn/transformer.hpp"
#include "train/copy_task.hpp"

using namespace tg;
using namespace tg::nn;

namespace {

constexpr int64_t kVocab = 11, kLength = 10;

// The test's recipe: d_model 32, 4 heads, d_ff 64, 2 + 2 layers, no dropout.
TransformerConfig small_config() {
  TransformerConfig cfg;
  cfg.src_vocab = cfg.tgt_vocab = kVocab;
  cfg.d_model = 32;
  cfg.heads = 4;
  cfg.d_ff = 64;
  cfg.dropout = 0.0f;
  cfg.max_len = 32;
  return cfg;
}

Batch copy_batch(int64_t n, Generator& gen) {
  return train::copy_batch(n, kLength, kVocab, gen);
}

// The test's training loop: `steps` Adam steps on batches of 32 (data seed 4), cosine schedule with
// 40 warmup steps to 5e-3, label smoothing, clipping at 1. after_step(step, loss) runs after each
// optimizer step (it may change the parameters).
template <class AfterStep>
void train_copy(Transformer& model, int64_t steps, AfterStep after_step) {
  Adam optim(model.named_parameters(), {.beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-9f});
  const LrSchedule schedule{.kind = LrSchedule::Kind::cosine, .lr = 5e-3f, .warmup = 40, .total = steps};
  Generator data(4);
  for (int64_t step = 1; step <= steps; ++step) {
    const Batch b = copy_batch(32, data);
    optim.set_lr(schedule.at(step));
    optim.zero_grad();
    const Tensor loss = label_smoothed_cross_entropy(model.forward(b), b.labels);
    backward(loss);
    clip_grad_norm(optim.params(), 1.0);
    optim.step();
    after_step(step, loss.item());
  }
}

}  // namespace

TEST_CASE("copy_task.converges") {
  Transformer model(small_config(), 3);
  float first_loss = 0.0f, last_loss = 0.0f;
  train_copy(model, 400, [&](int64_t step, float loss) { (step == 1 ? first_loss : last_loss) = loss; });
  MESSAGE("loss " << first_loss << " -> " << last_loss);
  CHECK(last_loss < 0.05f * first_loss);

  Generator held_out(99);
  const Batch test = copy_batch(300, held_out);
  const Hypotheses out = greedy_decode(model, test.src, test.batch, test.src_len, kLength + 5);
  int64_t exact = 0;
  for (int64_t r = 0; r < test.batch; ++r) {
    const auto* want = test.src.data() + r * test.src_len;
    const auto& got = out[static_cast<size_t>(r)];
    exact += got.size() == kLength && std::equal(got.begin(), got.end(), want);
  }
  MESSAGE("exact match " << exact << "/" << test.batch);
  CHECK(exact == test.batch);

  // Beam search agrees with greedy on a model this sure of itself.
  const auto src = std::span(test.src).subspan(0, static_cast<size_t>(50 * test.src_len));
  const Hypotheses beam = beam_search(model, src, 50, test.src_len, {.beam = 4, .max_len = kLength + 5});
  auto str = [](const std::vector<int32_t>& v) {
    std::string t;
    for (int32_t x : v) t += std::to_string(x) + ' ';
    return t;
  };
  for (size_t r = 0; r < beam.size(); ++r) {
    INFO("row " << r << ": beam " << str(beam[r]) << "greedy " << str(out[r]));
    CHECK(beam[r] == out[r]);
  }
}

// ---- bf16 products: the loss curve of a short run tracks fp32's --------------------------------

namespace {

// bf16: the products in bf16 (the precision rule). bf16_weights: the same, plus a deliberate
// mistake for the check below: the weights rounded to bf16 after every step (bf16 where the rule
// keeps fp32: updates smaller than 2^-9 of a weight are lost).
enum class Variant { fp32, bf16, bf16_weights };

// Mean training loss over each window of kWindow steps of a short copy-task run.
constexpr int64_t kCurveSteps = 240, kWindow = 20;
std::vector<double> loss_curve(Variant v) {
  Transformer model(small_config(), 3);
  const PrecisionScope precision(v == Variant::fp32 ? Precision::fp32 : Precision::bf16);
  std::vector<double> windows;
  double sum = 0;
  train_copy(model, kCurveSteps, [&](int64_t step, float loss) {
    if (v == Variant::bf16_weights)
      for (auto [name, p] : model.named_parameters())
        for (int64_t i = 0; i < p.numel(); ++i) p.data()[i] = ops::to_f32(ops::to_bf16(p.data()[i]));
    sum += loss;
    if (step % kWindow == 0) windows.push_back(sum / kWindow), sum = 0;
  });
  return windows;
}

// Whether curve `a` tracks `ref` (docs/ARCHITECTURE.md, "Precision", has the measurements behind
// both numbers): every window mean within kCurveAbs nats of ref's, and the last window's mean
// within a factor kCurveLast of ref's (the loss ends near 0.03, where an absolute gap says little).
constexpr double kCurveAbs = 0.1, kCurveLast = 1.5;
bool tracks(const std::vector<double>& a, const std::vector<double>& ref) {
  bool ok = a.size() == ref.size();
  for (size_t i = 0; ok && i < a.size(); ++i) ok = std::abs(a[i] - ref[i]) <= kCurveAbs;
  const double last = a.back() / ref.back();
  return ok && last <= kCurveLast && last >= 1 / kCurveLast;
}

std::string show(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += std::to_string(x).substr(0, 6) + " ";
  return s;
}

}  // namespace

// 240 steps of the copy task in fp32, in bf16 products, and with the weights in bf16 (a mistake):
// bf16 must track fp32 and the mistake must not (so the check can fail).
TEST_CASE("copy_task.bf16_loss_curve_tracks_fp32") {
  // Also without a bf16 dot-product unit: bf16 products then run on the widen path (same rounding).
  set_bf16_products_everywhere(true);
  const std::vector<double> fp32 = loss_curve(Variant::fp32), bf16 = loss_curve(Variant::bf16);
  const std::vector<double> wrong = loss_curve(Variant::bf16_weights);
  set_bf16_products_everywhere(false);
  INFO("fp32:         ", show(fp32));
  INFO("bf16:         ", show(bf16));
  INFO("bf16 weights: ", show(wrong));
  CHECK(tracks(bf16, fp32));
  CHECK_FALSE(tracks(wrong, fp32));
}
