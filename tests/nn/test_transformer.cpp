#include <doctest/doctest.h>

#include <functional>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "nn/decode.hpp"
#include "nn/loss.hpp"
#include "nn/transformer.hpp"
#include "nn_test_util.hpp"

using namespace tg;
using namespace tg::nn;

TEST_CASE("nn.transformer.forward_shapes") {
  Transformer m(test::tiny_config(), 2);
  const Batch b = test::padded_batch(3, 6, 5, 13, 11, 1);
  const Tensor logits = m.forward(b);
  CHECK(logits.shape() == Shape{15, 11});
  CHECK(m.encode(b.src, 3, 6).shape() == Shape{3, 6, 8});
  Batch bad = b;
  bad.labels.pop_back();
  CHECK_THROWS_WITH_AS(m.forward(bad), doctest::Contains("labels"), std::invalid_argument);
  bad = b;
  bad.src[0] = 13;
  CHECK_THROWS_WITH_AS(m.forward(bad), doctest::Contains("vocabulary"), std::out_of_range);
}

namespace {

// A Transformer with non-trivial norms and biases (GELU: smooth, so central differences are not
// thrown off by ReLU's kink), and what the gradient checks differentiate: the logits and the
// label-smoothed loss, as one vector (gradcheck_params weights it with random w).
struct GradcheckModel {
  Transformer m;
  Batch b = test::padded_batch(3, 5, 4, 13, 11, 5);
  explicit GradcheckModel(bool norm_first) : m(test::tiny_config(norm_first, "gelu"), 3) {
    Generator g(4);
    for (auto& [n, p] : m.named_parameters())
      if (n.find("bias") != std::string::npos || n.find("norm") != std::string::npos) {
        Tensor t = p;
        uniform_(t, n.find("weight") != std::string::npos ? 0.5f : -0.3f,
                 n.find("weight") != std::string::npos ? 1.5f : 0.3f, g);
      }
  }
  Tensor outputs(const std::function<Tensor(const Tensor&)>& on_logits = {}) {
    Tensor logits = m.forward(b);
    if (on_logits) logits = on_logits(logits);
    const Tensor loss = label_smoothed_cross_entropy(logits, b.labels, 0.1f);
    return concat({reshape(logits, {-1}), reshape(loss, {1})}, 0);
  }
};

// y = x + c x^2 whose backward forgets the 2 c x term (dx = dy): a wrong rule missing a
// contribution of relative size 2 c |x|.
Tensor forgets_a_term(const Tensor& x, float c) {
  Tensor out;
  {
    NoGradGuard ng;
    out = x + mul_scalar(x * x, c);
  }
  if (Node* n = Tape::current().record("forgets_a_term", out, {x}))
    n->backward = [](const Tensor& dy, Grads& g) { g.accumulate(0, dy); };
  return out;
}

}  // namespace

TEST_CASE("nn.transformer.gradcheck") {
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    GradcheckModel gm(norm_first);
    auto r = test::gradcheck_params(gm.m.named_parameters(), [&] { return gm.outputs(); });
    INFO(r.report);
    CHECK(r.ok);
    MESSAGE("norm_first=" << norm_first << ": " << r.report);
  }
}

// The check above sees a small error: the same models with the logits passed through a rule that
// misses 2 c |logit| = 0.2-0.5% of their gradient fail it (worst ratio 1.7 and 3.5; the error
// enters above the whole model, so it is in every parameter's gradient). The check this replaced
// (mean loss, atol 2e-3, rtol 2e-2) passed this rule with c up to 3e-3 (worst ratio 0.48).
TEST_CASE("nn.transformer.gradcheck_catches_a_small_wrong_rule") {
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    GradcheckModel gm(norm_first);
    const auto r = test::gradcheck_params(gm.m.named_parameters(), [&] {
      return gm.outputs([](const Tensor& l) { return forgets_a_term(l, 1e-3f); });
    });
    INFO(r.report);
    CHECK_FALSE(r.ok);
  }
}

TEST_CASE("nn.transformer.masks") {
  Transformer m(test::tiny_config(), 6);
  m.eval();
  NoGradGuard ng;
  const Batch b = test::padded_batch(3, 6, 5, 13, 11, 7);
  const Tensor ref = m.forward(b);

  SUBCASE("extra source padding changes nothing") {
    Batch wide = b;
    wide.src_len = 9;
    wide.src.clear();
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t s = 0; s < 9; ++s)
        wide.src.push_back(s < 6 ? b.src[static_cast<size_t>(r * 6 + s)] : kPad);
    const auto c = test::compare(m.forward(wide), ref, 1e-5);
    INFO("max diff " << c.max_diff);
    CHECK(c.first_bad < 0);
  }
  SUBCASE("padded memory rows are ignored by the decoder") {
    const KeyPadding pad = padding_mask(b.src, 3, 6);
    Tensor mem = m.encode(b.src, 3, 6);
    const Tensor h = m.decode(b.tgt_in, 3, 5, mem, pad);
    Tensor mem2 = mem.clone();
    for (size_t i = 0; i < pad.mask.size(); ++i)
      if (pad.mask[i])
        for (int64_t k = 0; k < 8; ++k) mem2.data()[static_cast<int64_t>(i) * 8 + k] = 100.0f;
    CHECK(test::compare(m.decode(b.tgt_in, 3, 5, mem2, pad), h, 1e-6).first_bad < 0);
    CHECK(test::compare(m.decode(b.tgt_in, 3, 5, mem2, {}), h, 1e-3).first_bad >= 0);  // the mask matters
  }
  SUBCASE("a future target token changes only later positions") {
    Batch b2 = b;
    b2.tgt_in[3] = b2.tgt_in[3] == 5 ? 6 : 5;  // row 0, position 3
    const Tensor out = m.forward(b2);
    const int64_t V = 11;
    for (int64_t t = 0; t < 5; ++t) {
      double d = 0;
      for (int64_t v = 0; v < V; ++v)
        d = std::max(d, static_cast<double>(std::abs(out.at({t, v}) - ref.at({t, v}))));
      if (t < 3)
        CHECK(d < 1e-6);
      else
        CHECK(d > 1e-4);
    }
  }
}

TEST_CASE("nn.transformer.incremental_matches_full") {
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    Transformer m(test::tiny_config(norm_first), 8);
    m.eval();
    NoGradGuard ng;
    const Batch b = test::padded_batch(3, 6, 5, 13, 11, 9);
    const KeyPadding pad = padding_mask(b.src, 3, 6);
    const Tensor mem = m.encode(b.src, 3, 6);
    const Tensor full = m.generate(m.decode(b.tgt_in, 3, 5, mem, pad));  // [3, 5, V]
    DecoderState st = m.start_decoding(mem, pad);
    for (int64_t t = 0; t < 5; ++t) {
      std::vector<int32_t> tok;
      for (int64_t r = 0; r < 3; ++r) tok.push_back(b.tgt_in[static_cast<size_t>(r * 5 + t)]);
      const Tensor step = m.decode_step(st, tok);
      for (int64_t r = 0; r < 3; ++r) {
        // Padded target positions differ by design (full decoding hides pad keys); compare real ones.
        if (b.tgt_in[static_cast<size_t>(r * 5 + t)] == kPad) continue;
        for (int64_t v = 0; v < 11; ++v) CHECK(std::abs(step.at({r, v}) - full.at({r, t, v})) < 1e-5);
      }
    }
    CHECK(st.pos == 5);
  }
}

TEST_CASE("nn.decode.beam1_equals_greedy") {
  Transformer m(test::tiny_config(), 10);
  // A little more <eos>: some rows end within max_len, others run to it (both are checked below).
  // And no <pad>, as after training (it is never a label): a generated <pad> would be masked as
  // padding by the full pass below, which incremental decoding does not do.
  m.parameter("generator.bias").data()[kEos] += 0.2f;
  m.parameter("generator.bias").data()[kPad] -= 10.0f;
  const Batch b = test::padded_batch(5, 6, 5, 13, 11, 11);
  const Hypotheses greedy = greedy_decode(m, b.src, 5, 6, 12);
  const Hypotheses beam1 = beam_search(m, b.src, 5, 6, {.beam = 1, .max_len = 12});
  CHECK(greedy == beam1);
  CHECK(m.is_training());  // restored
  // Decoding is batch-independent: each row alone gives the same result.
  for (int64_t r = 0; r < 5; ++r) {
    const auto one = greedy_decode(m, std::span(b.src).subspan(static_cast<size_t>(r * 6), 6), 1, 6, 12);
    CHECK(one[0] == greedy[static_cast<size_t>(r)]);
  }
  // Greedy decoding is the argmax of a full teacher-forced pass over its own output.
  m.eval();
  NoGradGuard ng;
  int64_t finished = 0;
  for (int64_t r = 0; r < 5; ++r) {
    // Each position's argmax is the next token: the hypothesis, then <eos> if it ended with one
    // (a hypothesis cut at max_len has no <eos> to predict).
    std::vector<int32_t> want = greedy[static_cast<size_t>(r)];
    const bool ended = want.size() < 12;
    finished += ended;
    if (ended) want.push_back(kEos);
    std::vector<int32_t> tgt = {kBos};
    tgt.insert(tgt.end(), want.begin(), want.end() - 1);
    const auto T = static_cast<int64_t>(tgt.size());
    const auto src = std::span(b.src).subspan(static_cast<size_t>(r * 6), 6);
    const Tensor mem = m.encode(src, 1, 6);
    const Tensor logits = m.generate(m.decode(tgt, 1, T, mem, padding_mask(src, 1, 6)));
    for (int64_t t = 0; t < T; ++t) {
      int64_t best = 0;
      for (int64_t v = 1; v < 11; ++v)
        if (logits.at({0, t, v}) > logits.at({0, t, best})) best = v;
      CHECK(best == want[static_cast<size_t>(t)]);
    }
  }
  CHECK(finished >= 2);  // rows that ended: their <eos> prediction was checked too
  CHECK(finished < 5);   // and rows cut at max_len
}

TEST_CASE("nn.decode.max_len_0_is_per_sentence") {
  // A model that never emits <eos> shows the length limit: with max_len 0 each sentence stops at
  // its own source tokens + 50, whether decoded alone or beside a longer one, never past the
  // model's positions; an explicit max_len applies to all.
  Transformer m(test::tiny_config(), 10);
  m.parameter("generator.bias").data()[kEos] = -1e4f;
  const std::vector<int32_t> short_src = {4, 5, kEos}, two_rows = {4, 5, kEos, kPad, kPad, kPad, kPad, kPad,
                                                                   6, 7, 8,    9,    10,   4,    5,    kEos};
  const std::vector<int32_t> too_long(30, 6);  // 29 tokens + 50 > 64 positions
  for (const int64_t beam : {1, 3}) {
    INFO("beam " << beam);
    const DecodeOptions o{.beam = beam, .max_len = 0, .length_penalty = 1.0f};
    const Hypotheses alone = decode(m, short_src, 1, 3, o);
    const Hypotheses both = decode(m, two_rows, 2, 8, o);
    CHECK(alone[0].size() == 2 + 50);
    CHECK(both[0] == alone[0]);
    CHECK(both[1].size() == 7 + 50);
    CHECK(decode(m, too_long, 1, 30, o)[0].size() == 64);
    CHECK(decode(m, two_rows, 2, 8, {.beam = beam, .max_len = 7})[0].size() == 7);
  }
}

TEST_CASE("nn.decode.beam_search_finds_better_scores") {
  // With no length penalty, beam search maximises the sum of log-probabilities; its result must
  // score at least as well as greedy's under a full recomputation.
  Transformer m(test::tiny_config(), 12);
  // Hypotheses that end within max_len, and no <pad> (see beam1_equals_greedy).
  m.parameter("generator.bias").data()[kEos] += 0.6f;
  m.parameter("generator.bias").data()[kPad] -= 10.0f;
  m.eval();
  const Batch b = test::padded_batch(4, 6, 5, 13, 11, 13);
  const Hypotheses greedy = greedy_decode(m, b.src, 4, 6, 8);
  const Hypotheses beam = beam_search(m, b.src, 4, 6, {.beam = 4, .max_len = 8, .length_penalty = 0.0f});
  NoGradGuard ng;
  auto score = [&](int64_t r, const std::vector<int32_t>& hyp) {
    std::vector<int32_t> tgt = {kBos}, lab = hyp;
    tgt.insert(tgt.end(), hyp.begin(), hyp.end());
    const bool finished = hyp.size() < 8;
    if (finished)
      lab.push_back(kEos);
    else
      tgt.pop_back();
    const auto T = static_cast<int64_t>(lab.size());
    const auto src = std::span(b.src).subspan(static_cast<size_t>(r * 6), 6);
    const Tensor logits = m.generate(m.decode(tgt, 1, T, m.encode(src, 1, 6), padding_mask(src, 1, 6)));
    return -static_cast<double>(label_smoothed_cross_entropy(reshape(logits, {T, 11}), lab).item()) *
           static_cast<double>(T);
  };
  int64_t compared = 0;
  for (int64_t r = 0; r < 4; ++r) {
    const auto& gb = greedy[static_cast<size_t>(r)];
    const auto& bb = beam[static_cast<size_t>(r)];
    // Only comparable when both are complete (ended with <eos>) hypotheses.
    if (gb.size() >= 8 || bb.size() >= 8) continue;
    ++compared;
    CHECK(score(r, bb) >= score(r, gb) - 1e-4);
  }
  CHECK(compared >= 3);
}

TEST_CASE("nn.transformer.dropout_and_seeds") {
  TransformerConfig c = test::tiny_config();
  c.dropout = 0.3f;
  const Batch b = test::padded_batch(2, 5, 4, 13, 11, 17);
  Transformer m1(c, 5), m2(c, 5), m3(c, 6);
  NoGradGuard ng;
  const Tensor a = m1.forward(b), a2 = m2.forward(b);
  CHECK(test::compare(a, a2, 0.0).first_bad < 0);               // same seed, same run
  CHECK(test::compare(a, m1.forward(b), 1e-4).first_bad >= 0);  // dropout draws fresh masks
  CHECK(test::compare(m1.parameter("generator.weight"), m3.parameter("generator.weight"), 1e-6).first_bad >=
        0);
  m1.eval();
  const Tensor e = m1.forward(b);
  CHECK(test::compare(e, m1.forward(b), 0.0).first_bad < 0);  // eval: deterministic
}

TEST_CASE("nn.transformer.attention_maps") {
  Transformer m(test::tiny_config(), 7);
  m.eval();
  m.keep_attention(true);
  const Batch b = test::padded_batch(2, 5, 4, 13, 11, 19);
  NoGradGuard ng;
  m.forward(b);
  const NamedTensors maps = m.attention_maps();
  REQUIRE(maps.size() == 6);
  CHECK(maps[0].first == "encoder.layers.0.self_attn");
  CHECK(maps[0].second.shape() == Shape{2, 2, 5, 5});
  CHECK(maps[3].first == "decoder.layers.0.multihead_attn");
  CHECK(maps[3].second.shape() == Shape{2, 2, 4, 5});
  // Row 1 of the batch has a source of length 4: its last key gets no cross-attention.
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < 4; ++t) CHECK(maps[3].second.at({1, h, t, 4}) == 0.0f);
}
