// tapegrad kernels: the one interface the rest of the engine calls.
//
// Kernels work on raw float pointers and sizes: no Tensor, no tape. Argument order follows llm.c:
// outputs, inputs, dimensions. Backward kernels name gradients d<name> and ACCUMULATE (+=) into them,
// so a caller zeroes a gradient buffer once and every consumer adds its share.
//
// Every kernel has a scalar reference in ops::ref (ops/ref.cpp): the specification, readable first,
// and the fallback on any machine. The SIMD bodies (ops/simd/*.hpp, one xsimd source per kernel)
// are compiled once per arch in ops/arch_*.cpp and collected into a KernelTable. The free functions
// below call the table of the active arch (ops/dispatch.cpp), chosen at start-up from the CPU's
// features or forced with TAPEGRAD_ARCH=scalar|sse2|avx2|avx512|neon or ops::set_arch(); the bf16
// GEMM uses the CPU's AMX tiles or bf16 dot-product instructions where it has them and they beat
// the fp32 GEMM (TAPEGRAD_BF16=amx or dot: wherever it has them; widen: never).
// ops/README.md describes the design.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tg::ops {

// ---------------------------------------------------------------------------------------------
// GEMM: C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b]   for b in [0, batch)
// Row-major. op(A) is M x K, op(B) is K x N, C is M x N. With trans_a, A is stored K x M (so
// op(A) = A^T), likewise B. lda/ldb/ldc are row strides in elements; stride_* are the element
// distances between consecutive batch entries (0 broadcasts one matrix over the batch).
// beta == 0 means C is write-only (NaNs already in C do not propagate), as in BLAS.
struct Gemm {
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // Optional [N] column bias, added once to every row of every batch entry's C:
  //   C = alpha * op(A) op(B) + beta * C + bias        (Linear's bias, in the GEMM's store)
  // Not allowed with stride_c == 0 and batch > 1 (a sum over the batch into one C).
  const float* bias = nullptr;
};
// Fills lda/ldb/ldc for contiguous operands (and batch strides when batch > 1).
Gemm gemm_desc(int64_t M, int64_t N, int64_t K, bool trans_a = false, bool trans_b = false,
               float alpha = 1.0f, float beta = 0.0f, int64_t batch = 1);
// Throws std::invalid_argument naming the bad field when g cannot describe valid matrices: a
// negative size or batch, or a leading dimension shorter than its stored row. Every gemm kernel
// calls it first.
void validate(const Gemm& g);
// validate, and what gemm_int8 needs besides: op(B) = B^T (a weight stored [N, K], tiled: ldb = K)
// and one product (batch at most 1).
void validate_int8(const Gemm& g);

// ---------------------------------------------------------------------------------------------
// bf16 (bfloat16): the upper half of an IEEE fp32 value (sign, 8-bit exponent, 7-bit mantissa), so
// it has fp32's range with 8 bits of precision. Stored as its 16 bits.
struct bf16 {
  uint16_t bits;
};
// fp32 -> bf16, round to nearest even (denormals too, overflow to +-Inf where RNE says so);
// NaN stays NaN: quiet (top mantissa bit set), sign and upper payload kept. bf16 -> fp32 is exact.
// The scalar definition every arch's conversions and bf16 GEMM packing match (ops/ref.cpp).
bf16 to_bf16(float x);
float to_f32(bf16 x);

// A bf16 GEMM operand: fp32 values (rounded to bf16 as they are packed, e.g. fp32 master weights)
// or bf16 storage (e.g. activations saved in bf16). Leading dimensions and batch strides of the
// Gemm descriptor count elements of the operand's own type.
enum class DType : uint8_t { f32, bf16 };
struct Operand {
  const void* data = nullptr;
  DType dtype = DType::f32;
};
inline Operand operand(const float* p) {
  return {p, DType::f32};
}
inline Operand operand(const bf16* p) {
  return {p, DType::bf16};
}

// ---------------------------------------------------------------------------------------------
// int8 weights, for decoding (a step that reads every weight once per token, bound by their bytes):
// a weight W [N, K] stored as int8 values with one fp32 scale per row (in tiles: below),
//   W[j, k] ~ scale[j] * q[int8_offset(j, k, K)],  scale[j] = max_k |W[j, k]| / 127 in fp32,
//   q[j, k] = W[j, k] * fl(127 / max_k |W[j, k]|) rounded to nearest (ties to even), in [-127, 127]
//   (0 where scale[j] is 0: a row of zeros, or one below about 127 * 2^-150):
// a quarter of fp32's bytes, each value within about scale[j] / 2 of W's (symmetric, per output row:
// the weight-only int8 of LLM inference engines).
//
// The rows are stored in tiles of int8_tile_rows (the kernel's dot tiles) and chunks of int8_chunk
// values: for rows 4t..4t+3 and values 64c..64c+63 of each, the four rows' chunks one after another,
// so that a tile is read as one sequential stream (on a Zen 3, 768-wide rows read 1.4x faster on
// one thread this way than as four rows side by side, which the hardware prefetchers follow less
// well: ops/README.md).
// Rows past N in the last tile and values past K in each row's last chunk are zeros.
inline constexpr int64_t int8_tile_rows = 4;
inline constexpr int64_t int8_chunk = 64;
inline int64_t int8_padded_k(int64_t K) {
  return (K + int8_chunk - 1) / int8_chunk * int8_chunk;
}
// bytes of q for an N x K weight
inline int64_t int8_bytes(int64_t N, int64_t K) {
  return (N + int8_tile_rows - 1) / int8_tile_rows * int8_tile_rows * int8_padded_k(K);
}
// where value k of row j lies in q
inline int64_t int8_offset(int64_t j, int64_t k, int64_t K) {
  return (j / int8_tile_rows) * int8_tile_rows * int8_padded_k(K) +
         (k / int8_chunk) * int8_tile_rows * int8_chunk + (j % int8_tile_rows) * int8_chunk + k % int8_chunk;
}
struct Int8Rows {
  const int8_t* q = nullptr;     // int8_bytes(N, K) values, tiled as above
  const float* scale = nullptr;  // one per row of W (column of op(B))
};
// q (int8_bytes(rows, cols) values, the padding zeroed) and scale of the rows x cols matrix w
// (contiguous) as above; threaded. Throws std::invalid_argument naming the row when it holds a
// value that is not finite.
void quantize_int8_rows(int8_t* q, float* scale, const float* w, int64_t rows, int64_t cols);

// ---------------------------------------------------------------------------------------------
// Softmax over the last axis of a [rows, cols] matrix, with optional attention masks.
// Rows are read as [groups, q_len] blocks: row r is query q = r % q_len of group g = r / q_len.
//  - causal: query q may see keys k <= q + (cols - q_len) (the usual lower triangle when
//    q_len == cols; the last q_len queries of a longer key sequence otherwise). A causal row
//    reads and writes only its prefix; the rest is set to exactly 0.
//  - key_mask: [groups / groups_per_key_row, cols] bytes, nonzero = that key is masked (padding).
//    Group g uses key_mask row g / groups_per_key_row (attention: groups = batch*heads,
//    groups_per_key_row = heads). Masked positions get exactly 0.
// A row with every key masked is all zeros (and its gradient is zero).
struct SoftmaxMask {
  bool causal = false;
  int64_t q_len = 0;  // rows per group; 0 means rows (one group)
  const uint8_t* key_mask = nullptr;
  int64_t groups_per_key_row = 1;
};

// ---------------------------------------------------------------------------------------------
// The fused attention's products on a bf16 dot-product unit (KernelTable::attention_bf16: the
// AVX512_BF16 table's vdpbf16ps tiles; null in the other tables). With Attention::bf16 set, the
// kernel rounds the operands of its six products to bf16 (round to nearest even, as gemm_bf16's
// packing) and sums in fp32; softmax, masks, dropout and the outputs stay fp32. Call only on a CPU
// with that unit (the pointers lead into its TU). dst, b and their panels 64-byte aligned (aligned
// vector stores and loads).
struct AttentionBf16 {
  int64_t nr = 0;  // columns per packed panel (the fp32 tiles' NR)
  // op(B) (k_rows x n; trans: src holds B^T, n rows ld apart; else k_rows rows ld apart) rounded and
  // packed into panels of nr columns: panel p at dst + p * nr * ((k_rows + 1) / 2) floats (4-byte
  // units: one bf16 pair per column and pair of k); columns past n are zero.
  void (*pack)(float* dst, const float* src, int64_t ld, bool trans, int64_t k_rows, int64_t n);
  // C[0:M, 0:N] = alpha op(A) B + beta C (beta 0: C not read), K >= 1, N a multiple of nr, B packed by
  // pack from b_k_rows >= K rows (only rows < K are read: a NaN past K does not reach C), op(A) fp32
  // (M x K; trans_a: A stored K x M, lda apart), rounded into tmp (tmp_floats(M, K) floats). With K
  // odd and below b_k_rows, b's last pair of k is written during the call and restored: one thread
  // at a time per packed B.
  void (*product)(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool trans_a, float* b,
                  int64_t b_k_rows, float* c, int64_t ldc, float alpha, float beta, float* tmp);
  int64_t (*tmp_floats)(int64_t M, int64_t K);
};

// Scaled dot-product attention, fused: for each batch row b and head h, with the head's matrices
//   Q [T, d] at q + b * q_batch + h * d, rows ldq apart   (d = d_head)
//   K [S, d] at k + b * kv_batch + h * d, rows ldk apart
//   V [S, d] at v + b * kv_batch + h * d, rows ldv apart
// (column blocks of projection outputs, read in place):
//   P = softmax(scale Q K^T) with SoftmaxMask's masks (causal: query t sees keys s <= t + (S - T);
//       key_mask [B, S] bytes, nonzero hides key s of row b), masked entries exactly 0
//   O = D(P) V, written to out[b, t, h * d + c] (rows H * d apart: the heads merged)
// D is inverted dropout as dropout_forward draws it when drop_below > 0: element (b, h, t, s) of P
// is dropout element ((b * H + h) * T + t) * S + s of one seed (the numbering of a [B, H, T, S]
// tensor), so attention_probs + dropout + attention_context draw the same mask.
// P is never stored: each (b, h) computes it a block of rows at a time in cache, and backward
// computes it again. A causal block reads only the keys its last row sees: a NaN or inf in K or V
// at keys no row of the block sees does not reach its O (a P V over all S keys, as attention_probs
// then attention_context compute it, gives 0 * NaN = NaN there).
struct Attention {
  int64_t B = 0, H = 0, T = 0, S = 0, d_head = 0;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t ldq = 0, ldk = 0, ldv = 0;
  int64_t q_batch = 0, kv_batch = 0;
  float scale = 1.0f;
  bool causal = false;
  const uint8_t* key_mask = nullptr;
  uint64_t seed = 0;
  uint32_t drop_below = 0;  // dropout_threshold(p); 0: no dropout
  float drop_scale = 1.0f;  // dropout_scale(p)
  // Products in bf16 (AttentionBf16 above; a table's attention_bf16), or null: fp32 products. The
  // scalar reference ignores it.
  const AttentionBf16* bf16 = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Cross-entropy over logits [rows, V] with integer targets, PyTorch CrossEntropyLoss semantics:
//   logp = log_softmax(logits); q = (1 - eps) * onehot(t) + eps / V
//   loss_r = -sum_j q_j logp_j   (0 for rows whose target == ignore_index)
// What layernorm_backward reads besides the output gradient: the forward's input and weight (null:
// 1) and the mean and rstd per row that layernorm_forward saved.
struct LayerNormSaved {
  const float *inp = nullptr, *weight = nullptr, *mean = nullptr, *rstd = nullptr;
};

struct CrossEntropy {
  int64_t rows = 0, V = 0;
  int32_t ignore_index = -100;
  float label_smoothing = 0.0f;
};

// ---------------------------------------------------------------------------------------------
// Adam / AdamW step on n parameters (bias-corrected, PyTorch semantics).
//   Adam:  g += wd * p;  AdamW: p -= lr * wd * p   (decoupled)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
struct AdamParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  bool decoupled = false;  // AdamW
  int64_t step = 1;        // t, counted from 1
  // Each gradient is read as grad * grad_scale: gradient clipping folded into the update's pass
  // (the same bits as scaling the gradients first, without the read and write of every gradient).
  float grad_scale = 1.0f;
};

// ---------------------------------------------------------------------------------------------
// The random 24-bit value dropout compares for element i: two rounds of murmur3's 32-bit
// finaliser over (the low and high words of) the seed and the index (i taken mod 2^32). Inline and
// integer-only, so every arch computes exactly the same bits.
inline uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}
inline uint32_t dropout_bits(uint64_t seed, int64_t i) {
  const uint32_t h = fmix32(static_cast<uint32_t>(i) * 0x9e3779b9u + static_cast<uint32_t>(seed));
  return fmix32(h ^ static_cast<uint32_t>(seed >> 32)) >> 8;
}
// Inverted dropout with probability p in [0, 1]: element i is dropped when dropout_bits < the
// threshold ceil(p * 2^24) (so p = 1 drops everything) and kept ones are scaled by 1 / (1 - p).
inline uint32_t dropout_threshold(float p) {
  return static_cast<uint32_t>(std::ceil(static_cast<double>(p) * 16777216.0));  // exact: p has 24 bits
}
inline float dropout_scale(float p) {
  return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
}

// ---------------------------------------------------------------------------------------------
// The table of kernels one arch provides. Every entry is filled for every arch.
struct KernelTable {
  const char* name;
  void (*gemm)(float* C, const float* A, const float* B, const Gemm& g);
  // The Gemm contract with op(A) and op(B) in bf16: C (fp32) = alpha * op(A) op(B) + beta * C (+ bias),
  // each product of two bf16 values (exact in fp32) accumulated in fp32. Equal to gemm on the
  // operands rounded with to_bf16, up to the order of the fp32 sums (and denormal inputs, which
  // the dot-product path counts as zero, as vdpbf16ps and BFMMLA do).
  void (*gemm_bf16)(float* C, const Operand& A, const Operand& B, const Gemm& g);
  // How gemm_bf16 multiplies in this table (see Bf16Path), e.g. "avx512_bf16 vdpbf16ps".
  const char* gemm_bf16_path;
  // The Gemm contract with op(B) = B^T a weight in int8 rows (Int8Rows, tiled; ldb = K):
  // C = alpha * op(A) op(B) + beta * C (+ bias), op(B)[k, j] = scale[j] * q[int8_offset(j, k, K)]; each
  // column's dot product of op(A)'s fp32 row with q's int8 row summed in fp32, then scaled. For
  // few rows (a decoding step: int8_few_rows) B is read once, widened in registers, never packed.
  // Needs g.trans_b, ldb == K and batch at most 1 (else throws std::invalid_argument).
  void (*gemm_int8)(float* C, const float* A, const Int8Rows& B, const Gemm& g);
  // q and scale of the rows x cols matrix w (contiguous) as Int8Rows says, threaded over rows; returns
  // the first row holding a value that is not finite (that row and others may be left unwritten), or
  // -1. ops::quantize_int8_rows checks the sizes and throws on such a row.
  int64_t (*quantize_int8_rows)(int8_t* q, float* scale, const float* w, int64_t rows, int64_t cols);
  // out[i] = to_bf16(in[i]);  out[i] = to_f32(in[i])
  void (*f32_to_bf16)(bf16* out, const float* in, int64_t n);
  void (*bf16_to_f32)(float* out, const bf16* in, int64_t n);

  void (*softmax_forward)(float* out, const float* inp, int64_t rows, int64_t cols, const SoftmaxMask& m);
  // dinp += out * (dout - sum(dout * out)) per row; with overwrite, dinp = ... (dinp is not read:
  // the gradient's first contribution, one stream less than a zero fill and an add)
  void (*softmax_backward)(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols,
                           bool overwrite);
  // out = inp - logsumexp(inp) per row (no masks)
  void (*log_softmax_forward)(float* out, const float* inp, int64_t rows, int64_t cols);
  // dinp += dout - exp(out) * sum(dout) per row
  void (*log_softmax_backward)(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols);

  // out = (inp - mean) * rstd * weight + bias per row; saves mean[rows], rstd[rows].
  // weight/bias may be null (treated as 1 and 0).
  void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int64_t rows, int64_t cols, float eps);
  // dinp += rstd * (w*dout - mean(w*dout) - xhat * mean(w*dout*xhat)); dweight += sum_rows(dout*xhat);
  // dbias += sum_rows(dout). Any of dinp/dweight/dbias may be null (not needed). overwrite: dinp =
  // (not +=; dinp is not read), as in softmax_backward.
  void (*layernorm_backward)(float* dinp, float* dweight, float* dbias, const float* dout,
                             const LayerNormSaved& saved, int64_t rows, int64_t cols, bool overwrite);

  // out = D(softmax(scale Q K^T, masks)) V per (b, h), as Attention says.
  void (*attention_forward)(float* out, const Attention& a);
  // Its gradients from dout [B, T, H * d] (the output's layout), with P computed again:
  //   dV += D(P)^T dO;  dP = D(dO V^T);  dS = P * (dP - rowsum(dP * P));
  //   dQ += scale dS K;  dK += scale dS^T Q
  // dq, dk, dv are laid out as q, k, v (same strides) and may be null (not needed); they may share
  // one buffer (self-attention's fused projection) as long as their column blocks do not overlap.
  void (*attention_backward)(float* dq, float* dk, float* dv, const float* dout, const Attention& a);
  // The products attention_forward / attention_backward run on a bf16 unit when Attention::bf16
  // points here: the dot table's (AVX512_BF16), null in the others.
  const AttentionBf16* attention_bf16;

  // losses[r] as defined above (0 for ignored rows).
  void (*cross_entropy_forward)(float* losses, const float* logits, const int32_t* targets,
                                const CrossEntropy& ce);
  // dlogits[r] += dlosses[r] * (softmax(logits[r]) - q_r); ignored rows get nothing.
  void (*cross_entropy_backward)(float* dlogits, const float* dlosses, const float* logits,
                                 const int32_t* targets, const CrossEntropy& ce);
  // Both at once, in place, for a loss whose gradient is wanted right away (linear_cross_entropy's
  // chunks): losses[r] as cross_entropy_forward, and logits[r] overwritten by dlosses[r] *
  // (softmax(logits[r]) - q_r), zeros on ignored rows (cross_entropy_backward into a zeroed buffer).
  // One exp per logit instead of three, and no second [rows, V] buffer.
  void (*cross_entropy_fused)(float* losses, float* logits_to_dlogits, const float* dlosses,
                              const int32_t* targets, const CrossEntropy& ce);

  void (*relu_forward)(float* out, const float* inp, int64_t n);
  void (*relu_backward)(float* dinp, const float* dout, const float* inp, int64_t n);
  // exact GELU (erf), as torch.nn.functional.gelu: x * 0.5 * (1 + erf(x / sqrt(2)))
  void (*gelu_forward)(float* out, const float* inp, int64_t n);
  void (*gelu_backward)(float* dinp, const float* dout, const float* inp, int64_t n);
  // GELU's tanh approximation, as GPT-2 (transformers' "gelu_new") and torch's gelu(approximate="tanh"):
  // x * 0.5 * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
  void (*gelu_tanh_forward)(float* out, const float* inp, int64_t n);
  void (*gelu_tanh_backward)(float* dinp, const float* dout, const float* inp, int64_t n);

  // Dropout with a counter-based hash (the mask of element i depends only on seed and i, so any
  // thread split and every arch give the same mask):
  //   keep_i = dropout_bits(seed, first + i) >= drop_below  (24-bit value vs threshold, see dropout_bits)
  //            && (!relu || inp[i] > 0)                     (relu: dropout(relu(x)) fused, one mask)
  //   mask[i] = keep_i (unless mask is null);  out[i] = keep_i ? inp[i] * scale : 0
  // `first` is the index of inp[0] in the whole tensor the mask is drawn for: a block of it gets the
  // same mask as in one call over the whole (fused attention regenerates its dropout per batch row).
  void (*dropout_forward)(float* out, uint8_t* mask, const float* inp, int64_t n, uint64_t seed,
                          uint32_t drop_below, float scale, bool relu, int64_t first);
  // dinp[i] += dout[i] * (mask[i] ? scale : 0); with overwrite, dinp[i] = ... (dinp is not read)
  void (*dropout_backward)(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float scale,
                           bool overwrite);

  // out[r, c] += bias[c]
  void (*bias_add)(float* out, const float* bias, int64_t rows, int64_t cols);
  // dbias[c] += sum_r dout[r, c]
  void (*bias_backward)(float* dbias, const float* dout, int64_t rows, int64_t cols);
  // y += alpha * x
  void (*axpy)(float* y, const float* x, float alpha, int64_t n);
  // out = a + b
  void (*add)(float* out, const float* a, const float* b, int64_t n);
  // out = x (no overlap; threaded: one thread's memcpy does not saturate a many-core CPU's memory)
  void (*copy)(float* out, const float* x, int64_t n);
  // out = s * x (out == x, in place, or no overlap: threads split the range)
  void (*scale)(float* out, const float* x, float s, int64_t n);
  // out = value
  void (*fill)(float* out, float value, int64_t n);
  // sum of squares, accumulated in double
  double (*sum_squares)(const float* x, int64_t n);

  void (*adam_update)(float* param, float* m, float* v, const float* grad, int64_t n, const AdamParams& p);
};

// ---------------------------------------------------------------------------------------------
// Arch selection.
enum class Arch { scalar, sse2, avx2, avx512, neon };
const char* arch_name(Arch a);
// Parses "scalar", "sse2", "avx2", "avx512", "neon"; throws std::invalid_argument otherwise.
Arch parse_arch(const std::string& s);
// Archs compiled into this binary AND supported by this CPU, best last. Always contains scalar.
std::vector<Arch> available_archs();
// The table of one arch; throws std::runtime_error if it is not available.
const KernelTable& kernels(Arch a);
// The active arch: TAPEGRAD_ARCH if set (an unavailable value throws at first use), else the best.
Arch active_arch();
const KernelTable& active();
void set_arch(Arch a);  // throws if not available
// How an arch's gemm_bf16 multiplies:
//   widen  bf16 values widened to fp32 as they are packed, then the fp32 FMA micro-kernel: half the
//          memory traffic of fp32 operands, fp32 speed. Every arch.
//   dot    the CPU's bf16 dot-product instructions, two multiply-adds per fp32 lane: vdpbf16ps
//          (x86 AVX512_BF16, in the avx512 table) or BFMMLA (Arm FEAT_BF16, in the neon table).
//   amx    Intel AMX tiles (TDPBF16PS, 16 x 16 x 32 multiply-adds per instruction; x86 AMX-BF16, in
//          the avx512 table; Linux must grant the process the tile state).
// dot and amx are compiled in separate TUs with their flags and entered only when the CPU has them.
enum class Bf16Path { widen, dot, amx };
const char* bf16_path_name(Bf16Path p);
// Whether arch a's table can use path p here (compiled in, and the CPU has the instructions; widen:
// whenever arch a runs here).
bool has_bf16_path(Arch a, Bf16Path p);
bool has_bf16_dot(Arch a);  // has_bf16_path(a, Bf16Path::dot)
// Path p's speed over the fp32 GEMM on this CPU (fp32 operands, one thread, measured once per
// process and path: dispatch.cpp), 0 without that path. dot: > 1 on AMD Zen 4 / Zen 5, ~0.5 on Intel
// Xeons, whose vdpbf16ps does half the work of their FMAs; amx: several times.
double bf16_speedup(Arch a, Bf16Path p);
// Arch a's table with bf16 path p; throws std::runtime_error if a, or p, is not available.
// kernels(a) takes the best unit the CPU has (amx, else dot) when it is measured at least 1.2x the
// fp32 GEMM, else kernels(a, widen) (a slow AMX does not fall back to dot: vdpbf16ps is slower still
// on such a CPU). TAPEGRAD_BF16 overrides that choice: auto (default), dot or amx (that unit wherever
// the CPU has it, widen where it lacks it) or widen (everywhere).
const KernelTable& kernels(Arch a, Bf16Path p);
// Why kernels(a) takes the widen path: "no bf16 dot-product unit", "TAPEGRAD_BF16=widen",
// "TAPEGRAD_BF16 names a unit this CPU lacks" or "the bf16 dot-product (or AMX) unit measured 0.49x
// the fp32 GEMM here"; empty when it takes the dot or amx path.
std::string bf16_widen_reason(Arch a);
// The path kernels(a) takes (the choice above; widen where a has no unit or it does not pay).
Bf16Path bf16_path(Arch a);
// Does bf16 pay on this CPU for this product? Answered here and nowhere else (autograd's
// Precision::bf16 asks: autograd/precision.cpp). For the CPU (g == nullptr): the active table's
// bf16 GEMM runs on a bf16 unit (dot or amx), i.e. the CPU has one and it was measured at least 1.2x
// the fp32 GEMM (or TAPEGRAD_BF16 names it), or testing::set_bf16_everywhere is on. For a product g: that,
// and g is not one or two rows against a transposed B, which the fp32 GEMM reads in place while the
// bf16 one converts all of B. Why and with which figures: ops/README.md#bf16.
bool bf16_pays(const Gemm* g = nullptr);
// gemm_bf16's few-row path (every arch and bf16 path): up to bf16_few_rows_max rows of op(A)
// against a transposed B stored in bf16 (a decoding step against weights kept in bf16) read B once,
// widened in registers, without packing it. Such a product is bound by reading B, so it pays on every
// CPU (half the bytes of fp32 weights), dot-product unit or not, unlike bf16_pays' products; where
// it applies, the rows of op(A) are rounded to bf16 as everywhere in gemm_bf16. (Tag: each arch
// TU's bf16 driver passes its kernel, so that each keeps its own copy, compiled with its flags.)
inline constexpr int64_t bf16_few_rows_max = 4;
template <class Tag = void>
bool bf16_few_rows(const Gemm& g, DType b) {
  return g.trans_b && b == DType::bf16 && g.M <= bf16_few_rows_max;
}
// The products gemm_int8 is for: up to int8_few_rows_max rows of op(A) against a weight stored
// [N, K] (x W^T), one product per decoding step and layer. Longer products (a prompt) multiply
// faster as fp32 packed GEMMs than as dot products.
inline constexpr int64_t int8_few_rows_max = 4;
inline bool int8_few_rows(const Gemm& g) {
  return g.trans_b && g.batch == 1 && g.M <= int8_few_rows_max;
}
// One line for logs and tools, e.g.
// "available: scalar sse2 avx2 avx512; active: avx512; bf16 gemm: dot (avx512_bf16 vdpbf16ps)".
std::string arch_report();

// Threads used by the kernels (OpenMP). set_num_threads(0) restores the default. Kernels split
// work across threads only when it pays (long vectors, many rows, big or many GEMMs), and run on
// the calling thread when called from inside an active OpenMP parallel region.
int num_threads();
void set_num_threads(int n);

// ---------------------------------------------------------------------------------------------
// Convenience wrappers calling the active table.
inline void gemm(float* C, const float* A, const float* B, const Gemm& g) {
  active().gemm(C, A, B, g);
}
inline void gemm_bf16(float* C, const Operand& A, const Operand& B, const Gemm& g) {
  active().gemm_bf16(C, A, B, g);
}
inline void gemm_int8(float* C, const float* A, const Int8Rows& B, const Gemm& g) {
  active().gemm_int8(C, A, B, g);
}
inline void f32_to_bf16(bf16* out, const float* in, int64_t n) {
  active().f32_to_bf16(out, in, n);
}
inline void bf16_to_f32(float* out, const bf16* in, int64_t n) {
  active().bf16_to_f32(out, in, n);
}
inline void softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols,
                            const SoftmaxMask& m = {}) {
  active().softmax_forward(out, inp, rows, cols, m);
}
inline void softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols,
                             bool overwrite = false) {
  active().softmax_backward(dinp, dout, out, rows, cols, overwrite);
}
inline void log_softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols) {
  active().log_softmax_forward(out, inp, rows, cols);
}
inline void log_softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows,
                                 int64_t cols) {
  active().log_softmax_backward(dinp, dout, out, rows, cols);
}
inline void attention_forward(float* out, const Attention& a) {
  active().attention_forward(out, a);
}
inline void attention_backward(float* dq, float* dk, float* dv, const float* dout, const Attention& a) {
  active().attention_backward(dq, dk, dv, dout, a);
}
inline void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int64_t rows, int64_t cols, float eps) {
  active().layernorm_forward(out, mean, rstd, inp, weight, bias, rows, cols, eps);
}
inline void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const LayerNormSaved& saved, int64_t rows, int64_t cols,
                               bool overwrite = false) {
  active().layernorm_backward(dinp, dweight, dbias, dout, saved, rows, cols, overwrite);
}
inline void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                                  const CrossEntropy& ce) {
  active().cross_entropy_forward(losses, logits, targets, ce);
}
inline void cross_entropy_backward(float* dlogits, const float* dlosses, const float* logits,
                                   const int32_t* targets, const CrossEntropy& ce) {
  active().cross_entropy_backward(dlogits, dlosses, logits, targets, ce);
}
inline void cross_entropy_fused(float* losses, float* logits_to_dlogits, const float* dlosses,
                                const int32_t* targets, const CrossEntropy& ce) {
  active().cross_entropy_fused(losses, logits_to_dlogits, dlosses, targets, ce);
}
inline void relu_forward(float* out, const float* inp, int64_t n) {
  active().relu_forward(out, inp, n);
}
inline void relu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  active().relu_backward(dinp, dout, inp, n);
}
inline void gelu_forward(float* out, const float* inp, int64_t n) {
  active().gelu_forward(out, inp, n);
}
inline void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  active().gelu_backward(dinp, dout, inp, n);
}
inline void gelu_tanh_forward(float* out, const float* inp, int64_t n) {
  active().gelu_tanh_forward(out, inp, n);
}
inline void gelu_tanh_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  active().gelu_tanh_backward(dinp, dout, inp, n);
}
inline void dropout_forward(float* out, uint8_t* mask, const float* inp, int64_t n, uint64_t seed,
                            uint32_t drop_below, float scale, bool relu = false, int64_t first = 0) {
  active().dropout_forward(out, mask, inp, n, seed, drop_below, scale, relu, first);
}
inline void dropout_backward(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float scale,
                             bool overwrite = false) {
  active().dropout_backward(dinp, dout, mask, n, scale, overwrite);
}
inline void bias_add(float* out, const float* bias, int64_t rows, int64_t cols) {
  active().bias_add(out, bias, rows, cols);
}
inline void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t cols) {
  active().bias_backward(dbias, dout, rows, cols);
}
inline void axpy(float* y, const float* x, float alpha, int64_t n) {
  active().axpy(y, x, alpha, n);
}
inline void add(float* out, const float* a, const float* b, int64_t n) {
  active().add(out, a, b, n);
}
inline void scale(float* x, float s, int64_t n) {
  active().scale(x, x, s, n);
}
inline void scale(float* out, const float* x, float s, int64_t n) {
  active().scale(out, x, s, n);
}
inline void fill(float* out, float value, int64_t n) {
  active().fill(out, value, n);
}
inline void copy(float* out, const float* x, int64_t n) {
  active().copy(out, x, n);
}
inline double sum_squares(const float* x, int64_t n) {
  return active().sum_squares(x, n);
}
// One Adam / AdamW step over many tensors (a model's parameters) as one streaming pass: the
// tensors' elements are split evenly between the threads across tensor boundaries, in one OpenMP
// region, so small tensors (biases, norms) share the threads with large ones instead of running
// one after the other on one thread, each large one opening its own region. Each tensor's
// weight_decay replaces p.weight_decay (a model's decayed and undecayed groups). The same values
// as adam_update per tensor. ops/optim.cpp.
struct AdamTensor {
  float *param = nullptr, *m = nullptr, *v = nullptr;
  const float* grad = nullptr;
  int64_t n = 0;
  float weight_decay = 0.0f;
};
void adam_update(std::span<const AdamTensor> tensors, const AdamParams& p);
inline void adam_update(float* param, float* m, float* v, const float* grad, int64_t n, const AdamParams& p) {
  active().adam_update(param, m, v, grad, n, p);
}

namespace testing {
// A test seam: scratch requests of the SIMD kernels (per-call GEMM workspaces, softmax's masked
// rows, partial sums) above `bytes` throw std::bad_alloc as if memory had run out, so tests can
// check that a failed allocation reaches the caller instead of terminating inside an OpenMP region.
// 0 (the default) means no limit.
void set_scratch_limit(std::size_t bytes);
std::size_t scratch_limit();
// A test seam: with on, bf16_pays says yes on every CPU (bf16 rounding then runs on the widen path
// where there is no dot-product unit: the same rounding, at fp32 speed or slower), so the bf16
// rules are tested on every machine. Off by default.
void set_bf16_everywhere(bool on);
// A test seam: the fp32 GEMM's loop order inside a work item (ops/simd/gemm.hpp, a_in_l1). `cpu`
// (the default) lets each arch's traits choose by core and shape; `a_in_l1` packs A and keeps its
// panel in L1 for every product that can (N > NR, B not read in place), `b_in_l1` never does; so
// both orders are tested on every CPU.
enum class GemmLoopOrder { cpu, b_in_l1, a_in_l1 };
void set_gemm_loop_order(GemmLoopOrder order);
GemmLoopOrder gemm_loop_order();
// A test seam: where the fp32 GEMM's K blocks run (ops/simd/gemm.hpp, k_inner). `cpu` (the
// default) lets each arch's traits choose by shape; `inner` runs every K block of a work item
// before the next item (all of B's column block packed first) wherever B is packed and K spans
// several blocks, `outer` never does; so both are tested on every CPU.
enum class GemmKOrder { cpu, outer, inner };
void set_gemm_k_order(GemmKOrder order);
GemmKOrder gemm_k_order();
// A test seam: whether the fp32 GEMM computes C^T = op(B)^T op(A)^T and stores its tiles transposed
// (ops/simd/gemm.hpp, trans_c_pays). `cpu` (the default) lets each arch's traits choose by shape;
// `on` does so for every product of the packed path (not the few-row one), `off` never; so both
// are tested on every CPU.
enum class GemmCTranspose { cpu, off, on };
void set_gemm_c_transpose(GemmCTranspose mode);
GemmCTranspose gemm_c_transpose();
}  // namespace testing

namespace ref {
// The scalar reference table (ops/ref.cpp).
const KernelTable& table();
}  // namespace ref

}  // namespace tg::ops
