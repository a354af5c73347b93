// Elementwise and vector kernels: activations, bias, axpy/add/scale, sum of squares, Adam.
// Each is a main loop over whole batches and a scalar tail; OpenMP splits long vectors into one
// contiguous chunk per thread (parallel_for), short ones run on the calling thread.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "ops/kernels.hpp"
#include "ops/simd/common.hpp"

namespace tg::ops::simd {

// Below this many elements per thread a kernel is faster on one thread.
inline constexpr int64_t kMinElemsPerThread = 1 << 15;

// out = max(x, 0)
template <class Arch>
void relu_forward(float* out, const float* inp, int64_t n) {
  using V = Vec<Arch>;
  parallel_for<Arch>(n, kMinElemsPerThread, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + int64_t(V::size) <= hi; i += V::size)
      xsimd::max(V::load_unaligned(inp + i), V(0.0f)).store_unaligned(out + i);
    for (; i < hi; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
  });
}

// dx += x > 0 ? dy : 0
template <class Arch>
void relu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  using V = Vec<Arch>;
  parallel_for<Arch>(n, kMinElemsPerThread, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + int64_t(V::size) <= hi; i += V::size) {
      const V g = xsimd::select(V::load_unaligned(inp + i) > V(0.0f), V::load_unaligned(dout + i), V(0.0f));
      (V::load_unaligned(dinp + i) + g).store_unaligned(dinp + i);
    }
    for (; i < hi; ++i) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
  });
}

// Dropout's hash (ops::dropout_bits) for the Vec::size consecutive indices in `idx`, lane by lane:
// 32-bit integer multiplies and logical shifts, so every arch gives the reference's bits.
template <class Arch>
inline xsimd::batch<uint32_t, Arch> dropout_bits_vec(uint64_t seed, const xsimd::batch<uint32_t, Arch>& idx) {
  using U = xsimd::batch<uint32_t, Arch>;
  auto fmix32 = [](U h) {
    h ^= h >> 16;
    h *= U(0x85ebca6bu);
    h ^= h >> 13;
    h *= U(0xc2b2ae35u);
    h ^= h >> 16;
    return h;
  };
  const U h = fmix32(idx * U(0x9e3779b9u) + U(static_cast<uint32_t>(seed)));
  return fmix32(h ^ U(static_cast<uint32_t>(seed >> 32))) >> 8;
}

// Byte j of kBitsToBytes[b] is bit j of b: eight lanes' keep bits as eight 0/1 mask bytes.
inline constexpr std::array<uint64_t, 256> kBitsToBytes = [] {
  std::array<uint64_t, 256> t{};
  for (uint64_t b = 0; b < 256; ++b)
    for (int j = 0; j < 8; ++j) t[b] |= ((b >> j) & 1) << (8 * j);
  return t;
}();

// dst[j] = keep's lane j ? 1 : 0 for the Vec::size lanes: from the comparison's bit mask in one
// or two instructions where the arch has them (AVX-512's mask register to bytes; AVX and SSE2's
// movemask, then a table), else lane by lane. Stored one lane at a time from 32-bit lanes, the
// mask took two thirds of relu_dropout's forward (Cascade Lake, 4M elements: 11 ms, 4 without it).
template <class Arch>
inline void store_keep_bytes(uint8_t* dst, const xsimd::batch_bool<float, Arch>& keep) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  if constexpr (std::is_base_of_v<xsimd::avx512bw, Arch>) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_maskz_mov_epi8(keep.data, _mm_set1_epi8(1)));
    return;
  }
#endif
#if defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, Arch>) {
    const uint64_t bytes = kBitsToBytes[static_cast<unsigned>(_mm256_movemask_ps(keep.data))];
    std::memcpy(dst, &bytes, 8);
    return;
  }
#endif
#if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, Arch>) {
    const auto bytes = static_cast<uint32_t>(kBitsToBytes[static_cast<unsigned>(_mm_movemask_ps(keep.data))]);
    std::memcpy(dst, &bytes, 4);
    return;
  }
#endif
  using V = Vec<Arch>;
  using I = xsimd::batch<int32_t, Arch>;
  alignas(64) int32_t kept[V::size];
  xsimd::bitwise_cast<I>(xsimd::select(keep, xsimd::bitwise_cast<V>(I(1)), V(0.0f))).store_aligned(kept);
  for (size_t j = 0; j < V::size; ++j) dst[j] = static_cast<uint8_t>(kept[j]);
}

// Dropout: out_i = keep_i ? x_i * scale : 0 (keep_i also needs x_i > 0 with relu), mask_i = keep_i
// as a byte, the same on every arch as the reference. The hash runs on vectors of 32-bit lanes (the
// compiler left the plain loop scalar, control flow in it: 4.3 ns per element on an AVX2 Zen 3, a
// fifth of a dropout-0.1 training step of bench_train's config S). Threads take contiguous chunks;
// the mask of element i does not depend on the split.
template <class Arch>
void dropout_forward(float* out, uint8_t* mask, const float* inp, int64_t n, uint64_t seed,
                     uint32_t drop_below, float scale, bool relu, int64_t first) {
  using V = Vec<Arch>;
  using U = xsimd::batch<uint32_t, Arch>;
  using I = xsimd::batch<int32_t, Arch>;
  constexpr int64_t L = V::size;
  parallel_for<Arch>(n, kMinElemsPerThread / 4, [=](int64_t lo, int64_t hi, int) {
    alignas(64) uint32_t lane[L];
    for (int64_t j = 0; j < L; ++j) lane[j] = static_cast<uint32_t>(j);
    // Indices wrap modulo 2^32, as dropout_bits takes them.
    U idx = U(static_cast<uint32_t>(first + lo)) + U::load_aligned(lane);
    // The hash is below 2^24 and so is the threshold: both exact as floats.
    const V threshold(static_cast<float>(drop_below));
    const V vscale(scale), zero(0.0f);
    int64_t i = lo;
    for (; i + L <= hi; i += L, idx += U(static_cast<uint32_t>(L))) {
      const V x = V::load_unaligned(inp + i);
      const U bits = dropout_bits_vec<Arch>(seed, idx);
      auto keep = xsimd::to_float(xsimd::bitwise_cast<I>(bits)) >= threshold;
      if (relu) keep = keep && (x > zero);
      xsimd::select(keep, x * vscale, zero).store_unaligned(out + i);
      if (mask) store_keep_bytes<Arch>(mask + i, keep);
    }
    for (; i < hi; ++i) {
      bool keep = dropout_bits(seed, first + i) >= drop_below;
      if (relu) keep = keep && inp[i] > 0.0f;
      if (mask) mask[i] = keep;
      out[i] = keep ? inp[i] * scale : 0.0f;
    }
  });
}

template <class Arch>
void dropout_backward(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float scale,
                      bool overwrite) {
  parallel_for<Arch>(n, kMinElemsPerThread, [=](int64_t lo, int64_t hi, int) {
    float* __restrict dx = dinp;
    const float* __restrict dy = dout;
    const uint8_t* __restrict m = mask;
    // Branch-free (the mask is 0/1 bytes): a `m[i] ? scale : 0` select compiled to a branch on a
    // random mask in the threaded copy of this loop, 2-3x slower.
    if (overwrite)
      for (int64_t i = lo; i < hi; ++i) dx[i] = dy[i] * (static_cast<float>(m[i]) * scale);
    else
      for (int64_t i = lo; i < hi; ++i) dx[i] += dy[i] * (static_cast<float>(m[i]) * scale);
  });
}

inline constexpr float kInvSqrt2 = 0.70710678118654752440f;
inline constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
template <class Arch>
void gelu_forward(float* out, const float* inp, int64_t n) {
  using V = Vec<Arch>;
  parallel_for<Arch>(n, kMinElemsPerThread / 8, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + int64_t(V::size) <= hi; i += V::size) {
      const V x = V::load_unaligned(inp + i);
      (V(0.5f) * x * (V(1.0f) + xsimd::erf(x * V(kInvSqrt2)))).store_unaligned(out + i);
    }
    for (; i < hi; ++i) out[i] = 0.5f * inp[i] * (1.0f + std::erf(inp[i] * kInvSqrt2));
  });
}

// d gelu / dx = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
template <class Arch>
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  using V = Vec<Arch>;
  parallel_for<Arch>(n, kMinElemsPerThread / 8, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + int64_t(V::size) <= hi; i += V::size) {
      const V x = V::load_unaligned(inp + i);
      const V cdf = V(0.5f) * (V(1.0f) + xsimd::erf(x * V(kInvSqrt2)));
      const V pdf = V(kInvSqrt2Pi) * xsimd::exp(V(-0.5f) * x * x);
      xsimd::fma(V::load_unaligned(dout + i), xsimd::fma(x, pdf, cdf), V::load_unaligned(dinp + i))
          .store_unaligned(dinp + i);
    }
    for (; i < hi; ++i) {
      const float x = inp[i];
      const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
      dinp[i] += dout[i] * (cdf + x * kInvSqrt2Pi * std::exp(-0.5f * x * x));
    }
  });
}

inline constexpr float kSqrt2OverPi = 0.79788456080286535588f;
inline constexpr float kGeluTanhC = 0.044715f;

// gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + c x^3), c = 0.044715
template <class Arch>
void gelu_tanh_forward(float* out, const float* inp, int64_t n) {
  using V = Vec<Arch>;
  parallel_for<Arch>(n, kMinElemsPerThread / 8, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + int64_t(V::size) <= hi; i += V::size) {
      const V x = V::load_unaligned(inp + i);
      const V u = V(kSqrt2OverPi) * xsimd::fma(V(kGeluTanhC) * x * x, x, x);
      (V(0.5f) * x * (V(1.0f) + xsimd::tanh(u))).store_unaligned(out + i);
    }
    for (; i < hi; ++i) {
      const float x = inp[i];
      out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kGeluTanhC * x * x * x)));
    }
  });
}

// d gelu_tanh / dx = (1 + t) / 2 + x (1 - t^2) sqrt(2 / pi) (1 + 3 c x^2) / 2, t = tanh(u)
template <class Arch>
void gelu_tanh_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  using V = Vec<Arch>;
  parallel_for<Arch>(n, kMinElemsPerThread / 8, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + int64_t(V::size) <= hi; i += V::size) {
      const V x = V::load_unaligned(inp + i);
      const V x2 = x * x;
      const V t = xsimd::tanh(V(kSqrt2OverPi) * xsimd::fma(V(kGeluTanhC) * x2, x, x));
      const V du = V(kSqrt2OverPi) * xsimd::fma(V(3.0f * kGeluTanhC), x2, V(1.0f));
      const V d = V(0.5f) * xsimd::fma(x * xsimd::fnma(t, t, V(1.0f)), du, V(1.0f) + t);
      xsimd::fma(V::load_unaligned(dout + i), d, V::load_unaligned(dinp + i)).store_unaligned(dinp + i);
    }
    for (; i < hi; ++i) {
      const float x = inp[i];
      const float t = std::tanh(kSqrt2OverPi * (x + kGeluTanhC * x * x * x));
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluTanhC * x * x);
      dinp[i] += dout[i] * 0.5f * ((1.0f + t) + x * (1.0f - t * t) * du);
    }
  });
}

// y[0:n] += alpha * x[0:n] (the body shared by bias_add, axpy and the reductions below)
template <class Arch>
inline void axpy_row(float* y, const float* x, float alpha, int64_t n) {
  using V = Vec<Arch>;
  int64_t i = 0;
  for (; i + int64_t(V::size) <= n; i += V::size)
    xsimd::fma(V(alpha), V::load_unaligned(x + i), V::load_unaligned(y + i)).store_unaligned(y + i);
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// out[r, :] += bias
template <class Arch>
void bias_add(float* out, const float* bias, int64_t rows, int64_t cols) {
  parallel_for<Arch>(rows, kMinElemsPerThread / (cols + 1) + 1, [&](int64_t lo, int64_t hi, int) {
    for (int64_t r = lo; r < hi; ++r) axpy_row<Arch>(out + r * cols, bias, 1.0f, cols);
  });
}

// dbias += sum over rows of dout: each thread sums its rows into a partial row, then the partials
// are added in thread order (deterministic for a given thread count).
template <class Arch>
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t cols) {
  const int64_t min_rows = kMinElemsPerThread / (cols + 1) + 1;
  const int nt = parallel_threads<Arch>(rows, min_rows);
  float* partial = scratch<Arch, Slot::partial>(static_cast<std::size_t>(nt * cols));
  for (int64_t i = 0; i < nt * cols; ++i) partial[i] = 0.0f;
  parallel_for<Arch>(rows, min_rows, [&](int64_t lo, int64_t hi, int t) {
    for (int64_t r = lo; r < hi; ++r) axpy_row<Arch>(partial + t * cols, dout + r * cols, 1.0f, cols);
  });
  for (int t = 0; t < nt; ++t) axpy_row<Arch>(dbias, partial + t * cols, 1.0f, cols);
}

template <class Arch>
void axpy(float* y, const float* x, float alpha, int64_t n) {
  parallel_for<Arch>(n, kMinElemsPerThread,
                     [&](int64_t lo, int64_t hi, int) { axpy_row<Arch>(y + lo, x + lo, alpha, hi - lo); });
}

template <class Arch>
void add(float* out, const float* a, const float* b, int64_t n) {
  using V = Vec<Arch>;
  parallel_for<Arch>(n, kMinElemsPerThread, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + int64_t(V::size) <= hi; i += V::size)
      (V::load_unaligned(a + i) + V::load_unaligned(b + i)).store_unaligned(out + i);
    for (; i < hi; ++i) out[i] = a[i] + b[i];
  });
}

template <class Arch>
void copy(float* out, const float* x, int64_t n) {
  parallel_for<Arch>(n, kMinElemsPerThread, [&](int64_t lo, int64_t hi, int) {
    if (hi > lo) std::memcpy(out + lo, x + lo, sizeof(float) * static_cast<std::size_t>(hi - lo));
  });
}

template <class Arch>
void scale(float* out, const float* x, float s, int64_t n) {
  using V = Vec<Arch>;
  parallel_for<Arch>(n, kMinElemsPerThread, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + int64_t(V::size) <= hi; i += V::size)
      (V::load_unaligned(x + i) * V(s)).store_unaligned(out + i);
    for (; i < hi; ++i) out[i] = x[i] * s;
  });
}

template <class Arch>
void fill(float* out, float value, int64_t n) {
  using V = Vec<Arch>;
  parallel_for<Arch>(n, kMinElemsPerThread, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + int64_t(V::size) <= hi; i += V::size) V(value).store_unaligned(out + i);
    for (; i < hi; ++i) out[i] = value;
  });
}

// sum x^2 in double: float lanes over blocks of 1024 elements (error ~1e-7 relative per block),
// blocks and threads added in double.
template <class Arch>
double sum_squares_serial(const float* x, int64_t n) {
  using V = Vec<Arch>;
  constexpr int64_t kBlock = 1024;
  double s = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    V acc(0.0f);
    int64_t i = b;
    for (; i + int64_t(V::size) <= e; i += V::size) {
      const V v = V::load_unaligned(x + i);
      acc = xsimd::fma(v, v, acc);
    }
    float tail = 0.0f;
    for (; i < e; ++i) tail += x[i] * x[i];
    s += static_cast<double>(hsum<Arch>(acc)) + tail;
  }
  return s;
}

template <class Arch>
double sum_squares(const float* x, int64_t n) {
  constexpr int kMaxThreads = 256;
  if (parallel_threads<Arch>(n, kMinElemsPerThread) > kMaxThreads) return sum_squares_serial<Arch>(x, n);
  double partial[kMaxThreads] = {};
  parallel_for<Arch>(n, kMinElemsPerThread, [&](int64_t lo, int64_t hi, int t) {
    partial[t] = sum_squares_serial<Arch>(x + lo, hi - lo);
  });
  double s = 0.0;
  for (double p : partial) s += p;
  return s;
}

// Adam / AdamW (see AdamParams). With bias corrections bc1 = 1 - b1^t, bc2 = 1 - b2^t:
//   p -= lr * (m / bc1) / (sqrt(v / bc2) + eps)  ==  p -= (lr / bc1) * m / (sqrt(v) * (1 / sqrt(bc2)) + eps)
template <class Arch>
void adam_update(float* param, float* m, float* v, const float* grad, int64_t n, const AdamParams& p) {
  using V = Vec<Arch>;
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  const float step = static_cast<float>(p.lr / bc1), inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float l2 = p.decoupled ? 0.0f : p.weight_decay;                    // Adam: g += wd * p
  const float shrink = p.decoupled ? 1.0f - p.lr * p.weight_decay : 1.0f;  // AdamW: p -= lr * wd * p
  const float b1 = p.beta1, b2 = p.beta2, c1 = 1.0f - p.beta1, c2 = 1.0f - p.beta2, gs = p.grad_scale;
  parallel_for<Arch>(n, kMinElemsPerThread / 4, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + int64_t(V::size) <= hi; i += V::size) {
      V w = V::load_unaligned(param + i);
      const V g = xsimd::fma(V(l2), w, V::load_unaligned(grad + i) * V(gs));
      w = w * V(shrink);
      const V mi = xsimd::fma(V(b1), V::load_unaligned(m + i), V(c1) * g);
      const V vi = xsimd::fma(V(b2), V::load_unaligned(v + i), V(c2) * g * g);
      mi.store_unaligned(m + i);
      vi.store_unaligned(v + i);
      const V denom = xsimd::fma(xsimd::sqrt(vi), V(inv_sqrt_bc2), V(p.eps));
      (w - V(step) * mi / denom).store_unaligned(param + i);
    }
    for (; i < hi; ++i) {
      const float g = grad[i] * gs + l2 * param[i];
      const float w = param[i] * shrink;
      m[i] = b1 * m[i] + c1 * g;
      v[i] = b2 * v[i] + c2 * g * g;
      param[i] = w - step * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + p.eps);
    }
  });
}

}  // namespace tg::ops::simd
