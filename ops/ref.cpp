// Scalar reference kernels: the specification of every kernel in kernels.hpp, written to be read.
// SIMD versions are tested against these; they are also the fallback (TAPEGRAD_ARCH=scalar).
// Accumulations that decide accuracy (row sums, norms) are done in double here on purpose.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/kernels.hpp"

namespace tg::ops {

// bits + 0x7fff + (bit 16 of bits), truncated to the upper half: round to nearest, ties to the
// even upper half. A carry out of the mantissa raises the exponent (the largest finite values
// round to Inf). NaN would carry into the sign or round to Inf, so it keeps its upper half with the
// quiet bit (bf16 bit 6, fp32 bit 22) set.
bf16 to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

float to_f32(bf16 x) {
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace tg::ops

namespace tg::ops::ref {
namespace {

// C = alpha * op(A) op(B) + beta * C, one batch entry at a time, the textbook triple loop.
void gemm(float* C, const float* A, const float* B, const Gemm& g) {
  validate(g);
  for (int64_t b = 0; b < g.batch; ++b) {
    const float* a = A + b * g.stride_a;
    const float* bb = B + b * g.stride_b;
    float* c = C + b * g.stride_c;
    for (int64_t i = 0; i < g.M; ++i) {
      for (int64_t j = 0; j < g.N; ++j) {
        double acc = 0.0;
        for (int64_t k = 0; k < g.K; ++k) {
          const float aik = g.trans_a ? a[k * g.lda + i] : a[i * g.lda + k];
          const float bkj = g.trans_b ? bb[j * g.ldb + k] : bb[k * g.ldb + j];
          acc += static_cast<double>(aik) * bkj;
        }
        float& cij = c[i * g.ldc + j];
        const float prev = g.beta == 0.0f ? 0.0f : g.beta * cij;
        cij = static_cast<float>(g.alpha * acc) + prev + (g.bias ? g.bias[j] : 0.0f);
      }
    }
  }
}

// op(X)[r, c] of a bf16 GEMM operand (element `index` of its storage) as the fp32 value of its
// bf16 rounding.
float bf16_value(const Operand& x, int64_t index) {
  if (x.dtype == DType::bf16) return to_f32(static_cast<const bf16*>(x.data)[index]);
  return to_f32(to_bf16(static_cast<const float*>(x.data)[index]));
}

// The bf16 GEMM: op(A) and op(B) rounded to bf16 (once, into fp32 matrices: a product of two bf16
// values is exact in fp32), then the triple loop accumulating in fp32 in k order (the precision of
// the SIMD paths; only the order of their sums differs).
void gemm_bf16(float* C, const Operand& A, const Operand& B, const Gemm& g) {
  validate(g);
  std::vector<float> a(static_cast<size_t>(g.M * g.K)), bt(static_cast<size_t>(g.N * g.K));
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t i = 0; i < g.M; ++i)  // a[i, k] = op(A)[i, k]
      for (int64_t k = 0; k < g.K; ++k)
        a[i * g.K + k] = bf16_value(A, b * g.stride_a + (g.trans_a ? k * g.lda + i : i * g.lda + k));
    for (int64_t j = 0; j < g.N; ++j)  // bt[j, k] = op(B)[k, j]
      for (int64_t k = 0; k < g.K; ++k)
        bt[j * g.K + k] = bf16_value(B, b * g.stride_b + (g.trans_b ? j * g.ldb + k : k * g.ldb + j));
    float* c = C + b * g.stride_c;
    for (int64_t i = 0; i < g.M; ++i) {
      for (int64_t j = 0; j < g.N; ++j) {
        float acc = 0.0f;
        for (int64_t k = 0; k < g.K; ++k) acc += a[i * g.K + k] * bt[j * g.K + k];
        float& cij = c[i * g.ldc + j];
        const float prev = g.beta == 0.0f ? 0.0f : g.beta * cij;
        cij = g.alpha * acc + prev + (g.bias ? g.bias[j] : 0.0f);
      }
    }
  }
}

// gemm_int8: op(B)[k, j] = scale[j] * q[int8_offset(j, k, K)] (B^T a weight in int8 rows, one product):
// each column's dot product of op(A)'s row with q's row (exact in double), then times scale[j].
void gemm_int8(float* C, const float* A, const Int8Rows& B, const Gemm& g) {
  validate_int8(g);
  if (g.batch <= 0) return;
  for (int64_t i = 0; i < g.M; ++i) {
    for (int64_t j = 0; j < g.N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < g.K; ++k) {
        const float aik = g.trans_a ? A[k * g.lda + i] : A[i * g.lda + k];
        acc += static_cast<double>(aik) * B.q[int8_offset(j, k, g.K)];
      }
      float& cij = C[i * g.ldc + j];
      const float prev = g.beta == 0.0f ? 0.0f : g.beta * cij;
      cij = g.alpha * (static_cast<float>(acc) * B.scale[j]) + prev + (g.bias ? g.bias[j] : 0.0f);
    }
  }
}

// quantize_int8_rows, row by row as kernels.hpp's Int8Rows defines it: scale = max|w| / 127,
// q = nearbyint(w * fl(127 / max|w|)) in fp32 (ties to even); zeros when the scale underflows, and q
// in double when 127 / max|w| overflows fp32.
int64_t quantize_int8_rows(int8_t* q, float* scale, const float* w, int64_t rows, int64_t cols) {
  std::fill_n(q, int8_bytes(rows, cols), int8_t{0});  // the padding
  for (int64_t j = 0; j < rows; ++j) {
    const float* wj = w + j * cols;
    float amax = 0.0f;
    for (int64_t k = 0; k < cols; ++k) {
      if (!std::isfinite(wj[k])) return j;
      amax = std::max(amax, std::fabs(wj[k]));
    }
    const float s = amax / 127.0f, inv = 127.0f / amax;
    scale[j] = s;
    for (int64_t k = 0; k < cols; ++k) {
      int8_t& qjk = q[int8_offset(j, k, cols)];
      if (s == 0.0f)
        qjk = 0;
      else if (std::isfinite(inv))
        qjk = static_cast<int8_t>(std::nearbyint(wj[k] * inv));
      else
        qjk = static_cast<int8_t>(std::nearbyint(static_cast<double>(wj[k]) * (127.0 / amax)));
    }
  }
  return -1;
}

void f32_to_bf16(bf16* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

void bf16_to_f32(float* out, const bf16* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_f32(in[i]);
}

// Number of keys row r may look at (causal prefix), and whether key k is padding.
struct RowMask {
  int64_t visible;         // keys [0, visible) pass the causal test
  const uint8_t* padding;  // nullable; padding[k] != 0 masks key k
};
RowMask row_mask(int64_t r, int64_t rows, int64_t cols, const SoftmaxMask& m) {
  const int64_t q_len = m.q_len > 0 ? m.q_len : rows;
  const int64_t q = r % q_len, group = r / q_len;
  RowMask rm{cols, nullptr};
  if (m.causal) rm.visible = std::clamp<int64_t>(q + 1 + (cols - q_len), 0, cols);
  if (m.key_mask) rm.padding = m.key_mask + (group / m.groups_per_key_row) * cols;
  return rm;
}

void softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols, const SoftmaxMask& m) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    float* y = out + r * cols;
    const RowMask rm = row_mask(r, rows, cols, m);
    auto masked = [&](int64_t k) { return k >= rm.visible || (rm.padding && rm.padding[k]); };
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < rm.visible; ++k)
      if (!masked(k)) mx = std::max(mx, x[k]);
    double sum = 0.0;
    for (int64_t k = 0; k < cols; ++k) {
      y[k] = masked(k) ? 0.0f : std::exp(x[k] - mx);
      sum += y[k];
    }
    const float inv = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;  // all masked: row of zeros
    for (int64_t k = 0; k < cols; ++k) y[k] *= inv;
  }
}

// y = softmax(x): dx_k = y_k * (dy_k - sum_j dy_j y_j). Masked positions have y = 0, so get 0.
void softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols,
                      bool overwrite) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* dy = dout + r * cols;
    const float* y = out + r * cols;
    double dot = 0.0;
    for (int64_t k = 0; k < cols; ++k) dot += static_cast<double>(dy[k]) * y[k];
    for (int64_t k = 0; k < cols; ++k)
      dinp[r * cols + k] = (overwrite ? 0.0f : dinp[r * cols + k]) + y[k] * (dy[k] - static_cast<float>(dot));
  }
}

void log_softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < cols; ++k) mx = std::max(mx, x[k]);
    double sum = 0.0;
    for (int64_t k = 0; k < cols; ++k) sum += std::exp(static_cast<double>(x[k]) - mx);
    const float lse = mx + static_cast<float>(std::log(sum));
    for (int64_t k = 0; k < cols; ++k) out[r * cols + k] = x[k] - lse;
  }
}

// y = x - logsumexp(x): dx_k = dy_k - exp(y_k) * sum_j dy_j
void log_softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* dy = dout + r * cols;
    const float* y = out + r * cols;
    double s = 0.0;
    for (int64_t k = 0; k < cols; ++k) s += dy[k];
    for (int64_t k = 0; k < cols; ++k) dinp[r * cols + k] += dy[k] - std::exp(y[k]) * static_cast<float>(s);
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += x[c];
    const double mu = s / cols;
    double v = 0.0;
    for (int64_t c = 0; c < cols; ++c) v += (x[c] - mu) * (x[c] - mu);
    const double rs = 1.0 / std::sqrt(v / cols + eps);  // biased variance, as PyTorch
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = static_cast<float>((x[c] - mu) * rs);
      out[r * cols + c] = xhat * (weight ? weight[c] : 1.0f) + (bias ? bias[c] : 0.0f);
    }
    mean[r] = static_cast<float>(mu);
    rstd[r] = static_cast<float>(rs);
  }
}

// xhat = (x - mean) * rstd, y = xhat * w + b. With g = w * dy:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw = sum_rows dy * xhat,  db = sum_rows dy
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const LayerNormSaved& saved, int64_t rows, int64_t cols, bool overwrite) {
  const float *const inp = saved.inp, *const weight = saved.weight, *const mean = saved.mean,
                     *const rstd = saved.rstd;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    const float* dy = dout + r * cols;
    double g_mean = 0.0, gx_mean = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (x[c] - mean[r]) * static_cast<double>(rstd[r]);
      const double g = dy[c] * static_cast<double>(weight ? weight[c] : 1.0f);
      g_mean += g;
      gx_mean += g * xhat;
    }
    g_mean /= cols;
    gx_mean /= cols;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (x[c] - mean[r]) * static_cast<double>(rstd[r]);
      const double g = dy[c] * static_cast<double>(weight ? weight[c] : 1.0f);
      if (dinp)
        dinp[r * cols + c] = (overwrite ? 0.0f : dinp[r * cols + c]) +
                             static_cast<float>(rstd[r] * (g - g_mean - xhat * gx_mean));
      if (dweight) dweight[c] += static_cast<float>(dy[c] * xhat);
      if (dbias) dbias[c] += dy[c];
    }
  }
}

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                           const CrossEntropy& ce) {
  const double eps = ce.label_smoothing;
  for (int64_t r = 0; r < ce.rows; ++r) {
    const int32_t t = targets[r];
    if (t == ce.ignore_index) {
      losses[r] = 0.0f;
      continue;
    }
    const float* x = logits + r * ce.V;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < ce.V; ++j) mx = std::max(mx, x[j]);
    double sum = 0.0, sum_x = 0.0;
    for (int64_t j = 0; j < ce.V; ++j) {
      sum += std::exp(static_cast<double>(x[j]) - mx);
      sum_x += x[j];
    }
    const double lse = mx + std::log(sum);
    // -sum_j q_j (x_j - lse) with q = (1-eps) onehot + eps/V
    losses[r] = static_cast<float>((1.0 - eps) * (lse - x[t]) + eps * (lse - sum_x / ce.V));
  }
}

void cross_entropy_backward(float* dlogits, const float* dlosses, const float* logits, const int32_t* targets,
                            const CrossEntropy& ce) {
  const double eps = ce.label_smoothing;
  for (int64_t r = 0; r < ce.rows; ++r) {
    const int32_t t = targets[r];
    if (t == ce.ignore_index) continue;
    const float* x = logits + r * ce.V;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < ce.V; ++j) mx = std::max(mx, x[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < ce.V; ++j) sum += std::exp(static_cast<double>(x[j]) - mx);
    for (int64_t j = 0; j < ce.V; ++j) {
      const double p = std::exp(static_cast<double>(x[j]) - mx) / sum;
      const double q = (j == t ? 1.0 - eps : 0.0) + eps / ce.V;
      dlogits[r * ce.V + j] += static_cast<float>(dlosses[r] * (p - q));
    }
  }
}

// The two definitions above, one after the other, row by row, the gradient replacing the logits (one
// row of scratch: no second [rows, V] buffer under the reference table either).
void cross_entropy_fused(float* losses, float* logits_to_dlogits, const float* dlosses,
                         const int32_t* targets, const CrossEntropy& ce) {
  CrossEntropy row = ce;
  row.rows = 1;
  std::vector<float> dlogits(static_cast<size_t>(ce.V));
  for (int64_t r = 0; r < ce.rows; ++r) {
    float* x = logits_to_dlogits + r * ce.V;
    // (parenthesised: these, not tg::ops' dispatching functions of the same name, which ADL also finds)
    (cross_entropy_forward)(losses + r, x, targets + r, row);
    std::fill(dlogits.begin(), dlogits.end(), 0.0f);
    (cross_entropy_backward)(dlogits.data(), dlosses + r, x, targets + r, row);
    std::copy(dlogits.begin(), dlogits.end(), x);
  }
}

void relu_forward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}
void relu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
void gelu_forward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i];
    out[i] = static_cast<float>(0.5 * x * (1.0 + std::erf(x * kInvSqrt2)));
  }
}
// d/dx [x Phi(x)] = Phi(x) + x phi(x)
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i];
    const double cdf = 0.5 * (1.0 + std::erf(x * kInvSqrt2));
    const double pdf = kInvSqrt2Pi * std::exp(-0.5 * x * x);
    dinp[i] += static_cast<float>(dout[i] * (cdf + x * pdf));
  }
}

// The tanh approximation: u = sqrt(2 / pi) (x + c x^3), y = x (1 + tanh u) / 2;
// dy/dx = (1 + t) / 2 + x (1 - t^2) sqrt(2 / pi) (1 + 3 c x^2) / 2, t = tanh u
constexpr double kSqrt2OverPi = 0.79788456080286535588, kGeluTanhC = 0.044715;
void gelu_tanh_forward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i];
    out[i] = static_cast<float>(0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluTanhC * x * x * x))));
  }
}
void gelu_tanh_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i];
    const double t = std::tanh(kSqrt2OverPi * (x + kGeluTanhC * x * x * x));
    const double d =
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluTanhC * x * x);
    dinp[i] += static_cast<float>(dout[i] * d);
  }
}

void dropout_forward(float* out, uint8_t* mask, const float* inp, int64_t n, uint64_t seed,
                     uint32_t drop_below, float scale, bool relu, int64_t first) {
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = dropout_bits(seed, first + i) >= drop_below && (!relu || inp[i] > 0.0f);
    if (mask) mask[i] = keep;
    out[i] = keep ? inp[i] * scale : 0.0f;
  }
}
void dropout_backward(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float scale,
                      bool overwrite) {
  for (int64_t i = 0; i < n; ++i) dinp[i] = (overwrite ? 0.0f : dinp[i]) + dout[i] * (mask[i] ? scale : 0.0f);
}

// Attention, one (b, h) at a time, as its formulas read: the products by the reference gemm above
// on the head's matrices in place, P as a [T, S] matrix (softmax_forward above with this head's
// masks), D(P) by dropout_forward with the element numbers of a [B, H, T, S] tensor.
struct AttentionHead {
  const Attention& a;
  int64_t b, h;
  const float* q() const { return a.q + b * a.q_batch + h * a.d_head; }   // rows a.ldq apart
  const float* k() const { return a.k + b * a.kv_batch + h * a.d_head; }  // rows a.ldk apart
  const float* v() const { return a.v + b * a.kv_batch + h * a.d_head; }  // rows a.ldv apart
  // C (rows ldc apart) = alpha op(A) op(B) + beta C with op(A) M x K, op(B) K x N
  static void product(float* C, int64_t ldc, const float* A, int64_t lda, bool ta, const float* B,
                      int64_t ldb, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
    Gemm g = gemm_desc(M, N, K, ta, tb, alpha, beta);
    g.lda = lda, g.ldb = ldb, g.ldc = ldc;
    ref::gemm(C, A, B, g);
  }
  // D(x) in place for x shaped like P
  void drop(std::vector<float>& x) const {
    if (a.drop_below > 0)
      ref::dropout_forward(x.data(), nullptr, x.data(), a.T * a.S, a.seed, a.drop_below, a.drop_scale, false,
                           (b * a.H + h) * a.T * a.S);
  }
  // P = softmax(scale Q K^T, masks) and D(P), both [T, S]
  void probs(std::vector<float>& P, std::vector<float>& DP) const {
    const int64_t T = a.T, S = a.S;
    P.assign(static_cast<size_t>(T * S), 0.0f);
    product(P.data(), S, q(), a.ldq, false, k(), a.ldk, true, T, S, a.d_head, a.scale, 0.0f);
    const SoftmaxMask m{
        .causal = a.causal, .q_len = T, .key_mask = a.key_mask ? a.key_mask + b * S : nullptr};
    ref::softmax_forward(P.data(), P.data(), T, S, m);
    DP = P;
    drop(DP);
  }
};

void attention_forward(float* out, const Attention& a) {
  const int64_t T = a.T, S = a.S, d = a.d_head, ldo = a.H * d;
  std::vector<float> P, DP;
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.H; ++h) {
      const AttentionHead head{a, b, h};
      head.probs(P, DP);
      // O = D(P) V, into the head's columns of out
      head.product(out + b * T * ldo + h * d, ldo, DP.data(), S, false, head.v(), a.ldv, false, T, d, S, 1.0f,
                   0.0f);
    }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const Attention& a) {
  const int64_t T = a.T, S = a.S, d = a.d_head, ldo = a.H * d;
  std::vector<float> P, DP, dP, dS;
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.H; ++h) {
      const AttentionHead head{a, b, h};
      head.probs(P, DP);
      const float* dO = dout + b * T * ldo + h * d;
      const int64_t off = h * d;
      if (dv)  // dV += D(P)^T dO
        head.product(dv + b * a.kv_batch + off, a.ldv, DP.data(), S, true, dO, ldo, false, S, d, T, 1.0f,
                     1.0f);
      if (!dq && !dk) continue;
      dP.resize(static_cast<size_t>(T * S));  // dP = D(dO V^T): the same mask and scale
      head.product(dP.data(), S, dO, ldo, false, head.v(), a.ldv, true, T, S, d, 1.0f, 0.0f);
      head.drop(dP);
      dS.resize(static_cast<size_t>(T * S));                              // written whole (overwrite)
      ref::softmax_backward(dS.data(), dP.data(), P.data(), T, S, true);  // dS = P * (dP - rowsum(dP * P))
      if (dq)                                                             // dQ += scale dS K
        head.product(dq + b * a.q_batch + off, a.ldq, dS.data(), S, false, head.k(), a.ldk, false, T, d, S,
                     a.scale, 1.0f);
      if (dk)  // dK += scale dS^T Q
        head.product(dk + b * a.kv_batch + off, a.ldk, dS.data(), S, true, head.q(), a.ldq, false, S, d, T,
                     a.scale, 1.0f);
    }
}

void bias_add(float* out, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] += bias[c];
}
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += dout[r * cols + c];
    dbias[c] += static_cast<float>(s);
  }
}
void axpy(float* y, const float* x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
void add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
void copy(float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i];
}
void scale(float* out, const float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
}
void fill(float* out, float value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = value;
}
double sum_squares(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

void adam_update(float* param, float* m, float* v, const float* grad, int64_t n, const AdamParams& p) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * p.grad_scale;
    if (p.weight_decay != 0.0f) {
      if (p.decoupled)
        param[i] -= p.lr * p.weight_decay * param[i];
      else
        g += p.weight_decay * param[i];
    }
    m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    const double mhat = m[i] / bc1, vhat = v[i] / bc2;
    param[i] -= static_cast<float>(p.lr * mhat / (std::sqrt(vhat) + p.eps));
  }
}

}  // namespace

const KernelTable& table() {
  static const KernelTable t{
      "scalar",
      gemm,
      gemm_bf16,
      "scalar reference: fp32 products of bf16-rounded values",
      gemm_int8,
      quantize_int8_rows,
      f32_to_bf16,
      bf16_to_f32,
      softmax_forward,
      softmax_backward,
      log_softmax_forward,
      log_softmax_backward,
      layernorm_forward,
      layernorm_backward,
      attention_forward,
      attention_backward,
      nullptr,
      cross_entropy_forward,
      cross_entropy_backward,
      cross_entropy_fused,
      relu_forward,
      relu_backward,
      gelu_forward,
      gelu_backward,
      gelu_tanh_forward,
      gelu_tanh_backward,
      dropout_forward,
      dropout_backward,
      bias_add,
      bias_backward,
      axpy,
      add,
      copy,
      scale,
      fill,
      sum_squares,
      adam_update,
  };
  return t;
}

}  // namespace tg::ops::ref
