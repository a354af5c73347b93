#include <doctest/doctest.h>

#include <functional>
#include <numeric>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/gradcheck.hpp"
#include "autograd/precision.hpp"
#include "autograd/tape.hpp"
#include "nn/attention.hpp"
#include "nn_test_util.hpp"

using namespace tg;
using namespace tg::nn;

namespace {

// Gradient check of attention() (a call of m) with respect to m's parameters and the named inputs
// (24 sampled elements of each); the report says which gradients disagree.
void check_attention_gradients(const MultiHeadAttention& m,
                               std::initializer_list<std::pair<const char*, Tensor>> inputs,
                               const std::function<Tensor()>& attention) {
  NamedTensors params = m.named_parameters();
  for (auto& [name, t] : inputs) params.emplace_back(name, t);
  const auto r = test::gradcheck_params(params, attention, {.samples = 24});
  INFO(r.report);
  CHECK(r.ok);
}

// Biases start at zero; random ones make the check cover their gradients' use too.
void randomize_biases(MultiHeadAttention& m, Generator& g) {
  uniform_(m.in_proj_bias, -0.5f, 0.5f, g);
  uniform_(m.out_proj.bias, -0.5f, 0.5f, g);
}

// Causal self-attention of a 2-head module (seeded by `seed`) over x [batch, T, 8], once in full and
// once chunk by chunk (lengths `chunks`, summing to T) through self_attention_step: checks that the
// cache holds T positions and the outputs agree. Returns the cache for further checks.
KVCache check_incremental_matches_full(uint64_t seed, int64_t batch, const std::vector<int64_t>& chunks) {
  Generator g(seed);
  MultiHeadAttention mha(8, 2, 0.0f, g);
  const int64_t T = std::accumulate(chunks.begin(), chunks.end(), int64_t{0});
  const Tensor x = Tensor::normal({batch, T, 8}, 0, 1, g);
  NoGradGuard ng;
  const Tensor full = mha.self_attention(x, true);
  KVCache cache;
  std::vector<Tensor> parts;
  int64_t t0 = 0;
  for (int64_t len : chunks) {
    parts.push_back(mha.self_attention_step(slice(x, 1, t0, t0 + len), cache));
    t0 += len;
  }
  CHECK(cache.length() == T);
  const auto r = test::compare(concat(parts, 1), full, 1e-5);
  INFO("max diff " << r.max_diff);
  CHECK(r.first_bad < 0);
  return cache;
}

}  // namespace

TEST_CASE("nn.attention.self.gradcheck") {
  Generator g(11);
  MultiHeadAttention mha(8, 2, 0.0f, g);
  randomize_biases(mha, g);
  Tensor x = Tensor::normal({2, 5, 8}, 0, 1, g).requires_grad_();
  check_attention_gradients(mha, {{"x", x}}, [&] { return mha.self_attention(x, false); });
}

TEST_CASE("nn.attention.causal_padded.gradcheck") {
  Generator g(12);
  MultiHeadAttention mha(8, 4, 0.0f, g);
  randomize_biases(mha, g);
  Tensor x = Tensor::normal({2, 6, 8}, 0, 1, g).requires_grad_();
  const KeyPadding pad{{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, 2, 6};
  for (bool keep : {false, true}) {  // the attention op, then attention_probs + attention_context
    CAPTURE(keep);
    mha.keep_attention = keep;
    check_attention_gradients(mha, {{"x", x}}, [&] { return mha.self_attention(x, true, pad); });
  }
}

TEST_CASE("nn.attention.cross.gradcheck") {
  Generator g(13);
  MultiHeadAttention mha(8, 2, 0.0f, g);
  randomize_biases(mha, g);
  Tensor x = Tensor::normal({2, 3, 8}, 0, 1, g).requires_grad_();
  Tensor mem = Tensor::normal({2, 5, 8}, 0, 1, g).requires_grad_();
  const KeyPadding pad{{0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, 2, 5};
  for (bool keep : {false, true}) {
    CAPTURE(keep);
    mha.keep_attention = keep;
    check_attention_gradients(mha, {{"x", x}, {"memory", mem}},
                              [&] { return mha.cross_attention(x, mem, pad); });
  }
}

TEST_CASE("nn.attention.one_op_matches_two_ops") {
  // attention() recomputes P in backward instead of storing it: output and gradients are the two
  // ops' bit for bit, with masks, dropout, separate or shared sources, and keys that are only the
  // first kv_len rows (a cache with spare capacity). From 8 queries on that is the fused kernel,
  // whose products run the GEMM's register tiles in the GEMM's order (its gradients: see below):
  // fp32 tiles, also under bf16 where the kernels have no bf16 products for it (the reference is
  // then the two ops in fp32), or the bf16 GEMM's vdpbf16ps tiles on operands rounded as the GEMM
  // rounds them (AVX512_BF16: the reference is the two ops in bf16). Each case runs in
  // fp32, in bf16 as this CPU does it, and in bf16 with bf16 products forced (the widen path where
  // the CPU has no bf16 unit), so the rule is checked on every machine.
  struct Case {
    const char* name;
    bool shared, causal;
    float p;
    int64_t T, S_rows, kv_len;
    std::vector<uint8_t> pad;  // [B=2, keys] or empty
  };
  const int64_t H = 3, dh = 4, d = H * dh;
  const std::vector<Case> cases = {
      {"self, causal, padded", true, true, 0.0f, 6, 6, -1, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}},
      {"self, causal, dropout", true, true, 0.3f, 7, 7, -1, {}},
      {"cross, padded, dropout", false, false, 0.25f, 3, 5, -1, {0, 0, 0, 1, 1, 0, 0, 0, 0, 0}},
      {"cross, kv_len 4 of 6 rows", false, true, 0.0f, 2, 6, 4, {}},
      // from 8 queries the op runs the fused kernel (ops::attention_forward)
      {"self, causal, dropout, 20 queries", true, true, 0.2f, 20, 20, -1, {}},
      {"cross, padded, 9 queries", false, false, 0.0f, 9, 11, -1, {0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1,  //
                                                                   1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
      {"cross, causal, kv_len 10 of 12 rows, 8 queries", false, true, 0.1f, 8, 12, 10, {}},
  };
  struct Mode {
    const char* name;
    Precision prec;
    bool forced;  // set_bf16_products_everywhere
  };
  struct Forced {  // restores the default when the case ends, however it ends
    explicit Forced(bool on) { set_bf16_products_everywhere(on); }
    ~Forced() { set_bf16_products_everywhere(false); }
    Forced(const Forced&) = delete;
    Forced& operator=(const Forced&) = delete;
  };
  const Mode modes[] = {{"fp32", Precision::fp32, false},
                        {"bf16", Precision::bf16, false},
                        {"bf16, products forced", Precision::bf16, true}};
  for (const Case& c : cases) {
    for (const Mode& m : modes) {
      CAPTURE(std::string(c.name));
      CAPTURE(std::string(m.name));
      const Forced forced(m.forced);
      const bool fused = c.T >= 8;  // the one op's fused kernel
      // its products: bf16 under bf16 where the kernels have them for it (AVX512_BF16), else fp32
      const bool fused_bf16 =
          fused && effective_precision(m.prec) == Precision::bf16 && ops::active().attention_bf16 != nullptr;
      Generator g(31);
      const int64_t keys = c.kv_len >= 0 ? c.kv_len : c.S_rows;
      const KeyPadding pad = c.pad.empty() ? KeyPadding{} : KeyPadding{c.pad, 2, keys};
      // kv_src holds [other | K | V] columns, q_src [Q | other]: blocks not at column 0 either
      const Tensor kv0 = Tensor::normal({2, c.S_rows, 2 * d + 1}, 0, 1, g);
      const Tensor q0 = c.shared ? kv0 : Tensor::normal({2, c.T, d + 2}, 0, 1, g);
      const Tensor w = Tensor::uniform({2, c.T, d}, -1, 1, g);
      const int64_t q_col = c.shared ? 1 : 2, k_col = 1, v_col = 1 + d;
      Tensor out[2], dq[2], dkv[2];
      for (int one_op = 0; one_op < 2; ++one_op) {
        Generator drop_gen(77);
        Tensor kv = kv0.clone().requires_grad_();
        Tensor q = c.shared ? kv : q0.clone().requires_grad_();
        const float scale = 0.5f;
        const AttentionSpec spec{.heads = H,
                                 .d_head = dh,
                                 .q_col = q_col,
                                 .k_col = k_col,
                                 .v_col = v_col,
                                 .scale = scale,
                                 .causal = c.causal,
                                 .pad = &pad,
                                 .kv_len = c.kv_len,
                                 .dropout_p = c.p,
                                 .gen = &drop_gen};
        const PrecisionScope scope(one_op || !fused || fused_bf16 ? m.prec : Precision::fp32);
        const Tensor o =
            one_op ? attention(q, kv, spec) : attention_context(attention_probs(q, kv, spec), kv, spec);
        sum(mul(o, w)).backward();
        out[one_op] = o.detach(), dq[one_op] = q.grad(), dkv[one_op] = kv.grad();
      }
      // The fused kernel adds dK and dV once per block of query rows (four register tiles in
      // backward: 48 rows on AVX-512, 24 on AVX2, 32 on NEON, 16 on SSE2) where the GEMM sums over
      // all T at once, and with
      // at most 4 keys the GEMM takes its dot-product path: there the gradients agree up to the
      // grouping of those sums. Output and the per-row path: bit for bit.
      const double grad_tol = fused ? 1e-5 : 0.0;
      CHECK(test::compare(out[0], out[1], 0.0).first_bad < 0);
      const test::CloseResult rq = test::compare(dq[0], dq[1], grad_tol),
                              rkv = test::compare(dkv[0], dkv[1], grad_tol);
      INFO("max |diff|: dq " << rq.max_diff << ", dkv " << rkv.max_diff);
      CHECK(rq.first_bad < 0);
      CHECK(rkv.first_bad < 0);
    }
  }
  // With the dropout seed fixed per evaluation, the op is a smooth function: finite differences.
  Generator g(32);
  const Tensor kv0 = Tensor::normal({2, 5, 2 * d}, 0, 1, g), q0 = Tensor::normal({2, 4, d}, 0, 1, g);
  const Tensor w = Tensor::uniform({2, 4, d}, -1, 1, g);
  const KeyPadding pad{{0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, 2, 5};
  auto f = [&](const std::vector<Tensor>& x) {
    Generator drop_gen(5);
    const AttentionSpec spec{.heads = H,
                             .d_head = dh,
                             .v_col = d,
                             .scale = 0.5f,
                             .causal = true,
                             .pad = &pad,
                             .dropout_p = 0.3f,
                             .gen = &drop_gen};
    return sum(mul(attention(x[0], x[1], spec), w));
  };
  const GradcheckResult r = gradcheck(f, {q0.clone().requires_grad_(), kv0.clone().requires_grad_()});
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("nn.attention.context_dropout_matches_dropout_then_context") {
  // attention_context with dropout p draws the mask dropout(P, p) would draw from the same
  // generator state: values and gradients match the unfused pair (which stores D(P)).
  Generator g(21);
  const int64_t B = 3, H = 2, T = 4, S = 5, dh = 3, v_col = 1 + H * dh;  // values after other columns
  const Tensor p0 = Tensor::uniform({B, H, T, S}, 0, 1, g);
  const Tensor v0 = Tensor::normal({B, S, 2 * H * dh + 1}, 0, 1, g);
  const Tensor w = Tensor::uniform({B, T, H * dh}, -1, 1, g), wp = Tensor::uniform({B, H, T, S}, -1, 1, g);
  for (float p : {0.3f, 0.0f, 1.0f}) {
    // second_use: P also feeds sum(P * wp), whose rule runs first, so attention_context's backward
    // adds to an existing dP instead of storing the first contribution.
    for (bool second_use : {false, true}) {
      CAPTURE(p);
      CAPTURE(second_use);
      Tensor out[2], dp[2], dv[2];
      for (int fused = 0; fused < 2; ++fused) {
        Generator drop_gen(99);
        Tensor pr = p0.clone().requires_grad_(), v = v0.clone().requires_grad_();
        const Tensor o =
            fused ? attention_context(pr, v, {.d_head = dh, .v_col = v_col, .dropout_p = p, .gen = &drop_gen})
                  : attention_context(dropout(pr, p, true, drop_gen), v, {.d_head = dh, .v_col = v_col});
        Tensor loss = sum(mul(o, w));
        if (second_use) loss = loss + sum(mul(pr, wp));
        loss.backward();
        out[fused] = o.detach(), dp[fused] = pr.grad(), dv[fused] = v.grad();
      }
      CHECK(test::compare(out[0], out[1], 1e-6).first_bad < 0);
      CHECK(test::compare(dp[0], dp[1], 1e-5).first_bad < 0);
      CHECK(test::compare(dv[0], dv[1], 1e-5).first_bad < 0);
    }
  }
  // With the seed fixed per evaluation, dropout is a fixed linear map: finite differences apply.
  auto f = [&](const std::vector<Tensor>& x) {
    Generator drop_gen(5);
    return sum(mul(
        attention_context(x[0], x[1], {.d_head = dh, .v_col = v_col, .dropout_p = 0.4f, .gen = &drop_gen}),
        w));
  };
  const GradcheckResult r = gradcheck(f, {p0.clone().requires_grad_(), v0.clone().requires_grad_()});
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("nn.attention.masks_hide_keys") {
  Generator g(14);
  MultiHeadAttention mha(8, 2, 0.0f, g);
  const Tensor x = Tensor::normal({2, 6, 8}, 0, 1, g);
  const KeyPadding pad{{0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0}, 2, 6};
  NoGradGuard ng;

  SUBCASE("padded keys") {
    const Tensor y = mha.self_attention(x, false, pad);
    Tensor x2 = x.clone();
    for (int64_t s : {4, 5})
      for (int64_t k = 0; k < 8; ++k) x2.data()[s * 8 + k] += 3.0f;  // batch 0, padded positions
    const Tensor y2 = mha.self_attention(x2, false, pad);
    // Unpadded queries of batch 0 and all of batch 1 are unchanged.
    for (int64_t i = 0; i < 2 * 6 * 8; ++i) {
      const int64_t b = i / 48, t = (i / 8) % 6;
      if (b == 0 && t >= 4) continue;
      CHECK(std::abs(y.data()[i] - y2.data()[i]) < 1e-6);
    }
    // And the mask matters: without it the output changes.
    const Tensor y3 = mha.self_attention(x2, false);
    CHECK(test::compare(y, y3, 1e-3).first_bad >= 0);
  }
  SUBCASE("future positions") {
    const Tensor y = mha.self_attention(x, true);
    Tensor x2 = x.clone();
    for (int64_t k = 0; k < 8; ++k) x2.data()[4 * 8 + k] -= 2.0f;  // batch 0, position 4
    const Tensor y2 = mha.self_attention(x2, true);
    for (int64_t t = 0; t < 6; ++t)
      for (int64_t k = 0; k < 8; ++k) {
        const float d = std::abs(y.data()[t * 8 + k] - y2.data()[t * 8 + k]);
        if (t < 4)
          CHECK(d < 1e-6);
        else if (k == 0)
          CHECK(d > 1e-4);
      }
  }
  SUBCASE("attention weights sum to one and are zero on masked keys") {
    mha.keep_attention = true;
    mha.self_attention(x, true, pad);
    const Tensor& a = mha.last_attention;
    REQUIRE(a.shape() == Shape{2, 2, 6, 6});
    for (int64_t row = 0; row < 2 * 2 * 6; ++row) {
      const int64_t b = row / 12, t = row % 6;
      double s = 0;
      for (int64_t k = 0; k < 6; ++k) {
        const float p = a.data()[row * 6 + k];
        s += p;
        if (k > t || (b == 0 && k >= 4)) CHECK(p == 0.0f);
      }
      CHECK(s == doctest::Approx(1.0).epsilon(1e-5));
    }
  }
}

TEST_CASE("nn.attention.incremental_matches_full") {
  // Feed 2 positions, then 1, then 2: chunks see the cache and each other causally.
  check_incremental_matches_full(15, 2, {2, 1, 2});
}

TEST_CASE("nn.attention.incremental_cache_grows_in_place") {
  // 37 single steps: the cache (capacity 16, doubled when full) is regrown twice.
  const KVCache cache = check_incremental_matches_full(16, 3, std::vector<int64_t>(37, 1));
  CHECK(cache.kv.size(1) >= 37);
}
