// Issue 6: misuse of the nn API raises exceptions naming the layer/op and the shapes, and the
// NaN/Inf guard (train/guard.hpp) never applies an update computed from non-finite numbers.
#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "nn/attention.hpp"
#include "nn/layers.hpp"
#include "nn/loss.hpp"
#include "nn/optim.hpp"
#include "nn/transformer.hpp"
#include "nn_test_util.hpp"
#include "tests/test_util.hpp"
#include "train/guard.hpp"

using namespace tg;
using namespace tg::nn;
using namespace tg::train;
using tg::testing::error_of, tg::testing::values_of;

namespace {

#define CHECK_MESSAGE_HAS(expr, ...)                                                      \
  do {                                                                                    \
    const std::string msg_ = error_of([&] { (void)(expr); });                             \
    INFO("message: ", msg_);                                                              \
    for (const char* part_ : {__VA_ARGS__}) CHECK(msg_.find(part_) != std::string::npos); \
  } while (0)

}  // namespace

TEST_CASE("nn.misuse.layers_name_themselves_and_the_shapes") {
  Generator g(1);
  const Linear lin(8, 4, g);
  CHECK_MESSAGE_HAS(lin.forward(Tensor::zeros({2, 5})), "Linear(in_features=8, out_features=4)", "[..., 8]",
                    "got [2, 5]");
  CHECK_MESSAGE_HAS(lin.forward(Tensor::scalar(1)), "Linear(in_features=8", "got []");
  const LayerNorm ln(6);
  CHECK_MESSAGE_HAS(ln.forward(Tensor::zeros({3, 7})), "LayerNorm(6)", "got [3, 7]");
  const Embedding emb(10, 4, g);
  const std::vector<int32_t> ids = {1, 10};
  CHECK_MESSAGE_HAS(emb.forward(ids, {2}), "embedding", "id 10", "[10, 4]");
  CHECK_MESSAGE_HAS(emb.forward(ids, {3}), "embedding", "ids shape [3] needs 3 ids, got 2");
  const PositionalEncoding pe(4, 16);
  CHECK_MESSAGE_HAS(pe.forward(Tensor::zeros({1, 3, 5})), "PositionalEncoding", "[..., T, 4]", "[1, 3, 5]");
  CHECK_MESSAGE_HAS(Linear(0, 3, g), "Linear: sizes must be > 0");
  CHECK_MESSAGE_HAS(Dropout(1.5f, g), "Dropout: p must be in [0, 1), got 1.5");
}

TEST_CASE("nn.misuse.multi_head_attention") {
  Generator g(2);
  MultiHeadAttention mha(8, 2, 0.0f, g);
  CHECK_MESSAGE_HAS(mha.self_attention(Tensor::zeros({4, 8}), false), "MultiHeadAttention",
                    "self-attention input must be [B, L, 8]", "got [4, 8]");
  CHECK_MESSAGE_HAS(mha.self_attention(Tensor::zeros({2, 3, 6}), false), "MultiHeadAttention",
                    "got [2, 3, 6]");
  CHECK_MESSAGE_HAS(mha.cross_attention(Tensor::zeros({2, 3, 8}), Tensor::zeros({2, 5, 7})),
                    "MultiHeadAttention", "memory must be [B, L, 8]", "got [2, 5, 7]");
  CHECK_MESSAGE_HAS(mha.cross_attention(Tensor::zeros({2, 3, 8}), Tensor::zeros({3, 5, 8})),
                    "MultiHeadAttention", "query [2, 3, 8]", "memory of batch 3");
  KeyPadding pad{std::vector<uint8_t>(2 * 4), 2, 4};
  CHECK_MESSAGE_HAS(mha.self_attention(Tensor::zeros({2, 3, 8}), false, pad), "MultiHeadAttention",
                    "key padding mask [2, 4] does not match keys [2, 3]");
  KVCache empty;
  CHECK_MESSAGE_HAS(mha.cross_attention_cached(Tensor::zeros({2, 3, 8}), empty), "memory cache is empty");
  KVCache cache;
  mha.self_attention_step(Tensor::zeros({2, 1, 8}), cache);
  CHECK_MESSAGE_HAS(mha.self_attention_step(Tensor::zeros({3, 1, 8}), cache),
                    "cache batch 2 != input batch 3");
  CHECK_MESSAGE_HAS(MultiHeadAttention(10, 3, 0.0f, g),
                    "d_model (10) must be a positive multiple of heads (3)");
}

TEST_CASE("nn.misuse.transformer") {
  Transformer m(test::tiny_config(), 1);  // d_model 8, vocabularies 13 / 11
  const Batch b = test::padded_batch(2, 4, 3, 13, 11, 1);
  const std::vector<int32_t> five = {4, 5, 6, 7, 8};
  CHECK_MESSAGE_HAS(m.encode(five, 2, 3), "Transformer::encode", "5 source ids for batch 2 x length 3");
  CHECK_MESSAGE_HAS(m.encode(five, 0, 5), "Transformer::encode", "batch 0");
  const Tensor memory = m.encode(b.src, 2, 4);
  const KeyPadding mpad = padding_mask(b.src, 2, 4);
  CHECK_MESSAGE_HAS(m.decode(five, 1, 4, memory, mpad), "Transformer::decode",
                    "5 target ids for batch 1 x length 4");
  CHECK_MESSAGE_HAS(m.decode(b.tgt_in, 2, 3, Tensor::zeros({2, 4, 6}), {}), "Transformer::decode",
                    "memory must be [2, S, 8], got [2, 4, 6]");
  CHECK_MESSAGE_HAS(m.decode(b.tgt_in, 2, 3, Tensor::zeros({3, 4, 8}), {}), "Transformer::decode",
                    "memory must be [2, S, 8], got [3, 4, 8]");
  const KeyPadding wrong = padding_mask(five, 1, 5);
  CHECK_MESSAGE_HAS(m.decode(b.tgt_in, 2, 3, memory, wrong), "Transformer::decode",
                    "memory padding mask [1, 5] for memory [2, 4, 8]");
  CHECK_MESSAGE_HAS(m.start_decoding(Tensor::zeros({2, 8}), {}), "Transformer::start_decoding",
                    "memory must be [B, S, 8], got [2, 8]");
  NoGradGuard no_grad;
  DecoderState st = m.start_decoding(memory, mpad);
  const std::vector<int32_t> three = {kBos, kBos, kBos};
  CHECK_MESSAGE_HAS(m.decode_step(st, three), "Transformer::decode_step", "3 tokens for a state of batch 2");
  const std::vector<int32_t> out_of_vocab = {kBos, 11};
  CHECK_MESSAGE_HAS(m.decode_step(st, out_of_vocab), "token id 11", "vocabulary [0, 11)");
  CHECK_MESSAGE_HAS(st.select_rows({0, 2}), "select_rows", "row 2 out of range [0, 2)");
  Batch bad = b;
  bad.tgt_in.pop_back();
  CHECK_MESSAGE_HAS(m.forward(bad), "Batch: tgt_in has 5 ids, expected batch 2 x length 3");
  // Longer than the positional table.
  const std::vector<int32_t> long_src(100, 4);
  CHECK_MESSAGE_HAS(m.encode(long_src, 1, 100), "PositionalEncoding", "exceed max_len");
}

// ---- the NaN/Inf guard ------------------------------------------------------------------------

namespace {

struct Fixture {
  Transformer model{test::tiny_config(), 3};
  Adam opt{model.named_parameters(), {.lr = 1e-2f}};
  Batch batch = test::padded_batch(2, 4, 3, 13, 11, 2);
  // Forward + backward; returns the loss.
  float backward() {
    opt.zero_grad();
    Tensor loss = label_smoothed_cross_entropy(model.forward(batch), batch.labels, 0.1f);
    loss.backward();
    return loss.item();
  }
};

}  // namespace

TEST_CASE("nn.guard.poisoned_gradient_changes_nothing") {
  Fixture f;
  CHECK(guarded_step(f.opt, f.backward(), 1.0, 1).applied);  // non-trivial optimizer state first
  const auto params = values_of(f.model.named_parameters());
  const auto state = values_of(f.opt.state());

  for (const float poison : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity()}) {
    CAPTURE(poison);
    const float loss = f.backward();
    // Poison two gradients: the message names the first in parameter order.
    Tensor g2 = f.model.parameter("transformer.decoder.layers.0.linear2.bias").grad();
    Tensor g1 = f.model.parameter("transformer.encoder.layers.0.norm1.weight").grad();
    g2.data()[1] = poison;
    g1.data()[3] = poison;
    for (const double clip : {1.0, 0.0}) {
      const StepOutcome r = guarded_step(f.opt, loss, clip, 2);
      INFO("problem: ", r.problem);
      CHECK_FALSE(r.applied);
      CHECK_FALSE(std::isfinite(r.grad_norm));
      CHECK(r.problem.find("step 2: the gradient of transformer.encoder.layers.0.norm1.weight") == 0);
      CHECK(r.problem.find(std::isnan(poison) ? "(nan at element 3 of [8])" : "inf at element 3 of [8]") !=
            std::string::npos);
      CHECK(r.problem.find("not applied") != std::string::npos);
    }
    CHECK(values_of(f.model.named_parameters()) == params);
    CHECK(values_of(f.opt.state()) == state);
    CHECK(f.opt.step_count() == 1);
  }
  // A non-finite loss is caught before the gradients are looked at.
  f.backward();
  const StepOutcome r = guarded_step(f.opt, std::numeric_limits<float>::infinity(), 1.0, 7);
  CHECK_FALSE(r.applied);
  CHECK(r.problem == "step 7: the loss is inf; the step was not applied");
  CHECK(values_of(f.model.named_parameters()) == params);

  // A clean step afterwards is applied as usual.
  CHECK(guarded_step(f.opt, f.backward(), 1.0, 2).applied);
  CHECK(f.opt.step_count() == 2);
  CHECK(values_of(f.model.named_parameters()) != params);
}

TEST_CASE("nn.guard.finite_step_equals_clip_then_step") {
  // guarded_step must not change the arithmetic of a normal step: compare with clip_grad_norm +
  // step on an identical model, with clipping active (tiny max norm) and off.
  for (const double clip : {1e-3, 0.0}) {
    CAPTURE(clip);
    Fixture a, b;
    for (int s = 1; s <= 3; ++s) {
      const StepOutcome r = guarded_step(a.opt, a.backward(), clip, s);
      CHECK(r.applied);
      b.backward();
      const double norm = clip > 0 ? clip_grad_norm(b.opt.params(), clip) : grad_norm(b.opt.params());
      b.opt.step();
      CHECK(r.grad_norm == norm);
    }
    CHECK(values_of(a.model.named_parameters()) == values_of(b.model.named_parameters()));
    CHECK(values_of(a.opt.state()) == values_of(b.opt.state()));
  }
}

TEST_CASE("nn.guard.helpers") {
  CHECK(parse_on_non_finite("stop") == OnNonFinite::stop);
  CHECK(parse_on_non_finite("skip") == OnNonFinite::skip);
  CHECK_THROWS_WITH_AS(parse_on_non_finite("ignore"), doctest::Contains("'ignore'"), std::invalid_argument);
  NamedTensors ts = {{"a", Tensor::zeros({3})}, {"b", Tensor::from_data({2, 2}, {0, 1, 2, 3})}};
  CHECK_FALSE(first_non_finite_parameter(ts).has_value());
  ts[1].second.data()[2] = -std::numeric_limits<float>::infinity();
  CHECK(first_non_finite_parameter(ts) == "b (-inf at element 2 of [2, 2])");
  // Huge but finite values are not flagged.
  ts[1].second.data()[2] = std::numeric_limits<float>::max();
  CHECK_FALSE(first_non_finite_parameter(ts).has_value());
}

#undef CHECK_MESSAGE_HAS  // unity builds: the next file of the chunk must not see it
