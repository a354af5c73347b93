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

namespace {
// A key that orders the floats as unsigned integers, increasing with the value; -0 ties with +0 as it
// does for operator> (for NaN, which sample_token refuses before any key is taken, some key). The sign bit
// flipped for positives and every bit flipped for negatives. Branch-free, so that a loop of keys vectorises.
uint32_t increasing_key(float l) {
  uint32_t b = std::bit_cast<uint32_t>(l);
  b = (b << 1) == 0 ? 0u : b;  // -0 -> +0
  return b ^ (static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) | 0x80000000u);
}
}  // namespace

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
    key[i] = ~increasing_key(logits[i]);
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

namespace {
// Buffers kept from token to token, one set per thread that samples: at GPT-2's 50,257 classes each is
// 200 KB, which fresh vectors mapped and faulted in on every call (a third of a top-p draw's time).
struct SampleScratch {
  std::vector<float> p;
  std::vector<uint32_t> key;
  std::vector<int32_t> candidates;
  std::vector<double> mass;
  std::vector<uint8_t> seen;
};
SampleScratch& scratch() {
  thread_local SampleScratch s;
  return s;
}

// p = softmax((l - top) / T) by the SIMD kernel (fp32); top is the largest logit. p: the scratch's.
std::span<float> probabilities(std::span<const float> logits, float top, double temperature) {
  std::vector<float>& p = scratch().p;
  p.resize(logits.size());
  for (size_t i = 0; i < p.size(); ++i)
    p[i] = static_cast<float>((static_cast<double>(logits[i]) - top) / temperature);
  ops::softmax_forward(p.data(), p.data(), 1, static_cast<int64_t>(p.size()), {});
  return p;
}

// One draw from the weights p (>= 0, not all 0; zeros never drawn): a uniform number times their sum
// walks the ids in order, skipping whole chunks of 512 by their sums.
int32_t draw_in_id_order(std::span<const float> p, Generator& gen) {
  constexpr size_t kChunk = 512;
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
  // u outran the sums by rounding: the last token with a nonzero weight
  size_t i = p.size() - 1;
  while (p[i] == 0) --i;
  return static_cast<int32_t>(i);
}

// The selection, without sorting the vocabulary: a radix selection on increasing_key from the top
// bits (11, 11, then 10). At each level the candidates' measure per bucket of the key's next bits
// (their weights' sum, or with kCount their number), from the largest bucket down, finds the bucket
// where the running measure reaches the target; the buckets above it are kept whole and its tokens
// are the next level's candidates. Once at most sort_below candidates are left (before the first
// level when V is that small: the three levels pass over 2,048 buckets each, 6-10 us a token even
// at V = 65 on a Zen 3), the candidates are sorted by decreasing key, ties by id (after the last
// level they share one key, in id order), and kept in that order until the measure reaches the
// target. A token is then kept if its key is above the last kept one's, or equal with an id up to
// it. The target: with kCount `limit` tokens, else `limit` of the whole mass (summed in that sorted
// order when no level ran).
template <bool kCount>
void keep_prefix(std::span<const float> logits, std::span<float> p, double limit, size_t sort_below) {
  struct Level {
    int shift;
    uint32_t mask;
  };
  constexpr std::array<Level, 3> kLevels = {{{21, 0x7ffu}, {10, 0x7ffu}, {0, 0x3ffu}}};
  const size_t V = logits.size();
  std::vector<uint32_t>& key = scratch().key;
  key.resize(V);
  const float* l = logits.data();
  uint32_t* k = key.data();
#pragma omp simd
  for (size_t i = 0; i < V; ++i) k[i] = increasing_key(l[i]);
  // The mass per bucket in 4 interleaved copies (ids i % 4) at the first level, where neighbouring ids
  // often share a bucket: 4 chains of additions through memory instead of one.
  std::vector<double>& mass = scratch().mass;
  std::vector<uint8_t>& seen = scratch().seen;
  mass.resize(4 * 2048);
  seen.resize(2048);
  // The candidates in id order: the ids of the bucket refined (every id at the first level).
  std::vector<int32_t>& candidates = scratch().candidates;
  candidates.resize(V);
  size_t n = 0;
  double total = 0, before = 0;  // the whole mass; the mass of the tokens above the candidates
  const bool sort_all = V <= sort_below;
  if (sort_all) {
    std::iota(candidates.begin(), candidates.end(), 0);
    n = V;
  }
  size_t level = 0;
  for (; level < kLevels.size() && !(sort_all || (level > 0 && n <= sort_below)); ++level) {
    const auto [shift, mask] = kLevels[level];
    std::fill(mass.begin(), mass.begin() + (level == 0 ? 4 * 2048 : 2048), 0.0);
    std::fill(seen.begin(), seen.end(), uint8_t{0});
    if (level == 0) {
      for (size_t i = 0; i < V; ++i) {
        const uint32_t b = k[i] >> shift;
        mass[(i % 4) * 2048 + b] += kCount ? 1.0 : p[i];
        seen[b] = 1;
      }
      for (size_t b = 0; b < 2048; ++b)
        mass[b] = (mass[b] + mass[2048 + b]) + (mass[4096 + b] + mass[6144 + b]);
      for (uint32_t b = mask + 1; b-- > 0;) total += mass[b];  // top down, as the search below adds
    } else {
      for (size_t j = 0; j < n; ++j) {
        const auto i = static_cast<size_t>(candidates[j]);
        const uint32_t b = (k[i] >> shift) & mask;
        mass[b] += kCount ? 1.0 : p[i];
        seen[b] = 1;
      }
    }
    const double target = kCount ? limit : limit * total;
    // The bucket where the running mass reaches the target (the lowest nonempty one where rounding
    // leaves it short: the sums of a level's buckets need not add up to the bucket they refine).
    uint32_t last = mask + 1;  // the lowest nonempty bucket so far
    uint32_t at = mask + 1;
    for (uint32_t b = mask + 1; b-- > 0;) {
      if (!seen[b]) continue;
      last = b;
      if (before + mass[b] >= target) {
        at = b;
        break;
      }
      before += mass[b];
    }
    if (at > mask) {  // short by rounding: the last bucket's tokens are all needed
      at = last;
      before -= mass[last];
    }
    // The bucket's ids, branch-free: each id written, the count moved on if it is in.
    size_t kept = 0;
    if (level == 0) {  // 8 keys compared at a time, their hits taken from a bit mask
      size_t i = 0;
      for (; i + 8 <= V; i += 8) {
        uint32_t hits = 0;
        for (uint32_t j = 0; j < 8; ++j) hits |= static_cast<uint32_t>((k[i + j] >> shift) == at) << j;
        for (; hits; hits &= hits - 1) candidates[kept++] = static_cast<int32_t>(i + std::countr_zero(hits));
      }
      for (; i < V; ++i)
        if ((k[i] >> shift) == at) candidates[kept++] = static_cast<int32_t>(i);
    } else {
      for (size_t j = 0; j < n; ++j) {
        const int32_t i = candidates[j];
        candidates[kept] = i;
        kept += ((k[static_cast<size_t>(i)] >> shift) & mask) == at;
      }
    }
    n = kept;
  }
  // The candidates by decreasing key, ties by id (after the last level: one key, already in id
  // order), kept until the measure reaches the target; all of them where rounding leaves it short.
  const auto first = candidates.begin(), last = first + static_cast<std::ptrdiff_t>(n);
  if (level < kLevels.size())  // (a large group of equal logits, as an untrained model has, is not sorted)
    std::sort(first, last, [k](int32_t a, int32_t b) {
      const uint32_t ka = k[static_cast<size_t>(a)], kb = k[static_cast<size_t>(b)];
      return ka != kb ? ka > kb : a < b;
    });
  const auto measure = [&](int32_t i) {
    return kCount ? 1.0 : static_cast<double>(p[static_cast<size_t>(i)]);
  };
  if (sort_all)
    for (auto it = first; it != last; ++it) total += measure(*it);
  const double target = kCount ? limit : limit * total;
  int32_t last_kept = candidates[n - 1];
  for (auto it = first; it != last; ++it) {
    before += measure(*it);
    if (before >= target) {
      last_kept = *it;
      break;
    }
  }
  float* w = p.data();
  const uint32_t last_key = k[static_cast<size_t>(last_kept)], last_id = static_cast<uint32_t>(last_kept);
#pragma omp simd
  for (size_t i = 0; i < V; ++i) {
    const bool out = k[i] < last_key || (k[i] == last_key && static_cast<uint32_t>(i) > last_id);
    w[i] = out ? 0.0f : w[i];
  }
}
}  // namespace

void keep_nucleus(std::span<const float> logits, std::span<float> p, double top_p, size_t sort_below) {
  if (p.size() != logits.size() || !(top_p > 0 && top_p <= 1))
    throw std::invalid_argument(
        fmt::format("keep_nucleus: {} weights for {} logits, top_p {} (must be in (0, 1])", p.size(),
                    logits.size(), top_p));
  if (!logits.empty()) keep_prefix<false>(logits, p, top_p, sort_below);
}

void keep_most_likely(std::span<const float> logits, std::span<float> p, int64_t k, size_t sort_below) {
  if (p.size() != logits.size() || k < 1)
    throw std::invalid_argument(fmt::format("keep_most_likely: {} weights for {} logits, k {} (must be >= 1)",
                                            p.size(), logits.size(), k));
  if (k < static_cast<int64_t>(logits.size()))
    keep_prefix<true>(logits, p, static_cast<double>(k), sort_below);
}

int32_t sample_token(std::span<const float> logits, const SampleOptions& o, Generator& gen) {
  const auto V = static_cast<int64_t>(logits.size());
  if (V == 0) throw std::invalid_argument("sample_token: no logits");
  if (!(o.temperature >= 0 && o.temperature < std::numeric_limits<double>::infinity()) || o.top_k < 0 ||
      !(o.top_p > 0 && o.top_p <= 1))
    throw std::invalid_argument(
        fmt::format("sample_token: temperature {} must be finite and >= 0, top_k {} >= 0, top_p {} in (0, 1]",
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
  if (o.top_k == 0 || o.top_k >= V || o.top_k > 4096) {
    // No sort: p = softmax((l - max) / T) by the SIMD kernel (fp32); a top k of more than 4,096, then
    // a nucleus (top_p < 1), zero the tokens outside them, each found by a radix selection; one uniform
    // number walks the tokens in id order. The draws' distribution is the sorted walk's (up to fp32
    // rounding: a probability below about e^-87 of the largest is 0 here), without sorting V ids and
    // a double exp per token. GPT-2's 50,257 classes, one thread of a Zen 3 (nn/gpt.md has the
    // figures): --top-p 0.9 1.7-2.3 -> 0.23-0.37 ms, --top-k 5000 1.2-1.5 -> 0.39-0.47 ms.
    const std::span<float> p = probabilities(logits, top, o.temperature);
    if (o.top_k > 0 && o.top_k < V) keep_most_likely(logits, p, o.top_k);
    if (o.top_p < 1) keep_nucleus(logits, p, o.top_p);
    return draw_in_id_order(p, gen);
  }
  // A top k of up to 4,096: the k most likely first, ties by id (the order the nucleus cuts and the
  // draw walks), by a heap (the README's --top-k 40 over GPT-2's vocabulary: 1.36 -> 0.08 ms per
  // token on a Zen 3, the same draws as the sort it replaced).
  const std::vector<int32_t> order = most_likely(logits, o.top_k);
  const auto kept_k = order.size();
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
