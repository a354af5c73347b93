// Convergence: a small Transformer learns the copy task (vocab 11, length 10) to 100% exact match
// under greedy decoding on held-out sequences, from a fixed seed, in a few hundred steps.
// (examples/copy_task.cpp is the readable, configurable version of this loop.)
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

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

Batch copy_batch(int64_t n, Generator& gen) {
  return train::copy_batch(n, kLength, kVocab, gen);
}

}  // namespace

TEST_CASE("copy_task.converges") {
  TransformerConfig cfg;
  cfg.src_vocab = cfg.tgt_vocab = kVocab;
  cfg.d_model = 32;
  cfg.heads = 4;
  cfg.d_ff = 64;
  cfg.dropout = 0.0f;
  cfg.max_len = 32;
  Transformer model(cfg, 3);
  const int64_t steps = 400;
  Adam optim(model.named_parameters(), {.beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-9f});
  const LrSchedule schedule{.kind = LrSchedule::Kind::cosine, .lr = 5e-3f, .warmup = 40, .total = steps};
  Generator data(4);
  float first_loss = 0.0f, last_loss = 0.0f;
  for (int64_t step = 1; step <= steps; ++step) {
    const Batch b = copy_batch(32, data);
    optim.set_lr(schedule.at(step));
    optim.zero_grad();
    const Tensor loss = label_smoothed_cross_entropy(model.forward(b), b.labels);
    backward(loss);
    clip_grad_norm(optim.params(), 1.0);
    optim.step();
    (step == 1 ? first_loss : last_loss) = loss.item();
  }
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
