// The compute precision of the matrix products, in the spirit of torch.autocast:
//
//   tg::PrecisionScope bf16(tg::Precision::bf16);   // until the end of the scope, on this thread
//   Tensor loss = model.forward(batch);              // linear, matmul and the output layer in bf16
//   backward(loss);                                  // each node's backward in its forward's precision
//
// The rule: under Precision::bf16 the GEMM-based tape ops (linear, gelu_linear, matmul,
// linear_cross_entropy, attention_probs, attention_context, and attention: its fused kernel as
// below) round the operands of their products, forward and backward, to bf16 (as the GEMM packs them:
// ops::gemm_bf16) and accumulate in fp32; their outputs and gradients stay fp32. The fused attention
// kernel (attention with 8 or more queries: every training step) runs its products in bf16 where
// the kernels have them for it (ops::AttentionBf16: AVX512_BF16's vdpbf16ps, the dot path) and in
// fp32 elsewhere (the AMX path, auto on AMX CPUs: there fp32 tiles beat per-row bf16 products;
// TAPEGRAD_BF16=dot gives such a CPU the dot path and these products; functions_attention.cpp).
// Everything else stays fp32: parameters, gradients, optimizer state, softmax, layernorm, the losses,
// reductions, elementwise ops. A node records the precision its forward ran in and its backward uses
// that one, whatever the scope is when backward runs.
//
// Whether bf16 products pay on this CPU, and for which products, is ops/' answer (ops::bf16_pays);
// where they do not, Precision::bf16 runs fp32 products (bf16_products_active() says which holds).
// Decoding against bf16 weights (Bf16WeightCache below) is the one place where Precision::bf16
// rounds products on every CPU.
// The bf16 story, with its figures: ops/README.md#bf16.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/tensor.hpp"
#include "ops/kernels.hpp"

namespace tg {

enum class Precision : uint8_t { fp32, bf16 };

// "fp32", "bf16"
const char* precision_name(Precision p);
// Parses "fp32" or "bf16"; throws std::invalid_argument naming the value otherwise.
Precision parse_precision(std::string_view s);

// For run headers: "fp32 products", "bf16 products", or, where bf16 falls back,
// "fp32 products (bf16 asked; no bf16 dot-product unit)" (or the reason ops::bf16_widen_reason gives).
std::string products_report(Precision requested);

// The calling thread's compute precision (fp32 unless a PrecisionScope says otherwise).
Precision compute_precision();

// Sets this thread's compute precision for its lifetime and restores the previous one when it
// ends (normally or by an exception). Scopes nest.
class PrecisionScope {
 public:
  explicit PrecisionScope(Precision p);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision previous_;
};

// Whether Precision::bf16 rounds products to bf16 on the active kernels: ops::bf16_pays() (a
// dot-product unit that beats the fp32 GEMM here, or set_bf16_products_everywhere(true)).
bool bf16_products_active();

// Test seam (ops::testing::set_bf16_everywhere): with on, Precision::bf16 rounds the products even
// where the active kernels have no bf16 dot-product unit, so the rule's tests run on every machine.
void set_bf16_products_everywhere(bool on);

// The precision a product actually runs in when `requested` is asked for (see above).
Precision effective_precision(Precision requested);

// C = alpha op(A) op(B) + beta C (+ bias), the ops::gemm contract, in precision p: ops::gemm for
// fp32; for bf16, ops::gemm_bf16 with the fp32 operands rounded to bf16 while packing where
// ops::bf16_pays(&g) (not, e.g., for one or two rows against a transposed B), else ops::gemm.
void gemm(Precision p, float* C, const float* A, const float* B, const ops::Gemm& g);

// Weights kept in bf16, as torch.autocast keeps the casts of its weights. A cache serves one of two
// uses (the Use it is made with), while it is this thread's active cache (Bf16WeightScope):
// - decoding: weight_gemm under Precision::bf16 without a tape (grad mode off) reads a weight as
//   the cache's bf16 copy, rounded on its first use and kept, wherever the product streams its
//   weight (ops::bf16_few_rows: up to 4 rows, one decoding step). Such a product is bound by
//   reading the weight, so half the bytes pay on every CPU, dot-product unit or not; longer
//   products (a prompt) take gemm()'s path.
// - training: weight_gemm in a product whose precision is bf16 (the op's effective precision: bf16
//   products pay on this CPU, ops::bf16_pays) reads the weight as the cache's copy: the forward
//   product (x W^T) and backward's dx = dy W of linear, gelu_linear and linear_cross_entropy. Each
//   weight is rounded once per optimizer step (invalidate() after the step; the copy's memory is
//   kept for the next one) instead of once per product while packing: the same values, the same
//   products bit for bit, one conversion where there were two (more for the chunked output layer:
//   two per chunk), and the packing reads half the bytes (bit for bit but for fp32 denormals just
//   below 2^-126 on the dot and AMX paths, which flush them while packing where f32_to_bf16 rounds
//   them up to the smallest normal bf16). Costs 2 bytes per cached weight value.
//   The training loops use it only where asked (Bf16StepWeights below): measured, it did not pay.
// A copy is keyed by the weight's data and size, and holds a handle to the weight, so its memory
// cannot be freed and reused for another weight while the cache lives; but the values must not
// change while a copy is current: clear() or invalidate() after an update (nn::GptContext keeps
// one decoding cache for one generation; the training loops invalidate theirs each step). One
// thread uses a cache at a time.
class Bf16WeightCache {
 public:
  enum class Use : uint8_t { decoding, training };
  explicit Bf16WeightCache(Use use = Use::decoding) : use_(use) {}
  // to_bf16 of w's values (contiguous), made on the first call for w since the copy was made or
  // invalidated, and kept.
  const ops::bf16* rounded(const Tensor& w);
  int64_t bytes() const;  // held by the copies
  void clear() { copies_.clear(); }
  // Every copy out of date (the weights changed): rounded again on its next use, into its memory.
  // Copies not used since the last invalidate() are dropped (a weight made anew each step, or gone,
  // would otherwise pin its memory and its copy for the cache's life).
  void invalidate();
  Use use() const { return use_; }

 private:
  struct Copy {
    Tensor weight;  // keeps the weight's memory alive
    std::vector<ops::bf16> values;
    bool current = false;  // values are the weight's, rounded
    bool used = false;     // read since the last invalidate()
  };
  Use use_;
  std::map<std::pair<const float*, int64_t>, Copy> copies_;
};

// Makes `cache` this thread's active weight cache for its lifetime (then the previous one, or none).
class Bf16WeightScope {
 public:
  explicit Bf16WeightScope(Bf16WeightCache& cache);
  ~Bf16WeightScope();
  Bf16WeightScope(const Bf16WeightScope&) = delete;
  Bf16WeightScope& operator=(const Bf16WeightScope&) = delete;

 private:
  Bf16WeightCache* previous_;
};

// Weights kept in int8 for decoding (ops::Int8Rows: one scale per output row, a quarter of fp32's
// bytes; lm sample --int8): while a cache is this thread's active one (Int8WeightScope), weight_gemm
// without a tape (grad mode off) reads a weight as the cache's int8 copy wherever the product is a
// decoding step's (ops::int8_few_rows: up to 4 rows against W^T), whatever the precision; quantized
// on its first use and kept. Longer products (a prompt) read the fp32 weight. Unlike the bf16
// copies this changes the model's weights (each moves by at most half its row's step,
// max_k |W[j, k]| / 254), not only the rounding of its products. Keyed and kept alive as the bf16
// copies are; the values must not change while the cache lives (clear() after an update).
// A cache made with Products::all serves every product against a weight's W^T without a tape, any
// number of rows (lm eval --int8: the loss with every such product on int8 weights, the products a
// decoding step runs; slower than fp32, each few rows reading the weight again).
class Int8WeightCache {
 public:
  enum class Products : uint8_t { decoding, all };
  explicit Int8WeightCache(Products products = Products::decoding) : products_(products) {}
  Products products() const { return products_; }
  // w's values (contiguous, rows x cols) in int8 (ops::Int8Rows: tiled); throws std::invalid_argument when w
  // does not hold rows x cols values (or was quantized with other rows) or holds a value that is not finite.
  ops::Int8Rows quantized(const Tensor& w, int64_t rows, int64_t cols);
  int64_t bytes() const;  // held by the copies (values and scales)
  void clear() { copies_.clear(); }

 private:
  struct Copy {
    Tensor weight;  // keeps the weight's memory alive
    std::unique_ptr<int8_t[]>
        q;  // scale.size() rows of weight.numel() / rows values, tiled (ops::int8_bytes)
    std::vector<float> scale;
  };
  Products products_;
  std::map<std::pair<const float*, int64_t>, Copy> copies_;
};

// Makes `cache` this thread's active int8 weight cache for its lifetime (nullptr: none), then the
// previous one.
class Int8WeightScope {
 public:
  explicit Int8WeightScope(Int8WeightCache* cache);
  ~Int8WeightScope();
  Int8WeightScope(const Int8WeightScope&) = delete;
  Int8WeightScope& operator=(const Int8WeightScope&) = delete;

 private:
  Int8WeightCache* previous_;
};

// Whether the training loops round each weight to bf16 once per step (TAPEGRAD_BF16_WEIGHTS=step)
// or leave it to each product's packing (=packing, the default; anything else throws). On the
// 16-core AMX Xeon (2026-11-27, alternated pairs, bench/README.md) once per step did not pay: the
// 12 x 768 model at 8 x 256 on 16 threads 534 / 598 ms against 560 / 577 while packing, config M
// 146-160 against 151-158, GPT-2's shape on 2 threads 676-687 against 497-607 (noisy), and
// peak RSS +160-236 MiB. Kept as an option to measure on other CPUs (a Zen 4's vdpbf16ps).
bool bf16_weights_per_step();

// Whether linear rounds x to bf16 once, into the copy its forward product reads and the tape saves
// (TAPEGRAD_BF16_ACTIVATIONS=saved, the default), or leaves x in fp32 for each product's packing to
// round (=packing: x rounded twice, forward and dw; anything else throws). Both give the same
// products (but for fp32 denormals just below 2^-126 on the dot and AMX paths, as functions_matmul.cpp
// says); the variable is there to measure the one against the other on a CPU with bf16 units.
bool bf16_activations_saved();

// A training loop's bf16 weight copies: `const auto use = weights.step();` around a step's forward
// and backward makes the copies out of date and the cache active on this thread while `use` lives,
// when bf16_weights_per_step(); otherwise it does nothing.
class Bf16StepWeights {
 public:
  // reads TAPEGRAD_BF16_WEIGHTS and TAPEGRAD_BF16_ACTIVATIONS: a bad value throws here, before any training
  Bf16StepWeights();
  class Scope {
   public:
    explicit Scope(Bf16WeightCache* cache);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Bf16WeightCache* previous_;
    bool on_;
  };
  [[nodiscard]] Scope step();
  void clear() { cache_.clear(); }  // frees the copies (between measurements)

 private:
  Bf16WeightCache cache_;
};

// C = alpha op(A) op(W) + beta C (+ bias) for a weight W as the product's B operand: W^T (g.trans_b,
// W stored [N, K]) in a linear layer's forward, W in its dx = dy W. gemm(p, C, A, W.data(), g), or,
// where the Int8WeightCache rule above applies, ops::gemm_int8 with the cache's copy of W, or where
// a Bf16WeightCache rule applies, ops::gemm_bf16 with that cache's copy (A rounded to bf16 while
// packing, as gemm does).
void weight_gemm(Precision p, float* C, const float* A, const Tensor& W, const ops::Gemm& g);
// The same with A given as an operand: fp32 as above, or bf16 values (linear's x rounded once),
// which only a product that runs in bf16 can read (p == bf16 and ops::bf16_pays(&g); else throws
// std::logic_error).
void weight_gemm(Precision p, float* C, const ops::Operand& A, const Tensor& W, const ops::Gemm& g);

}  // namespace tg
