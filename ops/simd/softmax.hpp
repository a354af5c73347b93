// Row-wise softmax family: softmax (with causal and key-padding masks), log-softmax, and fused
// cross-entropy, forward and backward. Rows are independent: OpenMP splits the rows, each row is
// SIMD over its columns. All use the max-subtracted form exp(x - max) so nothing overflows.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/kernels.hpp"
#include "ops/simd/common.hpp"

namespace tg::ops::simd {

// A row is worth a thread when rows * cols reaches this many elements per thread.
inline constexpr int64_t kMinRowElemsPerThread = 1 << 13;

template <class Arch>
int64_t min_rows_per_thread(int64_t cols) {
  return kMinRowElemsPerThread / (cols + 1) + 1;
}

// max_k x[k] over [0, n); -inf for n == 0.
template <class Arch>
float row_max(const float* x, int64_t n) {
  using V = Vec<Arch>;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (n <= 0) return kNegInf;
  V vm(kNegInf);
  int64_t k = 0;
  for (; k + int64_t(V::size) <= n; k += V::size) vm = xsimd::max(vm, V::load_unaligned(x + k));
  if (k < n) vm = xsimd::max(vm, load_partial<Arch>(x + k, n - k, kNegInf));
  return hmax<Arch>(vm);
}

// sum_k a[k] * b[k] (b == nullptr: sum_k a[k])
template <class Arch>
float row_dot(const float* a, const float* b, int64_t n) {
  using V = Vec<Arch>;
  V acc(0.0f);
  int64_t k = 0;
  if (b) {
    for (; k + int64_t(V::size) <= n; k += V::size)
      acc = xsimd::fma(V::load_unaligned(a + k), V::load_unaligned(b + k), acc);
    if (k < n)
      acc = xsimd::fma(load_partial<Arch>(a + k, n - k, 0.0f), load_partial<Arch>(b + k, n - k, 0.0f), acc);
  } else {
    for (; k + int64_t(V::size) <= n; k += V::size) acc += V::load_unaligned(a + k);
    if (k < n) acc += load_partial<Arch>(a + k, n - k, 0.0f);
  }
  return hsum<Arch>(acc);
}

// exp(x) for the x <= 0 of a max-shifted row: 2^n p(r) with n = round(x log2 e) and r = x - n ln 2
// (Cody-Waite, ln 2 in two parts), p Cephes' degree-6 expf polynomial on |r| <= ln(2) / 2, 2^n put
// into the exponent bits: within 1.02 ulp of exp on [-86.4, 0] (every 7th float checked). Below
// kExpFloor (e^-86.5, about 2.6e-38) it returns 0, -inf included; NaN stays NaN. Half the
// instructions of xsimd::exp, which also handles ranges a shifted row never reaches: the exps were
// as costly as the products in a 64-key attention row.
inline constexpr float kExpFloor = -86.5f;
template <class Arch>
Vec<Arch> exp_shifted(const Vec<Arch>& x) {
  using V = Vec<Arch>;
  using I = xsimd::batch<int32_t, Arch>;
  // n and r are garbage below the floor (and for -inf), where the result is replaced by 0; a NaN
  // makes n, r and p NaN, and NaN's exponent bits stay all ones whatever n adds to them.
  const V n = xsimd::nearbyint(x * V(1.44269504088896341f));
  V r = xsimd::fnma(n, V(0.693359375f), x);
  r = xsimd::fnma(n, V(-2.12194440e-4f), r);
  V p(1.9875691500e-4f);
  p = xsimd::fma(p, r, V(1.3981999507e-3f));
  p = xsimd::fma(p, r, V(8.3334519073e-3f));
  p = xsimd::fma(p, r, V(4.1665795894e-2f));
  p = xsimd::fma(p, r, V(1.6666665459e-1f));
  p = xsimd::fma(p, r, V(5.0000001201e-1f));
  p = xsimd::fma(p * r, r, r) + V(1.0f);  // p r^2 + r + 1
  const V scaled = xsimd::bitwise_cast<V>(xsimd::bitwise_cast<I>(p) + (xsimd::to_int(n) << 23));
  return xsimd::select(x < V(kExpFloor), V(0.0f), scaled);
}

// y[k] = exp(x[k] - shift) over [0, n), x[k] <= shift (y may be null: only the sum is wanted); returns
// sum_k y[k].
template <class Arch>
float row_exp(float* y, const float* x, float shift, int64_t n) {
  using V = Vec<Arch>;
  V acc(0.0f);
  int64_t k = 0;
  for (; k + int64_t(V::size) <= n; k += V::size) {
    const V e = exp_shifted<Arch>(V::load_unaligned(x + k) - V(shift));
    if (y) e.store_unaligned(y + k);
    acc += e;
  }
  if (k < n) {  // the last n - k < lanes values as one vector (exp is the costly part of a short row)
    // the other lanes hold -inf: exp gives 0 there, nothing added to the sum
    const V e = exp_shifted<Arch>(load_partial<Arch>(x + k, n - k, -std::numeric_limits<float>::infinity()) -
                                  V(shift));
    if (y) store_partial<Arch>(y + k, e, n - k);
    acc += e;
  }
  return hsum<Arch>(acc);
}

// y[k] = s * x[k] + c over [0, n)
template <class Arch>
void row_affine(float* y, const float* x, float s, float c, int64_t n) {
  using V = Vec<Arch>;
  int64_t k = 0;
  for (; k + int64_t(V::size) <= n; k += V::size)
    xsimd::fma(V(s), V::load_unaligned(x + k), V(c)).store_unaligned(y + k);
  for (; k < n; ++k) y[k] = s * x[k] + c;
}

// One row of softmax_forward: y[0, cols) = softmax(x) over the keys [0, visible) that pad (may be
// null) does not hide, 0 elsewhere. Padded keys are set to -inf in tmp (a cols-float scratch row)
// so max and exp skip them (exp(-inf) = 0), then their outputs are zeroed explicitly so they are
// exactly 0 whatever exp returns; a NaN among the visible scores makes the visible row NaN. y may
// be x. Fused attention calls it per row too.
template <class Arch>
void softmax_row(float* y, const float* x, int64_t visible, int64_t cols, const uint8_t* pad, float* tmp) {
  if (pad) {
    for (int64_t k = 0; k < visible; ++k) tmp[k] = pad[k] ? -std::numeric_limits<float>::infinity() : x[k];
    x = tmp;
  }
  const float mx = row_max<Arch>(x, visible);
  float sum = 0.0f;
  if (mx != -std::numeric_limits<float>::infinity()) {
    sum = row_exp<Arch>(y, x, mx, visible);
    if (pad)
      for (int64_t k = 0; k < visible; ++k)
        if (pad[k]) y[k] = 0.0f;
  } else {  // every visible key is masked, or NaN scores the vector max dropped beside a masked -inf
    for (int64_t k = 0; k < visible; ++k)
      if (std::isnan(x[k])) sum = std::numeric_limits<float>::quiet_NaN();
  }
  if (sum > 0.0f)
    row_affine<Arch>(y, y, 1.0f / sum, 0.0f, visible);
  else if (std::isnan(sum))  // a NaN score: the row stays NaN, so the fault reaches the loss
    std::fill(y, y + visible, std::numeric_limits<float>::quiet_NaN());
  else
    std::fill(y, y + visible, 0.0f);
  std::fill(y + visible, y + cols, 0.0f);
}

// y = softmax(x) over the keys row r may see (causal prefix, minus padded keys); the rest is 0.
template <class Arch>
void softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols, const SoftmaxMask& m) {
  const int64_t q_len = m.q_len > 0 ? m.q_len : rows;
  const int64_t min_rows = min_rows_per_thread<Arch>(cols);
  // one masked row per thread, taken before the parallel region (see scratch)
  float* tmp_rows =
      m.key_mask
          ? scratch<Arch, Slot::row>(static_cast<std::size_t>(parallel_threads<Arch>(rows, min_rows) * cols))
          : nullptr;
  parallel_for<Arch>(rows, min_rows, [&](int64_t lo, int64_t hi, int t) {
    float* tmp = tmp_rows ? tmp_rows + t * cols : nullptr;
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t q = r % q_len, group = r / q_len;
      const int64_t visible = m.causal ? std::clamp<int64_t>(q + 1 + (cols - q_len), 0, cols) : cols;
      const uint8_t* pad = m.key_mask ? m.key_mask + (group / m.groups_per_key_row) * cols : nullptr;
      softmax_row<Arch>(out + r * cols, inp + r * cols, visible, cols, pad, tmp);
    }
  });
}

// The row loop of both backward kernels: body(dy, y, dx) on each row's upstream gradient, saved
// output and input gradient, the rows split between threads.
template <class Arch, class Body>
void for_each_backward_row(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols,
                           Body body) {
  parallel_for<Arch>(rows, min_rows_per_thread<Arch>(cols), [&](int64_t lo, int64_t hi, int) {
    for (int64_t r = lo; r < hi; ++r) body(dout + r * cols, out + r * cols, dinp + r * cols);
  });
}

// One row of softmax_backward: dx += y * (dy - sum_j dy_j y_j) over [0, cols) (overwrite: dx = ...;
// dx may be dy then).
template <class Arch>
void softmax_backward_row(float* dx, const float* dy, const float* y, int64_t cols, bool overwrite) {
  using V = Vec<Arch>;
  const float dot = row_dot<Arch>(dy, y, cols);
  int64_t k = 0;
  if (overwrite) {
    for (; k + int64_t(V::size) <= cols; k += V::size)
      (V::load_unaligned(y + k) * (V::load_unaligned(dy + k) - V(dot))).store_unaligned(dx + k);
    if (k < cols) {
      const int64_t r = cols - k;
      store_partial<Arch>(
          dx + k, load_partial<Arch>(y + k, r, 0.0f) * (load_partial<Arch>(dy + k, r, 0.0f) - V(dot)), r);
    }
    return;
  }
  for (; k + int64_t(V::size) <= cols; k += V::size) {
    const V yk = V::load_unaligned(y + k);
    xsimd::fma(yk, V::load_unaligned(dy + k) - V(dot), V::load_unaligned(dx + k)).store_unaligned(dx + k);
  }
  if (k < cols) {
    const int64_t r = cols - k;
    store_partial<Arch>(
        dx + k,
        xsimd::fma(load_partial<Arch>(y + k, r, 0.0f), load_partial<Arch>(dy + k, r, 0.0f) - V(dot),
                   load_partial<Arch>(dx + k, r, 0.0f)),
        r);
  }
}

// dx += y * (dy - sum_j dy_j y_j)   (overwrite: dx = ...)
template <class Arch>
void softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols,
                      bool overwrite) {
  for_each_backward_row<Arch>(dinp, dout, out, rows, cols, [&](const float* dy, const float* y, float* dx) {
    softmax_backward_row<Arch>(dx, dy, y, cols, overwrite);
  });
}

// y = x - logsumexp(x), logsumexp(x) = max + log(sum exp(x - max))
template <class Arch>
void log_softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols) {
  parallel_for<Arch>(rows, min_rows_per_thread<Arch>(cols), [&](int64_t lo, int64_t hi, int) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* x = inp + r * cols;
      const float mx = row_max<Arch>(x, cols);
      const float lse = mx + std::log(row_exp<Arch>(nullptr, x, mx, cols));
      row_affine<Arch>(out + r * cols, x, 1.0f, -lse, cols);
    }
  });
}

// dx += dy - exp(y) * sum(dy)
template <class Arch>
void log_softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols) {
  using V = Vec<Arch>;
  for_each_backward_row<Arch>(dinp, dout, out, rows, cols, [&](const float* dy, const float* y, float* dx) {
    const float s = row_dot<Arch>(dy, nullptr, cols);
    int64_t k = 0;
    for (; k + int64_t(V::size) <= cols; k += V::size) {
      const V g = xsimd::fnma(xsimd::exp(V::load_unaligned(y + k)), V(s), V::load_unaligned(dy + k));
      (V::load_unaligned(dx + k) + g).store_unaligned(dx + k);
    }
    for (; k < cols; ++k) dx[k] += dy[k] - std::exp(y[k]) * s;
  });
}

// One row's loss -sum_j q_j (x_j - lse) = (1 - eps) (lse - x_t) + eps (lse - mean_j x_j), from its
// log-sum-exp, its target's logit and (when eps != 0) cross_entropy_mean_x. cross_entropy_forward and
// cross_entropy_fused both compute it so, and their losses agree bit for bit.
inline float cross_entropy_row_loss(float lse, float x_t, float mean_x, float eps) {
  return (1.0f - eps) * (lse - x_t) + eps * (lse - mean_x);
}
template <class Arch>
float cross_entropy_mean_x(const float* x, int64_t V, float eps) {
  return eps != 0.0f ? row_dot<Arch>(x, nullptr, V) / static_cast<float>(V) : 0.0f;
}

// loss = -sum_j q_j (x_j - lse) = (1 - eps) (lse - x_t) + eps (lse - mean_j x_j)
template <class Arch>
void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                           const CrossEntropy& ce) {
  const int64_t V = ce.V;
  const float eps = ce.label_smoothing;
  parallel_for<Arch>(ce.rows, min_rows_per_thread<Arch>(V), [&](int64_t lo, int64_t hi, int) {
    for (int64_t r = lo; r < hi; ++r) {
      const int32_t t = targets[r];
      if (t == ce.ignore_index) {
        losses[r] = 0.0f;
        continue;
      }
      const float* x = logits + r * V;
      const float mx = row_max<Arch>(x, V);
      const float lse = mx + std::log(row_exp<Arch>(nullptr, x, mx, V));
      losses[r] = cross_entropy_row_loss(lse, x[t], cross_entropy_mean_x<Arch>(x, V, eps), eps);
    }
  });
}

// dx_j += dloss * (softmax(x)_j - q_j), q = (1 - eps) onehot(t) + eps / V
template <class Arch>
void cross_entropy_backward(float* dlogits, const float* dlosses, const float* logits, const int32_t* targets,
                            const CrossEntropy& ce) {
  using B = Vec<Arch>;
  const int64_t V = ce.V;
  const float eps = ce.label_smoothing;
  parallel_for<Arch>(ce.rows, min_rows_per_thread<Arch>(V), [&](int64_t lo, int64_t hi, int) {
    for (int64_t r = lo; r < hi; ++r) {
      const int32_t t = targets[r];
      if (t == ce.ignore_index) continue;
      const float* x = logits + r * V;
      float* dx = dlogits + r * V;
      const float mx = row_max<Arch>(x, V);
      const float lse = mx + std::log(row_exp<Arch>(nullptr, x, mx, V));
      const float dl = dlosses[r], smooth = dl * eps / static_cast<float>(V);
      // dx += dl * exp(x - lse) - dl * eps / V, then the target's extra -dl * (1 - eps)
      int64_t j = 0;
      for (; j + int64_t(B::size) <= V; j += B::size) {
        const B p = xsimd::exp(B::load_unaligned(x + j) - B(lse));
        (B::load_unaligned(dx + j) + xsimd::fms(B(dl), p, B(smooth))).store_unaligned(dx + j);
      }
      for (; j < V; ++j) dx[j] += dl * std::exp(x[j] - lse) - smooth;
      dx[t] -= dl * (1.0f - eps);
    }
  });
}

// cross_entropy_forward and cross_entropy_backward of the same rows at once, the gradient written
// over the logits. Per row, three passes over the row (four with label smoothing), which stays in
// L2 after the first:
//   max, as cross_entropy_forward; sum_j x_j when eps != 0 (its own pass); the target's logit
//   e_j = exp(x_j - max) stored over x_j, s = sum_j e_j  -> lse = max + log s, the loss
//   dx_j = (dl / s) e_j - dl eps / V, then dx_t -= dl (1 - eps)
// The loss is cross_entropy_forward's to the bit (the same sums in the same order, and
// cross_entropy_row_loss); dx differs from cross_entropy_backward's only in rounding (dl / s * e_j for
// dl * exp(x_j - lse)). NaN and infinities spread as through the forward and backward kernels.
template <class Arch>
void cross_entropy_fused(float* losses, float* logits_to_dlogits, const float* dlosses,
                         const int32_t* targets, const CrossEntropy& ce) {
  const int64_t V = ce.V;
  const float eps = ce.label_smoothing;
  parallel_for<Arch>(ce.rows, min_rows_per_thread<Arch>(V), [&](int64_t lo, int64_t hi, int) {
    for (int64_t r = lo; r < hi; ++r) {
      float* x = logits_to_dlogits + r * V;
      const int32_t t = targets[r];
      if (t == ce.ignore_index) {
        losses[r] = 0.0f;
        std::fill(x, x + V, 0.0f);
        continue;
      }
      const float mx = row_max<Arch>(x, V), x_t = x[t], mean_x = cross_entropy_mean_x<Arch>(x, V, eps);
      const float s = row_exp<Arch>(x, x, mx, V);  // x now holds e_j
      losses[r] = cross_entropy_row_loss(mx + std::log(s), x_t, mean_x, eps);
      const float dl = dlosses[r];
      row_affine<Arch>(x, x, dl / s, -dl * eps / static_cast<float>(V), V);
      x[t] -= dl * (1.0f - eps);
    }
  });
}

}  // namespace tg::ops::simd
