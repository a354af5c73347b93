// The GPT language model: nanoGPT's parameter names, the gradient of the whole model against finite
// differences, generation with the key/value cache against recomputing the window, sampling, the
// optimizer's decay groups, misuse. (Text and tokenizers: test_gpt_text.cpp; PyTorch:
// test_gpt_parity.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "nn/gpt.hpp"
#include "nn/gpt_sample.hpp"
#include "nn/optim.hpp"
#include "nn_test_util.hpp"

using namespace tg;
using namespace tg::nn;

namespace {

GptConfig tiny_gpt(int64_t block = 8) {
  GptConfig c;
  c.vocab_size = 11;
  c.block_size = block;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

// Non-trivial layernorm gains and biases everywhere, so that no term of the gradient hides behind
// a zero or a one.
void perturb_norms_and_biases(GPT& m, uint64_t seed) {
  Generator g(seed);
  for (auto& [n, p] : m.named_parameters())
    if (n.find("bias") != std::string::npos || n.find("ln_") != std::string::npos) {
      Tensor t = p;
      const bool w = n.ends_with("weight");
      uniform_(t, w ? 0.5f : -0.3f, w ? 1.5f : 0.3f, g);
    }
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(g.below(static_cast<uint64_t>(vocab)));
  return ids;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
  return d;
}

}  // namespace

TEST_CASE("nn.gpt.parameter_names_are_nanogpts") {
  GPT m(tiny_gpt(), 1);
  std::vector<std::string> expected = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int i = 0; i < 2; ++i)
    for (const char* p : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                          "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
      expected.push_back(fmt::format("transformer.h.{}.{}", i, p));
  expected.push_back("transformer.ln_f.weight");
  expected.push_back("transformer.ln_f.bias");
  std::vector<std::string> names;
  std::map<std::string, Shape> shapes;
  for (const auto& [n, p] : m.named_parameters()) names.push_back(n), shapes[n] = p.shape();
  CHECK(names == expected);
  CHECK(shapes["transformer.wte.weight"] == Shape{11, 8});
  CHECK(shapes["transformer.wpe.weight"] == Shape{8, 8});
  CHECK(shapes["transformer.h.0.attn.c_attn.weight"] == Shape{24, 8});
  CHECK(shapes["transformer.h.1.mlp.c_fc.weight"] == Shape{32, 8});
  CHECK(shapes["transformer.h.1.mlp.c_proj.weight"] == Shape{8, 32});
  CHECK(static_cast<double>(m.num_parameters()) == gpt_parameter_count(m.config()));
  // nanoGPT's initialisation: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)), zero biases.
  GptConfig big = tiny_gpt();
  big.n_embd = 64;
  big.vocab_size = 300;
  GPT b(big, 2);
  auto stddev = [&](const std::string& name) {
    const Tensor p = b.parameter(name);
    double s = 0;
    for (int64_t i = 0; i < p.numel(); ++i) s += static_cast<double>(p.data()[i]) * p.data()[i];
    return std::sqrt(s / static_cast<double>(p.numel()));
  };
  CHECK(stddev("transformer.wte.weight") == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev("transformer.h.0.mlp.c_fc.weight") == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev("transformer.h.0.mlp.c_proj.weight") == doctest::Approx(0.01).epsilon(0.05));
  CHECK(stddev("transformer.h.0.attn.c_attn.bias") == 0.0);
}

TEST_CASE("nn.gpt.gradcheck") {
  GPT m(tiny_gpt(), 3);
  perturb_norms_and_biases(m, 4);
  const int64_t B = 2, T = 6;
  const std::vector<int32_t> x = random_ids(B * T, 11, 5), y = random_ids(B * T, 11, 6);
  // The logits and the loss as one vector (gradcheck_params weights it with random w).
  const auto r = test::gradcheck_params(m.named_parameters(), [&] {
    return concat({reshape(m.forward(x, B, T), {-1}), reshape(m.loss(x, y, B, T), {1})}, 0);
  });
  INFO(r.report);
  CHECK(r.ok);
  MESSAGE("GPT gradcheck: " << r.report);
}

TEST_CASE("nn.gpt.loss_is_the_mean_cross_entropy_of_the_next_token") {
  GPT m(tiny_gpt(), 7);
  const int64_t B = 2, T = 5;
  const std::vector<int32_t> x = random_ids(B * T, 11, 8), y = random_ids(B * T, 11, 9);
  NoGradGuard ng;
  const Tensor logits = m.forward(x, B, T);
  REQUIRE(logits.shape() == Shape{B * T, 11});
  double sum = 0;
  for (int64_t r = 0; r < B * T; ++r) {
    const float* l = logits.data() + r * 11;
    double z = 0;
    for (int v = 0; v < 11; ++v) z += std::exp(static_cast<double>(l[v]));
    sum += std::log(z) - l[y[static_cast<size_t>(r)]];
  }
  CHECK(m.loss(x, y, B, T).item() == doctest::Approx(sum / static_cast<double>(B * T)).epsilon(1e-5));
  // The head is tied: logits = ln_f(h) wte^T, so changing wte changes them through both ends.
  const Tensor h = m.hidden(x, B, T);
  const Tensor direct = matmul(reshape(h, {B * T, 8}), m.transformer.wte.weight, false, true);
  CHECK(test::compare(direct, logits, 1e-5).first_bad < 0);
}

TEST_CASE("nn.gpt.cache_equals_recomputing_the_window") {
  GPT m(tiny_gpt(8), 11);
  perturb_norms_and_biases(m, 12);
  const std::vector<int32_t> prompt = {1, 5, 7};
  GptContext cached(m, true), full(m, false);
  std::vector<float> a = cached.feed(prompt), b = full.feed(prompt);
  double worst = max_abs_diff(a, b);
  Generator g(13);
  // 30 tokens through a block of 8: the window is cut (to 4 tokens) several times.
  for (int i = 0; i < 30; ++i) {
    const int32_t t = sample_token(a, {}, g);
    a = cached.feed(std::span<const int32_t>(&t, 1));
    b = full.feed(std::span<const int32_t>(&t, 1));
    CHECK(cached.window() == full.window());
    worst = std::max(worst, max_abs_diff(a, b));
  }
  CHECK(cached.rebuilds() >= 5);
  CHECK(cached.window().size() <= 8);
  MESSAGE("cache vs recompute: largest logit difference " << worst);
  CHECK(worst < 1e-5);
  // A prompt longer than the block keeps its last block_size tokens.
  GptContext c2(m, true);
  c2.feed(random_ids(20, 11, 14));
  CHECK(c2.window().size() == 8);

  // Whole generations: the same tokens with and without the cache.
  const SampleOptions o{.temperature = 1.0, .top_k = 0, .top_p = 0.9};
  Generator g1(21), g2(21);
  CHECK(generate(m, prompt, 40, o, g1, {}, true) == generate(m, prompt, 40, o, g2, {}, false));
}

// Under Precision::bf16 a context's one-token steps read bf16 copies of every weight they multiply
// by (each block's four and the tied head), made at the first such step; a prompt of more than 4
// positions reads the blocks' fp32 weights (and the head's bf16 copy: it runs on the last position
// only). The logits stay near the fp32 ones (bf16 keeps 8 bits).
TEST_CASE("nn.gpt.bf16_weights_for_decoding") {
  GptConfig cfg = tiny_gpt(16);
  cfg.n_embd = 32, cfg.n_head = 4;
  GPT m(cfg, 31);
  perturb_norms_and_biases(m, 32);
  const std::vector<int32_t> prompt = random_ids(6, cfg.vocab_size, 33);
  GptContext f32(m), b16(m);
  std::vector<float> a = f32.feed(prompt), b;
  {
    const PrecisionScope bf16(Precision::bf16);
    b = b16.feed(prompt);
  }
  const int64_t d = cfg.n_embd;
  CHECK(b16.bf16_weight_bytes() == 2 * cfg.vocab_size * d);  // the blocks ran on 6 rows: fp32
  double worst = 0, largest = 0;
  for (int i = 0; i < 5; ++i) {
    const int32_t t = static_cast<int32_t>(i % cfg.vocab_size);
    a = f32.feed(std::span<const int32_t>(&t, 1));
    {
      const PrecisionScope bf16(Precision::bf16);
      b = b16.feed(std::span<const int32_t>(&t, 1));
    }
    worst = std::max(worst, max_abs_diff(a, b));
    for (float v : a) largest = std::max(largest, static_cast<double>(std::abs(v)));
  }
  CHECK(b16.bf16_weight_bytes() == 2 * (cfg.n_layer * 12 * d * d + cfg.vocab_size * d));
  CHECK(f32.bf16_weight_bytes() == 0);
  MESSAGE("bf16 weights vs fp32: largest logit difference " << worst << " (largest logit " << largest << ")");
  CHECK(worst > 0);
  CHECK(worst < 0.05 * largest);
}

// Decoding against int8 weights (GptContext's int8_weights, lm sample --int8): each one-position
// step's products read int8 copies of the weights they multiply by (each block's four and the head),
// made at the first such step: the logits are those of the fp32 model whose weights are replaced by
// their int8 values (scale * q), up to the order of the sums, and greedy continuations are the same.
// An untied head (the tied one would also change the embedding, which stays fp32) and prompts of at
// most 4 tokens (longer ones read fp32 weights). Odd widths: the dot tiles' column and K tails.
TEST_CASE("nn.gpt.int8_weights_for_decoding") {
  GptConfig cfg = tiny_gpt(24);
  cfg.n_embd = 36, cfg.n_head = 4, cfg.vocab_size = 67, cfg.tie_word_embeddings = false;
  GPT m(cfg, 41), deq(cfg, 41);
  perturb_norms_and_biases(m, 42);
  perturb_norms_and_biases(deq, 42);
  int64_t quantized_bytes = 0;
  for (auto& [name, p] : deq.named_parameters()) {
    if (p.dim() != 2 || !name.ends_with(".weight") || name.find(".wte.") != std::string::npos ||
        name.find(".wpe.") != std::string::npos)
      continue;
    const int64_t rows = p.size(0), cols = p.size(1);
    std::vector<int8_t> q(static_cast<size_t>(ops::int8_bytes(rows, cols)));
    std::vector<float> scale(static_cast<size_t>(rows));
    ops::quantize_int8_rows(q.data(), scale.data(), p.data(), rows, cols);
    Tensor w = p;
    for (int64_t j = 0; j < rows; ++j)
      for (int64_t k = 0; k < cols; ++k)
        w.data()[j * cols + k] = scale[j] * q[static_cast<size_t>(ops::int8_offset(j, k, cols))];
    quantized_bytes += ops::int8_bytes(rows, cols) + rows * static_cast<int64_t>(sizeof(float));
  }
  // the block's 4 matrices (108, 36, 144 and 36 rows of 36, 36, 36 and 144 values, each row padded to 64 or
  // 192) and the head's 67 rows padded to 68; and their scales
  CHECK(quantized_bytes ==
        cfg.n_layer * (3 * 36 * 64 + 36 * 64 + 144 * 64 + 36 * 192 + (3 + 1 + 4 + 1) * 36 * 4) + 68 * 64 +
            67 * 4);
  const std::vector<int32_t> prompt = random_ids(3, cfg.vocab_size, 43);
  GptContext q8(m, true, true), want(deq), f32(m);
  double worst = 0, largest = 0, from_fp32 = 0;
  std::vector<int32_t> fed = prompt;
  for (int i = 0; i < 12; ++i) {
    const std::vector<float> a = q8.feed(fed), b = want.feed(fed), c = f32.feed(fed);
    worst = std::max(worst, max_abs_diff(a, b));
    from_fp32 = std::max(from_fp32, max_abs_diff(a, c));
    for (float v : b) largest = std::max(largest, static_cast<double>(std::abs(v)));
    fed = {static_cast<int32_t>((i * 7 + 3) % cfg.vocab_size)};
  }
  CHECK(q8.int8_weight_bytes() == quantized_bytes);
  CHECK(want.int8_weight_bytes() == 0);
  MESSAGE("int8 weights: largest logit difference " << worst << " from the dequantized model, " << from_fp32
                                                    << " from fp32 (largest logit " << largest << ")");
  CHECK(worst < 1e-5 * (1.0 + largest));
  CHECK(from_fp32 > 0);
  CHECK(from_fp32 < 0.05 * largest);
  const SampleOptions greedy{.temperature = 0.0};
  Generator g1(1), g2(1);
  const std::vector<int32_t> text = generate(m, prompt, 20, greedy, g1, {}, true, true);
  CHECK(text == generate(deq, prompt, 20, greedy, g2));
  // Copies kept by the caller (generate's Int8WeightCache): made by the first generation, read again
  // by the next (3 + 20 tokens: within the block of 24, so no window is re-read on fp32 weights). Proof that
  // they are not made again: weights changed in between (what the contract forbids) leave the second text
  // that of the first copies, where fresh copies part from it.
  Int8WeightCache kept;
  Generator g3(1), g4(1), g5(1);
  CHECK(generate(m, prompt, 20, greedy, g3, {}, true, kept) == text);
  CHECK(kept.bytes() == quantized_bytes);
  for (auto& [name, p] : m.named_parameters())
    if (name.find(".h.") != std::string::npos && name.ends_with(".weight") && p.dim() == 2)
      for (int64_t i = 0; i < p.numel(); ++i) p.data()[i] = -p.data()[i];
  CHECK(generate(m, prompt, 20, greedy, g4, {}, true, kept) == text);
  CHECK(generate(m, prompt, 20, greedy, g5, {}, true, true) != text);
  CHECK(kept.bytes() == quantized_bytes);
}

TEST_CASE("nn.gpt.sampling_is_reproducible_and_follows_the_filters") {
  GPT m(tiny_gpt(16), 31);
  const std::vector<int32_t> prompt = {2, 3};
  const SampleOptions o{.temperature = 1.2, .top_k = 0, .top_p = 1.0};
  Generator a(5), b(5), c(6);
  std::vector<int32_t> streamed;
  const std::vector<int32_t> s1 = generate(m, prompt, 30, o, a, [&](int32_t t) { streamed.push_back(t); });
  CHECK(s1.size() == 30);
  CHECK(streamed == s1);
  CHECK(generate(m, prompt, 30, o, b) == s1);
  CHECK(generate(m, prompt, 30, o, c) != s1);

  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  Generator g(9);
  CHECK(sample_token(logits, {.temperature = 0}, g) == 1);  // argmax, lower id on ties
  CHECK(sample_token(logits, {.temperature = 1, .top_k = 1}, g) == 1);
  CHECK(sample_token(logits, {.temperature = 1, .top_k = 0, .top_p = 1e-6}, g) == 1);
  // Frequencies follow softmax(l / T) restricted to the top 3 (ids 1, 3, 4).
  const double T = 0.7;
  std::vector<double> p(5, 0.0);
  double z = 0;
  for (int i : {1, 3, 4}) z += p[static_cast<size_t>(i)] = std::exp(logits[static_cast<size_t>(i)] / T);
  std::vector<int> count(5, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i)
    ++count[static_cast<size_t>(sample_token(logits, {.temperature = T, .top_k = 3}, g))];
  for (size_t i = 0; i < 5; ++i) {
    const double expected = p[i] / z, got = count[i] / static_cast<double>(n);
    CAPTURE(i);
    // 4.5 standard deviations of a binomial frequency: a wrong distribution fails, chance does not.
    CHECK(std::abs(got - expected) <= 4.5 * std::sqrt(expected * (1 - expected) / n) + 1e-12);
  }
  // Without a filter (the walk in id order, no sort) the frequencies follow softmax(l / T); a -inf
  // logit is never drawn.
  {
    std::vector<float> l(logits.begin(), logits.end());
    l.push_back(-std::numeric_limits<float>::infinity());
    std::vector<double> q(l.size(), 0.0);
    double zq = 0;
    for (size_t i = 0; i < l.size(); ++i) zq += q[i] = std::exp(l[i] / T);
    std::vector<int> seen(l.size(), 0);
    for (int i = 0; i < n; ++i) ++seen[static_cast<size_t>(sample_token(l, {.temperature = T}, g))];
    for (size_t i = 0; i < l.size(); ++i) {
      const double expected = q[i] / zq, got = seen[i] / static_cast<double>(n);
      CAPTURE(i);
      CHECK(std::abs(got - expected) <= 4.5 * std::sqrt(expected * (1 - expected) / n) + 1e-12);
    }
    CHECK(seen.back() == 0);
    // a vocabulary of many chunks: the draws of the tokens past the first chunks follow too
    std::vector<float> big(3000, -30.0f);
    big[2999] = 0.0f, big[1500] = std::log(3.0f);  // p: 1/4 and 3/4 (the rest about 1e-13 each)
    int last = 0;
    for (int i = 0; i < 4000; ++i) {
      const int32_t t = sample_token(big, {.temperature = 1}, g);
      CHECK((t == 1500 || t == 2999));
      last += t == 2999;
    }
    CHECK(std::abs(last / 4000.0 - 0.25) <= 4.5 * std::sqrt(0.25 * 0.75 / 4000));
    // one token; one finite logit among -inf; temperatures that make it greedy or uniform
    Generator e(3);
    CHECK(sample_token(std::vector<float>{-3.0f}, {.temperature = 1}, e) == 0);
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < 50; ++i)
      CHECK(sample_token(std::vector<float>{ninf, ninf, 1.0f, ninf}, {.temperature = 2}, e) == 2);
    const std::vector<float> two = {0.5f, 2.0f, 1.0f};
    int cold = 0, hot = 0;
    for (int i = 0; i < 400; ++i) {
      cold += sample_token(two, {.temperature = 1e-30}, e) == 1;
      hot += sample_token(two, {.temperature = 1e30}, e) == 0;
    }
    CHECK(cold == 400);
    CHECK(std::abs(hot / 400.0 - 1.0 / 3) <= 4.5 * std::sqrt(2.0 / 9 / 400));
    // a logit that is NaN or +inf, or every logit -inf: refused, naming the token
    l[2] = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH_AS(sample_token(l, {.temperature = 1}, g), "sample_token: the logit of token 2 is nan",
                         std::invalid_argument);
    l[2] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH_AS(sample_token(l, {.temperature = 1, .top_k = 2}, g),
                         "sample_token: the logit of token 2 is inf", std::invalid_argument);
    const std::vector<float> none(4, -std::numeric_limits<float>::infinity());
    CHECK_THROWS_AS(sample_token(none, {.temperature = 1}, g), std::invalid_argument);
  }
  // top_p 0.8 of softmax(l) keeps ids 1 and 3 (0.38 + 0.38 < 0.8) and 4 (+0.14 = 0.90): never 0 or 2,
  // and those three as often as softmax(l) renormalised over them says.
  {
    std::vector<int> seen(5, 0);
    for (int i = 0; i < n; ++i) {
      const int32_t t = sample_token(logits, {.temperature = 1, .top_k = 0, .top_p = 0.8}, g);
      CHECK((t == 1 || t == 3 || t == 4));
      ++seen[static_cast<size_t>(t)];
    }
    double zk = 0;
    for (int i : {1, 3, 4}) zk += std::exp(logits[static_cast<size_t>(i)]);
    for (int i : {1, 3, 4}) {
      const double expected = std::exp(logits[static_cast<size_t>(i)]) / zk,
                   got = seen[static_cast<size_t>(i)] / static_cast<double>(n);
      CAPTURE(i);
      CHECK(std::abs(got - expected) <= 4.5 * std::sqrt(expected * (1 - expected) / n));
    }
  }
  // The walk's order equals a stable sort by decreasing logit: ties (-0 and +0 among them), negatives,
  // infinities, subnormals, and a vocabulary of GPT-2's size with many repeated values.
  {
    std::vector<float> l = {0.0f,
                            -0.0f,
                            1.5f,
                            -1.5f,
                            1.5f,
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::infinity(),
                            1e-40f,
                            -1e-40f,
                            3.0f,
                            -7.25f,
                            0.0f};
    Generator r(17);
    for (int i = 0; i < 50257; ++i) l.push_back(static_cast<float>(std::round(r.normal() * 64.0) / 16.0));
    std::vector<int32_t> want(l.size());
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    CHECK(by_decreasing_logit(l) == want);
    // top-k's selection: the same first k (so the same draws as with the whole order)
    for (int64_t k : {1, 2, 7, 40, 1000, 4096}) {
      CAPTURE(k);
      CHECK(most_likely(l, k) == std::vector<int32_t>(want.begin(), want.begin() + k));
    }
    CHECK(most_likely(l, static_cast<int64_t>(l.size()) + 5) == want);
    CHECK(most_likely(l, 0).empty());
    // top-p's selection without a sort: the same ids as the prefix of that order whose weights reach
    // top_p of their sum. Weights that are not the logits' order (keep_nucleus takes any), zeros,
    // ties across the boundary, and a last level of equal logits cut by id.
    std::vector<float> w(l.size());
    for (size_t i = 0; i < l.size(); ++i)
      w[i] =
          std::isfinite(l[i]) ? static_cast<float>(std::exp((l[i] - 3.0) / 1.5)) : (l[i] > 0 ? 0.5f : 0.0f);
    w[20] = 0.0f, w[21] = 1e-42f;
    const auto reference = [](const std::vector<int32_t>& order, const std::vector<float>& p, double top_p) {
      double z = 0;
      for (int32_t i : order) z += p[static_cast<size_t>(i)];
      std::vector<float> kept(p.size(), 0.0f);
      double mass = 0;
      for (size_t j = 0; j < order.size() && mass < top_p * z; ++j) {
        const auto i = static_cast<size_t>(order[j]);
        mass += kept[i] = p[i];
      }
      return kept;
    };
    // Each selection three ways: every radix level (sort_below 0), the default (the few ids of a
    // boundary bucket sorted), and a sort of all of them.
    const size_t sort_belows[] = {0, kSortCandidatesBelow, std::numeric_limits<size_t>::max()};
    for (size_t sort_below : sort_belows)
      for (double top_p : {1e-9, 0.05, 0.3, 0.5, 0.8, 0.9, 0.95, 0.999}) {
        CAPTURE(sort_below);
        CAPTURE(top_p);
        std::vector<float> got = w;
        keep_nucleus(l, got, top_p, sort_below);
        CHECK(got == reference(want, w, top_p));
      }
    // one logit for all (the cut by id alone; top_p x 1000 not a whole number, so that no partial sum
    // ties with the target), and a handful of ties
    const std::vector<float> same(1000, 0.25f), same_w(1000, 0.001f);
    std::vector<int32_t> ids(1000);
    std::iota(ids.begin(), ids.end(), 0);
    for (size_t sort_below : sort_belows)
      for (double top_p : {1e-9, 0.3003, 0.7005, 0.9995}) {
        CAPTURE(sort_below);
        CAPTURE(top_p);
        std::vector<float> got = same_w;
        keep_nucleus(same, got, top_p, sort_below);
        CHECK(got == reference(ids, same_w, top_p));
      }
    const std::vector<float> ties = {1.0f, 2.0f, 2.0f, -0.0f, 0.0f, 2.0f, 1.0f};
    const std::vector<float> tw = {0.1f, 0.2f, 0.2f, 0.05f, 0.05f, 0.2f, 0.1f};
    for (size_t sort_below : sort_belows)
      for (double top_p : {0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95}) {
        CAPTURE(sort_below);
        CAPTURE(top_p);
        std::vector<float> got = tw;
        keep_nucleus(ties, got, top_p, sort_below);
        CHECK(got == reference(by_decreasing_logit(ties), tw, top_p));
      }
    // Where rounding leaves a level's buckets short of the bucket they refine (the first level sums
    // 1 + 2^-53 + 2^-53 to 1 + 2^-52 in two pairs, the next adds them one by one to 1), the whole
    // last bucket is kept: nothing is lost at top_p 1. (Every level run: sort_below 0.)
    const std::vector<float> close = {1.0005f, 1.0002f, 1.002f, 1.0f};
    const float tiny = std::ldexp(1.0f, -53);
    std::vector<float> cw = {tiny, tiny, 1.0f, 0.0f};
    keep_nucleus(close, cw, 1.0, 0);
    CHECK(cw == std::vector<float>{tiny, tiny, 1.0f, 0.0f});
    // (A sort of these four, as the default does, sums 1 + 2^-53 + 2^-53 to 1 in order, as the sorted
    // walk does, and keeps only the 1: the fewest ids that reach the sum.)
    std::vector<float> sorted_cw = {tiny, tiny, 1.0f, 0.0f};
    keep_nucleus(close, sorted_cw, 1.0);
    CHECK(sorted_cw == reference(by_decreasing_logit(close), {tiny, tiny, 1.0f, 0.0f}, 1.0));
    // ... and where the next level's running sum starts from the mass above the bucket it refines:
    // the first level sums 1 + 1.5E and 0.5E + 0.5E apart (E = 2^-52) to 1 + 3E, the second reaches
    // only 1 + 2E, the third must start again from 1 (started from 1 + 2E it would cut after 1.5E).
    // Four logits with one first-level bucket: second-level buckets 3, 2, 1, 1 (the last two apart
    // at the third level), weights 1, 0.5E, 1.5E, 0.5E; ids 0, 3, 1, 2 in decreasing logit.
    const auto near_one = [](uint32_t bits) { return std::bit_cast<float>(0x3F800000u + bits); };
    const float E = std::ldexp(1.0f, -52);
    const std::vector<float> four = {near_one(3u << 10), near_one((1u << 10) + 5), near_one((1u << 10) + 2),
                                     near_one(2u << 10)};
    const std::vector<float> four_w = {1.0f, 1.5f * E, 0.5f * E, 0.5f * E};
    std::vector<float> kept_four = four_w;
    keep_nucleus(four, kept_four, 1.0, 0);
    CHECK(kept_four == four_w);
    // The last level's buckets: logits apart only in their low bits (a level-2 mask or shift that
    // were wrong would cut whole groups of them), positive and negative, against the sorted prefix.
    {
      std::vector<float> low(4096), low_w(4096);
      Generator lr(23);
      for (uint32_t i = 0; i < 4096; ++i) {
        const float m = near_one((i * 37u) % 4096u);
        low[i] = i % 2 ? m : -m;
        low_w[i] = static_cast<float>(lr.uniform_double());
      }
      const std::vector<int32_t> low_order = by_decreasing_logit(low);
      for (size_t sort_below : sort_belows)
        for (double top_p : {0.01, 0.2, 0.45, 0.5, 0.55, 0.9, 0.999}) {
          CAPTURE(sort_below);
          CAPTURE(top_p);
          std::vector<float> got = low_w;
          keep_nucleus(low, got, top_p, sort_below);
          CHECK(got == reference(low_order, low_w, top_p));
        }
    }
    std::vector<float> one = {0.7f};
    keep_nucleus(std::vector<float>{-2.0f}, one, 0.5);
    CHECK(one == std::vector<float>{0.7f});
    CHECK_THROWS_AS(keep_nucleus(ties, one, 0.5), std::invalid_argument);
    std::vector<float> tw2 = tw;
    CHECK_THROWS_AS(keep_nucleus(ties, tw2, 0.0), std::invalid_argument);
    // top-k's selection by counting: the first k ids of the order, whatever the weights
    const auto first_k = [](const std::vector<int32_t>& order, const std::vector<float>& p, int64_t k) {
      std::vector<float> kept(p.size(), 0.0f);
      for (int64_t j = 0; j < std::min<int64_t>(k, static_cast<int64_t>(order.size())); ++j)
        kept[static_cast<size_t>(order[static_cast<size_t>(j)])] =
            p[static_cast<size_t>(order[static_cast<size_t>(j)])];
      return kept;
    };
    const auto V = static_cast<int64_t>(l.size());
    for (size_t sort_below : sort_belows) {
      CAPTURE(sort_below);
      for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{30000}, V - 1, V, V + 5}) {
        CAPTURE(k);
        std::vector<float> got = w;
        keep_most_likely(l, got, k, sort_below);
        CHECK(got == first_k(want, w, k));
      }
      for (int64_t k : {1, 3, 5, 6, 7}) {
        CAPTURE(k);
        std::vector<float> got = tw;
        keep_most_likely(ties, got, k, sort_below);
        CHECK(got == first_k(by_decreasing_logit(ties), tw, k));
      }
    }
    CHECK_THROWS_AS(keep_most_likely(ties, tw2, 0), std::invalid_argument);
    CHECK_THROWS_AS(keep_most_likely(ties, one, 2), std::invalid_argument);
  }
  CHECK_THROWS_AS(sample_token(logits, {.temperature = -1}, g), std::invalid_argument);
  CHECK_THROWS_AS(sample_token(logits, {.temperature = std::numeric_limits<double>::infinity()}, g),
                  std::invalid_argument);
  CHECK_THROWS_AS(sample_token(logits, {.temperature = 1, .top_k = 0, .top_p = 0}, g), std::invalid_argument);
}

// A top k above 4,096 (the selection, not the heap), alone and then with a nucleus: 5,000 equal
// logits, so the cut is by id alone and the tokens left out hold a tenth of the mass. The nucleus
// 0.4999 of the 4,500 kept: 2,249.55 tokens' worth, so ids 0..2249 (no boundary within rounding).
// 6,000 draws each: 4.5 standard deviations of the halves' frequency are 0.029, so a cut at 4,096
// ids instead of 4,500 (the lower half's share 0.549) fails; each draw selects among 5,000 logits,
// and at 20,000 draws this case took 110 s of the CI's ASan suite at -O0.
TEST_CASE("nn.gpt.sampling_top_k_above_4096_with_and_without_a_nucleus") {
  Generator g(9);
  const std::vector<float> flat(5000, 1.5f);
  const int n = 6000;
  int low = 0, lowest = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t t = sample_token(flat, {.temperature = 1, .top_k = 4500}, g);
    CHECK((t >= 0 && t < 4500));
    low += t < 2250;
    const int32_t u = sample_token(flat, {.temperature = 1, .top_k = 4500, .top_p = 0.4999}, g);
    CHECK((u >= 0 && u < 2250));
    lowest += u < 1125;
  }
  CHECK(std::abs(low / static_cast<double>(n) - 0.5) <= 4.5 * std::sqrt(0.25 / n));
  CHECK(std::abs(lowest / static_cast<double>(n) - 0.5) <= 4.5 * std::sqrt(0.25 / n));
}

TEST_CASE("nn.gpt.adamw_decays_matrices_only") {
  GPT m(tiny_gpt(), 41);
  AdamW opt(m.named_parameters(), {.lr = 0.1f, .weight_decay = 0.5f, .decay_matrices_only = true});
  std::map<std::string, std::vector<float>> before;
  for (const auto& [n, p] : m.named_parameters()) {
    before[n] = p.to_vector();
    backward(sum(mul(p, Tensor::zeros(p.shape()))));  // a zero gradient: only the decay moves p
  }
  opt.step();
  for (const auto& [n, p] : m.named_parameters()) {
    CAPTURE(n);
    const std::vector<float> after = p.to_vector(), was = before[n];
    const float factor = p.dim() >= 2 ? 1.0f - 0.1f * 0.5f : 1.0f;
    for (size_t i = 0; i < after.size(); ++i) REQUIRE(after[i] == doctest::Approx(was[i] * factor));
  }
}

TEST_CASE("nn.gpt.misuse_names_the_problem") {
  GPT m(tiny_gpt(8), 1);
  const std::vector<int32_t> nine = random_ids(9, 11, 1), bad = {1, 2, 11};
  CHECK_THROWS_WITH_AS(m.forward(nine, 1, 9), doctest::Contains("exceed the block size 8"),
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(m.forward(bad, 1, 3), doctest::Contains("outside the vocabulary [0, 11)"),
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(m.forward(bad, 2, 3), doctest::Contains("3 ids for batch 2 x length 3"),
                       std::invalid_argument);
  GptConfig c = tiny_gpt();
  c.n_head = 3;
  CHECK_THROWS_WITH_AS(GPT(c, 1), doctest::Contains("n_embd (8) must be divisible by n_head (3)"),
                       std::invalid_argument);
  c = tiny_gpt();
  c.dropout = 1.0f;
  CHECK_THROWS_WITH_AS(GPT(c, 1), doctest::Contains("dropout must be in [0, 1)"), std::invalid_argument);
  NoGradGuard ng;
  GptCache cache = m.start_cache(1);
  m.step(cache, std::span<const int32_t>(nine).first(8), 8);
  CHECK_THROWS_WITH_AS(m.step(cache, std::span<const int32_t>(bad).first(1), 1),
                       doctest::Contains("positions 8..8 exceed the block size 8"), std::out_of_range);
}

TEST_CASE("nn.gpt.dropout_only_in_training") {
  GptConfig c = tiny_gpt();
  c.dropout = 0.3f;
  GPT m(c, 51);
  const std::vector<int32_t> x = random_ids(16, 11, 2);
  NoGradGuard ng;
  m.eval();
  const std::vector<float> e1 = m.forward(x, 2, 8).to_vector(), e2 = m.forward(x, 2, 8).to_vector();
  CHECK(e1 == e2);
  m.train();
  const std::vector<float> t1 = m.forward(x, 2, 8).to_vector(), t2 = m.forward(x, 2, 8).to_vector();
  CHECK(t1 != e1);
  CHECK(t1 != t2);
}

// What GPT-2 adds (optional config fields): the tanh GELU, the layer norms' epsilon, an untied head.
TEST_CASE("nn.gpt.gpt2_options") {
  GptConfig c = tiny_gpt();
  c.activation = "gelu_new";
  c.layer_norm_epsilon = 1e-3f;
  c.tie_word_embeddings = false;
  GPT m(c, 3);
  const NamedTensors params = m.named_parameters();
  CHECK(params.back().first == "lm_head.weight");  // after transformer.*, as nanoGPT and transformers list it
  CHECK(params.back().second.shape() == Shape{11, 8});
  CHECK(static_cast<double>(m.num_parameters()) == gpt_parameter_count(c));
  CHECK(gpt_parameter_count(c) == gpt_parameter_count(tiny_gpt()) + 11 * 8);
  CHECK(m.transformer.h[0]->ln_1.eps == 1e-3f);
  CHECK(m.transformer.ln_f.eps == 1e-3f);
  CHECK(m.transformer.h[1]->mlp.approx == GeluApprox::tanh);
  // The untied head is drawn after everything else: the body starts as the tied model's does.
  GPT tied(tiny_gpt(), 3);
  for (const auto& [n, p] : tied.named_parameters()) {
    CAPTURE(n);
    CHECK(m.parameter(n).to_vector() == p.to_vector());
  }

  perturb_norms_and_biases(m, 4);
  const int64_t B = 2, T = 6;
  const std::vector<int32_t> x = random_ids(B * T, 11, 5), y = random_ids(B * T, 11, 6);
  const auto r = test::gradcheck_params(m.named_parameters(), [&] {
    return concat({reshape(m.forward(x, B, T), {-1}), reshape(m.loss(x, y, B, T), {1})}, 0);
  });
  INFO(r.report);
  CHECK(r.ok);
  {
    // logits = ln_f(h) lm_head^T; wte only embeds.
    NoGradGuard ng;
    const Tensor logits = m.forward(x, B, T), h = m.hidden(x, B, T);
    CHECK(test::compare(matmul(reshape(h, {B * T, 8}), m.lm_head->weight, false, true), logits, 1e-5)
              .first_bad < 0);
    // The cache gives the same last logits as the whole window.
    m.eval();
    GptCache cache = m.start_cache(1);
    const std::vector<float> stepped = m.step(cache, std::span(x).first(T), T).to_vector();
    const std::vector<float> whole = m.forward(std::span(x).first(T), 1, T).to_vector();
    CHECK(max_abs_diff(stepped, std::vector<float>(whole.end() - 11, whole.end())) < 1e-5);
  }

  // The tanh form is used: the same MLP with the exact GELU gives other outputs (pre-activations
  // near 2, where the two differ by about 1e-4).
  GptConfig erf = c;
  erf.activation = "gelu";
  GPT e(erf, 3);
  const Tensor h = Tensor::full({1, 1, 8}, 1.0f);
  std::vector<float> outs[2];
  for (GPT* g : {&m, &e}) {
    GptMlp& mlp = g->transformer.h[0]->mlp;
    fill_(mlp.c_fc.weight, 0.25f);
    fill_(mlp.c_fc.bias, 0.0f);
    fill_(mlp.c_proj.weight, 0.1f);
    NoGradGuard ng;
    outs[g == &e] = mlp.forward(h).to_vector();
  }
  CHECK(max_abs_diff(outs[0], outs[1]) > 1e-4);

  c.activation = "relu";
  CHECK_THROWS_WITH_AS(GPT(c, 1),
                       doctest::Contains("activation must be \"gelu\" or \"gelu_new\", got \"relu\""),
                       std::invalid_argument);
  c.activation = "gelu";
  c.layer_norm_epsilon = 0.0f;
  CHECK_THROWS_WITH_AS(GPT(c, 1), doctest::Contains("layer_norm_epsilon must be a finite number > 0"),
                       std::invalid_argument);
}
