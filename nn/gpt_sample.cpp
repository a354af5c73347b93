#include "nn/gpt_sample.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "autograd/tape.hpp"
#include "ops/kernels.hpp"

namespace tg::nn {

std::vector<int32_t> by_decreasing_logit(std::span<const float> logits) {
  // An LSD radix sort (stable) on keys that order the floats as unsigned integers, decreasing: 3 passes
  // of 11 bits over the ids, which start in increasing order, so ties stay by id. At GPT-2's 50,257
  // classes a comparison sort with its indirection was about a tenth of a sampled token's time.
  constexpr int kBits = 11;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  const size_t V = logits.size();
  std::vector<uint32_t> key(V), key2(V);
  std::vector<int32_t> id(V), id2(V);
  for (size_t i = 0; i < V; ++i) {
    // -0 ties with +0 as it does for operator>; then the sign bit flipped for positives and every
    // bit flipped for negatives gives increasing unsigned order, and ~ of that decreasing.
    const uint32_t b = logits[i] == 0.0f ? 0u : std::bit_cast<uint32_t>(logits[i]);
    key[i] = ~((b & 0x80000000u) ? ~b : (b | 0x80000000u));
    id[i] = static_cast<int32_t>(i);
  }
  for (int shift = 0; shift < 32; shift += kBits) {
    std::array<size_t, (1u << kBits) + 1> start{};
    for (uint32_t k : key) ++start[((k >> shift) & kMask) + 1];
    for (size_t d = 1; d < start.size(); ++d) start[d] += start[d - 1];
    for (size_t i = 0; i < V; ++i) {
      const size_t to = start[(key[i] >> shift) & kMask]++;
      key2[to] = key[i];
      id2[to] = id[i];
    }
    key.swap(key2);
    id.swap(id2);
  }
  return id;
}

std::vector<int32_t> most_likely(std::span<const float> logits, int64_t k) {
  const auto V = static_cast<int64_t>(logits.size());
  k = std::clamp<int64_t>(k, 0, V);
  if (k == 0) return {};
  // a before b: a larger logit, or an equal one (-0 equals +0, as in by_decreasing_logit) and a lower id
  const float* l = logits.data();
  const auto before = [l](int32_t a, int32_t b) { return l[a] > l[b] || (!(l[b] > l[a]) && a < b); };
  // A heap of the k best so far, the last of them on top; the ids come in increasing order, so a later
  // id enters only with a larger logit than the top's (the common case: one comparison, not taken).
  std::vector<int32_t> heap(static_cast<size_t>(k));
  std::iota(heap.begin(), heap.end(), 0);
  std::make_heap(heap.begin(), heap.end(), before);
  float worst = l[heap.front()];
  for (int64_t i = k; i < V; ++i) {
    if (!(l[i] > worst)) continue;
    std::pop_heap(heap.begin(), heap.end(), before);
    heap.back() = static_cast<int32_t>(i);
    std::push_heap(heap.begin(), heap.end(), before);
    worst = l[heap.front()];
  }
  std::sort_heap(heap.begin(), heap.end(), before);  // best first
  return heap;
}

int32_t sample_token(std::span<const float> logits, const SampleOptions& o, Generator& gen) {
  const auto V = static_cast<int64_t>(logits.size());
  if (V == 0) throw std::invalid_argument("sample_token: no logits");
  if (!(o.temperature >= 0) || o.top_k < 0 || !(o.top_p > 0 && o.top_p <= 1))
    throw std::invalid_argument(
        fmt::format("sample_token: temperature {} must be >= 0, top_k {} >= 0, top_p {} in (0, 1]",
                    o.temperature, o.top_k, o.top_p));
  if (o.temperature == 0) {  // greedy: the most likely token, the lowest id on ties
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
    return static_cast<int32_t>(best);
  }
  // A logit that is NaN or +inf has no probability to give; -inf is a token never drawn. The max
  // on integer keys that order the floats as signed integers (the bits after the sign flipped for
  // negatives; -0 below +0), in SIMD.
  const auto key = [](float l) {
    const auto b = std::bit_cast<uint32_t>(l);
    return static_cast<int32_t>(b ^ (static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) >> 1));
  };
  constexpr uint32_t kInf = 0x7f800000u;
  int32_t best = std::numeric_limits<int32_t>::min();
  uint32_t bad = 0;
  const float* lp = logits.data();
#pragma omp simd reduction(max : best) reduction(| : bad)
  for (int64_t i = 0; i < V; ++i) {
    const auto b = std::bit_cast<uint32_t>(lp[i]);
    bad |= static_cast<uint32_t>((b & 0x7fffffffu) > kInf) | static_cast<uint32_t>(b == kInf);
    best = std::max(best, key(lp[i]));
  }
  if (bad)
    for (int64_t i = 0; i < V; ++i)
      if (!(lp[i] < std::numeric_limits<float>::infinity()))
        throw std::invalid_argument(fmt::format("sample_token: the logit of token {} is {}", i, lp[i]));
  const float top =
      std::bit_cast<float>(static_cast<uint32_t>(best) ^ (static_cast<uint32_t>(best >> 31) >> 1));
  if (top == -std::numeric_limits<float>::infinity())
    throw std::invalid_argument("sample_token: every logit is -inf");
  if ((o.top_k == 0 || o.top_k >= V) && o.top_p == 1) {
    // No filter: p = softmax((l - max) / T) by the SIMD kernel (fp32), and one uniform number walks
    // the tokens in id order: the draws' distribution is the sorted walk's (up to fp32 rounding: a
    // probability below about e^-87 of the largest is 0 here), without the sort and a
    // double exp per token (1.7 ms of a GPT-2 token's 10 on a Zen 3; 0.13 ms this way). The walk
    // skips whole chunks of 512 tokens by their sums.
    constexpr size_t kChunk = 512;
    std::vector<float> p(logits.size());
    for (size_t i = 0; i < p.size(); ++i)
      p[i] = static_cast<float>((static_cast<double>(logits[i]) - top) / o.temperature);
    ops::softmax_forward(p.data(), p.data(), 1, V, {});
    std::vector<double> chunk((p.size() + kChunk - 1) / kChunk, 0.0);
    double total = 0;
    for (size_t c = 0; c < chunk.size(); ++c) {
      double sum = 0;
      const size_t end = std::min(p.size(), (c + 1) * kChunk);
#pragma omp simd reduction(+ : sum)
      for (size_t i = c * kChunk; i < end; ++i) sum += p[i];
      total += chunk[c] = sum;
    }
    double u = gen.uniform_double() * total;
    size_t c = 0;
    for (; c + 1 < chunk.size() && u >= chunk[c]; ++c) u -= chunk[c];
    for (size_t i = c * kChunk; i < p.size(); ++i) {
      if (u < p[i]) return static_cast<int32_t>(i);
      u -= p[i];
    }
    // u outran the sums by rounding: the last token with a nonzero probability (the max has one)
    size_t i = p.size() - 1;
    while (p[i] == 0) --i;
    return static_cast<int32_t>(i);
  }
  // Most likely first, ties by id: the order the filters cut and the draw walks. A top k of up to
  // 4,096 by a heap (the README's --top-k 40 over GPT-2's vocabulary: 1.36 -> 0.08 ms per token on
  // a Zen 3, the same draws), else the whole order by the radix sort.
  const std::vector<int32_t> order =
      o.top_k > 0 && o.top_k <= 4096 ? most_likely(logits, o.top_k) : by_decreasing_logit(logits);

  const auto kept_k = static_cast<size_t>(o.top_k > 0 ? std::min(o.top_k, V) : V);
  // p_i = exp((l_i - l_max) / T) / Z over the kept tokens.
  std::vector<double> p(kept_k);
  double z = 0;
  for (size_t i = 0; i < kept_k; ++i)
    z += p[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / o.temperature);
  size_t kept = kept_k;
  if (o.top_p < 1) {
    double mass = 0;
    for (kept = 0; kept < kept_k && mass < o.top_p * z;) mass += p[kept++];
  }
  double total = 0;
  for (size_t i = 0; i < kept; ++i) total += p[i];
  double u = gen.uniform_double() * total;
  for (size_t i = 0; i + 1 < kept; ++i) {
    if (u < p[i]) return order[i];
    u -= p[i];
  }
  return order[kept - 1];
}

GptContext::GptContext(GPT& model, bool use_cache, bool int8_weights)
    : model_(model), use_cache_(use_cache), int8_(int8_weights ? &own_int8_ : nullptr) {}

GptContext::GptContext(GPT& model, bool use_cache, Int8WeightCache& int8_copies)
    : model_(model), use_cache_(use_cache), int8_(&int8_copies) {}

std::vector<float> GptContext::feed(std::span<const int32_t> tokens) {
  if (tokens.empty()) throw std::invalid_argument("GptContext::feed: no tokens");
  const int64_t block = model_.config().block_size, n = static_cast<int64_t>(tokens.size());
  window_.insert(window_.end(), tokens.begin(), tokens.end());
  bool cut = false;
  if (static_cast<int64_t>(window_.size()) > block) {
    const int64_t keep = std::min(block, std::max(n, block / 2));
    window_.erase(window_.begin(), window_.end() - keep);
    ++rebuilds_;
    cut = true;
  }
  const auto W = static_cast<int64_t>(window_.size());
  const bool was_training = model_.is_training();
  model_.eval();
  NoGradGuard no_grad;
  const Bf16WeightScope weights(bf16_weights_);  // used under Precision::bf16 only
  const Int8WeightScope int8(int8_);
  std::vector<float> logits;
  if (!use_cache_) {  // the training forward over the whole window; its last row
    const Tensor all = model_.forward(window_, 1, W);
    const int64_t V = all.size(1);
    logits.assign(all.data() + (W - 1) * V, all.data() + W * V);
  } else if (cut || cache_.layers.empty()) {  // (re)read the window from position 0
    cache_ = model_.start_cache(1);
    logits = model_.step(cache_, window_, W).to_vector();
  } else {
    logits = model_.step(cache_, tokens, n).to_vector();
  }
  model_.train(was_training);
  return logits;
}

namespace {
// generate's loop on a context: the prompt fed, then a draw and a one-token feed per token.
std::vector<int32_t> generate_in(GptContext& ctx, std::span<const int32_t> prompt, int64_t count,
                                 const SampleOptions& o, Generator& gen,
                                 const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt needs at least one token");
  std::vector<int32_t> out;
  std::vector<float> logits = ctx.feed(prompt);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t t = sample_token(logits, o, gen);
    out.push_back(t);
    if (on_token) on_token(t);
    if (i + 1 < count) logits = ctx.feed(std::span<const int32_t>(&t, 1));
  }
  return out;
}
}  // namespace

std::vector<int32_t> generate(GPT& model, std::span<const int32_t> prompt, int64_t count,
                              const SampleOptions& o, Generator& gen,
                              const std::function<void(int32_t)>& on_token, bool use_cache,
                              bool int8_weights) {
  GptContext ctx(model, use_cache, int8_weights);
  return generate_in(ctx, prompt, count, o, gen, on_token);
}

std::vector<int32_t> generate(GPT& model, std::span<const int32_t> prompt, int64_t count,
                              const SampleOptions& o, Generator& gen,
                              const std::function<void(int32_t)>& on_token, bool use_cache,
                              Int8WeightCache& int8_copies) {
  GptContext ctx(model, use_cache, int8_copies);
  return generate_in(ctx, prompt, count, o, gen, on_token);
}

}  // namespace tg::nn
