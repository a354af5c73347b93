// Sampling text from a GPT: temperature, top-k and nucleus (top-p) filtering, and a context that
// feeds the model through its key/value cache (each new token runs the model on one position).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "autograd/precision.hpp"
#include "autograd/random.hpp"
#include "nn/gpt.hpp"

namespace tg::nn {

struct SampleOptions {
  double temperature = 1.0;  // 0: greedy (the most likely token)
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  double top_p = 1.0;        // then keep the fewest most likely tokens whose probability reaches p
};

// One token from the logits [V] of the next position: p = softmax(logits / T), restricted to the top
// k and then to the nucleus of mass top_p, renormalised; one uniform number from gen walks the kept
// tokens from the most likely (ties: lower id first), in double, where 0 < top_k <= 4096 (< V). Else p
// is the SIMD softmax's (fp32), the top k and then the nucleus are cut by keep_most_likely and
// keep_nucleus, and the number walks the kept tokens in id order: the same distribution, without
// sorting V ids per token. Temperature 0 returns the argmax (lowest id on ties) and draws nothing. A
// logit that is NaN or +inf (T > 0), all of them -inf, or an infinite T: invalid_argument.
int32_t sample_token(std::span<const float> logits, const SampleOptions& o, Generator& gen);
// The ids 0..V-1 by decreasing logit, ties by increasing id (-0 equal to +0; no NaN): the order
// sample_token's filters cut (the reference its selections are tested against), what a stable sort by
// logit gives, by a radix sort in linear time.
std::vector<int32_t> by_decreasing_logit(std::span<const float> logits);
// Its first min(k, V) ids, by a heap of k (O(V) comparisons where few ids displace the k kept), for top-k.
std::vector<int32_t> most_likely(std::span<const float> logits, int64_t k);
// The nucleus, for top-p: zeroes p (a weight >= 0 per id, softmax(logits / T) when sampling) outside
// the fewest ids in by_decreasing_logit's order whose weights reach top_p of p's sum (no NaN). In
// linear time: a radix selection, no sort of the vocabulary; once at most sort_below ids are left
// to choose among (from the start when V is that small), they are sorted (tests pass 0 to run every
// level). The sums are in double, in an order of their own (by buckets of the order), so where the
// boundary falls within rounding of top_p times the sum the set can differ from a walk in sorted
// order by ids of that little weight; where the sums fall short of the target by rounding, ids are
// kept, not dropped.
inline constexpr size_t kSortCandidatesBelow = 256;
void keep_nucleus(std::span<const float> logits, std::span<float> p, double top_p,
                  size_t sort_below = kSortCandidatesBelow);
// The same cut after the first k ids of that order (top-k; p unchanged when k >= V), by the same
// selection counting ids instead of summing weights (exact).
void keep_most_likely(std::span<const float> logits, std::span<float> p, int64_t k,
                      size_t sort_below = kSortCandidatesBelow);

// What the model sees of a growing text, and the logits of the token that comes next. The model has
// block_size positions: when feeding n tokens would take the window past them, the window is cut to
// its last max(n, block_size / 2) tokens (at most block_size) and re-read from position 0, so a
// long generation costs one pass over half a block every block_size / 2 tokens.
//
// With the cache (the default) each feed runs the model on the new tokens only, their keys and
// values appended to the cache; without it, every feed runs the model over the whole window (what
// nanoGPT's generate does; tests compare the two). Runs in eval mode without a tape.
//
// Under Precision::bf16 (lm sample --precision bf16) the one-position steps read the model's
// weights as bf16 copies, made at the first such step and kept for the context's life
// (tg::Bf16WeightCache): half the bytes per token, on every CPU. With int8_weights (lm sample --int8)
// they read int8 copies instead (tg::Int8WeightCache: one scale per output row, a quarter of the
// bytes; the weights move by up to half a step of their row, so the logits differ from fp32's
// slightly), the context's own or, given a cache, that one: copies made by an earlier context are
// read again and new ones are kept there (quantizing GPT-2 once instead of once per generation).
// The model must not change while the copies live.
class GptContext {
 public:
  explicit GptContext(GPT& model, bool use_cache = true, bool int8_weights = false);
  GptContext(GPT& model, bool use_cache, Int8WeightCache& int8_copies);
  GptContext(const GptContext&) = delete;  // int8_ may point into the context
  GptContext& operator=(const GptContext&) = delete;
  // Appends tokens (at least one) and returns the logits [V] of the next token.
  std::vector<float> feed(std::span<const int32_t> tokens);
  const std::vector<int32_t>& window() const { return window_; }
  int64_t rebuilds() const { return rebuilds_; }                            // window cuts so far
  int64_t bf16_weight_bytes() const { return bf16_weights_.bytes(); }       // 0 unless under bf16
  int64_t int8_weight_bytes() const { return int8_ ? int8_->bytes() : 0; }  // 0 without int8 weights

 private:
  GPT& model_;
  bool use_cache_;
  Bf16WeightCache bf16_weights_;
  Int8WeightCache own_int8_;
  Int8WeightCache* int8_ = nullptr;  // the copies read, if any: &own_int8_ or the caller's
  GptCache cache_;
  std::vector<int32_t> window_;
  int64_t rebuilds_ = 0;
};

// Generates `count` tokens after `prompt` (at least one token), calling on_token with each as soon
// as it is drawn (streaming). Returns them. use_cache and int8_weights: as GptContext's.
std::vector<int32_t> generate(GPT& model, std::span<const int32_t> prompt, int64_t count,
                              const SampleOptions& o, Generator& gen,
                              const std::function<void(int32_t)>& on_token = {}, bool use_cache = true,
                              bool int8_weights = false);
// The same reading int8 copies of the weights from int8_copies (made there at the first step where
// missing, and kept for the next call).
std::vector<int32_t> generate(GPT& model, std::span<const int32_t> prompt, int64_t count,
                              const SampleOptions& o, Generator& gen,
                              const std::function<void(int32_t)>& on_token, bool use_cache,
                              Int8WeightCache& int8_copies);

}  // namespace tg::nn
