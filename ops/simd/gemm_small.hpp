// GEMM for few rows, without packing: each row of C straight from the operands. Called by the
// driver (ops/simd/gemm.hpp) per batch entry, for M <= GemmTraits::small_m, or, with op(B) = B^T
// and a long K, M <= small_m_trans_b (gemm_traits.hpp has the measurements); and by the bf16
// widen driver (gemm_bf16.hpp) for ops::bf16_few_rows (gemm_bf16_small_m below), and by gemm_int8
// (gemm.hpp) for a weight in int8 tiles (int8_products below).
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ops/kernels.hpp"
#include "ops/simd/bf16.hpp"
#include "ops/simd/common.hpp"
#include "ops/simd/gemm_plan.hpp"
#include "ops/simd/gemm_traits.hpp"

namespace tg::ops::simd {

// Few rows (one decoding step's projections, a small batch of them, attention of one new query):
// packing op(B) would cost more than the product, so C comes straight from the operands.
//  - op(B) = B^T stored N x K (a Linear weight): C[i, j] is a dot product of two contiguous
//    K-vectors, computed R rows of op(A) x 4 columns at a time (dot_tile): each K step loads R + 4
//    vectors for 4R multiply-adds (one row at a time would load 5 for 4, bound by the loads).
//    B may be bf16 (gemm_bf16_small_m: decoding against bf16 weights), widened as it is loaded.
//    An int8 weight (gemm_int8) is read in its own tiles (int8_tile below) with the same loads.
//  - op(B) = B stored K x N: C[i, :] accumulates rows of B scaled by op(A)[i, k] (axpy), in a
//    scratch row, then merged into C with alpha, beta and the bias (as is each dot product).
// The columns [j0, j1) of C: the driver splits a large product's columns across threads.
// ws: small_m_workspace(g) floats, owned by the calling thread (allocated before any parallel region).
template <class Arch>
std::size_t small_m_workspace(const Gemm& g) {
  const int64_t rows = g.trans_b ? GemmTraits<Arch>::small_dot_rows : 1;
  return static_cast<std::size_t>(rows * g.K + (g.trans_b ? 0 : g.N) + 15) / 16 * 16;
}

// C = alpha op(A) op(B) + beta C (+ bias), element by element: v = (op(A) op(B))[i, j]. A copy of
// Gemm's fields, so that the compiler need not reload them after every store to C (which, for all
// it knows, could alias them).
template <class Arch>
struct SmallStore {
  float alpha, beta;
  const float* bias;
  int64_t ldc;
  explicit SmallStore(const Gemm& g) : alpha(g.alpha), beta(g.beta), bias(g.bias), ldc(g.ldc) {}
  void operator()(float* C, int64_t i, int64_t j, float v) const {
    float& c = C[i * ldc + j];
    c = alpha * v + (beta == 0.0f ? 0.0f : beta * c) + (bias ? bias[j] : 0.0f);
  }
};

// op(B)'s stored values as fp32: fp32 as is, bf16 bits widened (exact).
template <class Arch>
inline Vec<Arch> load_b(const float* p) {
  return Vec<Arch>::load_unaligned(p);
}
template <class Arch>
inline Vec<Arch> load_b(const uint16_t* p) {
  return load_bf16<Arch>(p);
}
// int8 values (a weight's int8 tiles, gemm_int8), sign-extended to 32 bits and converted (exact).
template <class Arch>
inline Vec<Arch> load_b(const int8_t* p) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<Arch, xsimd::avx512bw>) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  } else if constexpr (std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  } else if constexpr (std::is_same_v<Arch, xsimd::sse2>) {
    int32_t four;
    std::memcpy(&four, p, sizeof four);
    __m128i x = _mm_cvtsi32_si128(four);
    x = _mm_unpacklo_epi8(x, x);  // byte i in all four bytes of lane i, then its sign from the top
    return _mm_cvtepi32_ps(_mm_srai_epi32(_mm_unpacklo_epi16(x, x), 24));
  } else {
    static_assert(!std::is_same_v<Arch, Arch>, "load_b: no int8 widening for this arch");
  }
#elif defined(__aarch64__)
  static_assert(std::is_same_v<Arch, xsimd::neon64>, "load_b: no int8 widening for this arch");
  int32_t four;
  std::memcpy(&four, p, sizeof four);
  const int16x8_t w = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(four)));
  return vcvtq_f32_s32(vmovl_s16(vget_low_s16(w)));
#endif
}
template <class Arch, class BT>
inline float value_of(const BT* p, int64_t i) {
  if constexpr (std::is_same_v<BT, uint16_t>)
    return bf16_value<Arch>(p[i]);
  else
    return static_cast<float>(p[i]);
}

// Rows i0 .. i0+R-1 of C (their op(A) rows at a[0..R-1], contiguous), columns j .. j+NC-1,
// against B^T stored N x K (BT: float, or uint16_t for bf16 bits): R x NC accumulators, each summed across
// its lanes at the end. (Not with xsimd 8.1's haddp, which reduces a vector's worth of accumulators at once:
// its AVX-512 version returned the sums in the wrong lanes here; docs/TOOLCHAIN.md.)
template <class Arch, int R, int NC, class BT>
[[gnu::always_inline]] inline void dot_tile(float* C, const float* const* a, const BT* B, const Gemm& g,
                                            int64_t i0, int64_t j) {
  using V = Vec<Arch>;
  constexpr int64_t L = V::size;
  constexpr int T = R * NC;
  const int64_t K = g.K;
  const SmallStore<Arch> store(g);
  const BT* b[NC];
  const BT* next[NC];  // the rows of the next tile, where there is one
  for (int c = 0; c < NC; ++c) {
    b[c] = B + (j + c) * g.ldb;
    next[c] = j + NC + c < g.N ? b[c] + NC * g.ldb : b[c];
  }
  V s[T];
  for (int t = 0; t < T; ++t) s[t] = V(0.0f);
  int64_t k = 0;
  for (; k + L <= K; k += L) {
    V bv[NC];
    // The next tile's rows at the same offset: B comes from memory (a weight read once per call),
    // and the hardware prefetcher alone left one core at 7 of its 10 GB/s on a bf16 B (Xeon
    // Cascade Lake, GPT-2's head: bench_kernels --filter decode).
    for (int c = 0; c < NC; ++c) __builtin_prefetch(next[c] + k);
    for (int c = 0; c < NC; ++c) bv[c] = load_b<Arch>(b[c] + k);
    for (int r = 0; r < R; ++r) {
      const V av = V::load_unaligned(a[r] + k);
      for (int c = 0; c < NC; ++c) s[r * NC + c] = xsimd::fma(av, bv[c], s[r * NC + c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) {
      float v = hsum<Arch>(s[r * NC + c]);
      for (int64_t kk = k; kk < K; ++kk) v += a[r][kk] * value_of<Arch>(b[c], kk);
      store(C, i0 + r, j + c, v);
    }
}

// Rows i0 .. i0+R-1 of C, columns [j0, j1): 4-column tiles, then the 1-3 columns left one by one.
template <class Arch, int R, class BT>
void dot_rows(float* C, const float* const* a, const BT* B, const Gemm& g, int64_t i0, int64_t j0,
              int64_t j1) {
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) dot_tile<Arch, R, 4>(C, a, B, g, i0, j);
  for (; j < j1; ++j) dot_tile<Arch, R, 1>(C, a, B, g, i0, j);
}

// f(std::integral_constant<int, rows>{}) for rows 1 .. small_dot_rows: a group of rows as a compile-time
// count.
template <class Arch, class F>
void with_row_count(int64_t rows, F&& f) {
  constexpr int64_t RG = GemmTraits<Arch>::small_dot_rows;
  switch (rows) {
    case 1:
      f(std::integral_constant<int, 1>{});
      break;
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    case 3:
      if constexpr (RG >= 3) f(std::integral_constant<int, 3>{});
      break;
    default:
      if constexpr (RG >= 4) f(std::integral_constant<int, 4>{});
      break;
  }
}

// The same for rows i0 .. i0+rows-1, rows <= small_dot_rows.
template <class Arch, class BT>
void dot_rows(float* C, const float* const* a, const BT* B, const Gemm& g, int64_t i0, int64_t rows,
              int64_t j0, int64_t j1) {
  with_row_count<Arch>(rows, [&](auto r) { dot_rows<Arch, decltype(r)::value>(C, a, B, g, i0, j0, j1); });
}

// C's columns [j0, j1) against B^T (BT as dot_tile's), every row of op(A)
// in groups of small_dot_rows: each row in place, or, A transposed, gathered into ws.
template <class Arch, class BT>
void dot_products(float* C, const float* A, const BT* B, const Gemm& g, float* ws, int64_t j0, int64_t j1) {
  constexpr int64_t RG = GemmTraits<Arch>::small_dot_rows;
  for (int64_t i0 = 0; i0 < g.M; i0 += RG) {
    const int64_t rows = std::min(RG, g.M - i0);
    const float* a[RG];
    for (int64_t r = 0; r < rows; ++r) {
      a[r] = A + (i0 + r) * g.lda;
      if (g.trans_a) {  // op(A)[i, k] = A[k * lda + i]: gather the row
        float* row = ws + r * g.K;
        for (int64_t k = 0; k < g.K; ++k) row[k] = A[k * g.lda + i0 + r];
        a[r] = row;
      }
    }
    dot_rows<Arch>(C, a, B, g, i0, rows, j0, j1);
  }
}

// A weight in int8 tiles (kernels.hpp: int8_offset): rows i0 .. i0+R-1 of C (their op(A) rows at
// a[0..R-1], zero-padded to int8_padded_k(K)) against the tile at `tile`, C's columns j .. j+nc-1
// (nc <= 4; the tile's rows past N are zeros). The tile is one sequential stream of 64-value chunks,
// four rows' chunks in turn: R x 4 accumulators, each column's sum times its scale at the end.
template <class Arch, int R>
[[gnu::always_inline]] inline void int8_tile(float* C, const float* const* a, const int8_t* tile,
                                             const Gemm& g, int64_t i0, int64_t j, int64_t nc,
                                             const float* scale) {
  using V = Vec<Arch>;
  constexpr int64_t L = V::size;
  constexpr int NC = static_cast<int>(int8_tile_rows);
  const int64_t Kp = int8_padded_k(g.K);
  const SmallStore<Arch> store(g);
  V s[R * NC];
  for (int t = 0; t < R * NC; ++t) s[t] = V(0.0f);
  for (int64_t kb = 0; kb < Kp; kb += int8_chunk) {
    const int8_t* blk = tile + kb * NC;
    // 1 KiB ahead in the stream, a line per chunk (past the weight's end at the last tiles: a
    // prefetch does not fault, and the address is formed as an integer, not a pointer past q). The
    // hardware prefetchers alone left the stream at 16.5 of the 19.0 GB/s this reached on two Zen 3
    // cores in a hand-written driver (bench/results/sample_gpt2_int8_kept_2026-11-29_zen3.txt).
    const auto ahead = reinterpret_cast<std::uintptr_t>(blk) + 1024;
    for (int c = 0; c < NC; ++c) __builtin_prefetch(reinterpret_cast<const void*>(ahead + c * int8_chunk));
    for (int64_t sub = 0; sub < int8_chunk; sub += L) {
      V bv[NC];
      for (int c = 0; c < NC; ++c) bv[c] = load_b<Arch>(blk + c * int8_chunk + sub);
      for (int r = 0; r < R; ++r) {
        const V av = V::load_unaligned(a[r] + kb + sub);
        for (int c = 0; c < NC; ++c) s[r * NC + c] = xsimd::fma(av, bv[c], s[r * NC + c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; c < nc; ++c) store(C, i0 + r, j + c, hsum<Arch>(s[r * NC + c]) * scale[j + c]);
}

template <class Arch, int R>
void int8_tiles(float* C, const float* const* a, const Int8Rows& B, const Gemm& g, int64_t i0, int64_t j0,
                int64_t j1) {
  const int64_t tile_bytes = int8_tile_rows * int8_padded_k(g.K);
  for (int64_t j = j0; j < j1; j += int8_tile_rows)
    int8_tile<Arch, R>(C, a, B.q + (j / int8_tile_rows) * tile_bytes, g, i0, j,
                       std::min(int8_tile_rows, j1 - j), B.scale);
}

// The words per thread int8_products needs: small_dot_rows rows of op(A), zero-padded.
template <class Arch>
std::size_t int8_workspace(const Gemm& g) {
  return static_cast<std::size_t>(GemmTraits<Arch>::small_dot_rows * int8_padded_k(g.K) + 15) / 16 * 16;
}

// C's columns [j0, j1) (j0 a whole tile: few_rows_run's column chunks are multiples of 16) against a
// weight in int8 tiles, every row of op(A) in groups of
// small_dot_rows, each copied into ws with zeros to the padded K (ws: int8_workspace(g) floats).
template <class Arch>
void int8_products(float* C, const float* A, const Int8Rows& B, const Gemm& g, float* ws, int64_t j0,
                   int64_t j1) {
  constexpr int64_t RG = GemmTraits<Arch>::small_dot_rows;
  const int64_t Kp = int8_padded_k(g.K);
  for (int64_t i0 = 0; i0 < g.M; i0 += RG) {
    const int64_t rows = std::min(RG, g.M - i0);
    const float* a[RG];
    for (int64_t r = 0; r < rows; ++r) {
      float* row = ws + r * Kp;
      for (int64_t k = 0; k < g.K; ++k) row[k] = g.trans_a ? A[k * g.lda + i0 + r] : A[(i0 + r) * g.lda + k];
      std::fill(row + g.K, row + Kp, 0.0f);
      a[r] = row;
    }
    with_row_count<Arch>(rows, [&](auto r) { int8_tiles<Arch, decltype(r)::value>(C, a, B, g, i0, j0, j1); });
  }
}

template <class Arch>
void gemm_small_m(float* C, const float* A, const float* B, const Gemm& g, float* ws, int64_t j0,
                  int64_t j1) {
  using V = Vec<Arch>;
  constexpr int64_t L = V::size;
  const int64_t M = g.M, K = g.K;
  if (g.trans_b) return dot_products<Arch>(C, A, B, g, ws, j0, j1);
  const SmallStore<Arch> store(g);
  float* arow = ws;       // op(A)'s row i when A is transposed
  float* acc = arow + K;  // the accumulated row
  const int64_t n = j1 - j0;
  for (int64_t i = 0; i < M; ++i) {
    const float* a = A + i * g.lda;
    if (g.trans_a) {
      for (int64_t k = 0; k < K; ++k) arow[k] = A[k * g.lda + i];
      a = arow;
    }
    std::fill_n(acc, n, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const V av(a[k]);
      const float* bk = B + k * g.ldb + j0;
      int64_t j = 0;
      for (; j + L <= n; j += L)
        xsimd::fma(av, V::load_unaligned(bk + j), V::load_unaligned(acc + j)).store_unaligned(acc + j);
      for (; j < n; ++j) acc[j] += a[k] * bk[j];
    }
    for (int64_t j = 0; j < n; ++j) store(C, i, j0 + j, acc[j]);
  }
}

// gemm_bf16 for few rows against a transposed bf16 B (one decoding step against weights kept in bf16:
// ops::bf16_few_rows): op(A)'s rows rounded to bf16 (their fp32 values) into ws, then the dot tiles
// above with B's rows widened as they are loaded. Memory-bound like gemm_small_m, on half the bytes.
// ws: small_m_workspace(g) floats. Only the widen kernel's driver calls it (WidenKernel::few_rows_path;
// the dot-product tables send these products to the widen table: ops/dispatch.cpp), so no TU compiled
// with the bf16 flags instantiates anything here.
template <class Arch>
void gemm_bf16_small_m(float* C, const Operand& A, const uint16_t* B, const Gemm& g, float* ws, int64_t j0,
                       int64_t j1) {
  constexpr int64_t RG = GemmTraits<Arch>::small_dot_rows;
  const int64_t K_ = g.K;
  for (int64_t i0 = 0; i0 < g.M; i0 += RG) {
    const int64_t rows = std::min(RG, g.M - i0);
    const float* a[RG];
    for (int64_t r = 0; r < rows; ++r) {
      float* row = ws + r * K_;
      for (int64_t k = 0; k < K_; ++k) {  // op(A)[i, k]
        const int64_t at = g.trans_a ? k * g.lda + i0 + r : (i0 + r) * g.lda + k;
        row[k] = A.dtype == DType::bf16 ? bf16_value<Arch>(static_cast<const uint16_t*>(A.data)[at])
                                        : round_to_bf16<Arch>(static_cast<const float*>(A.data)[at]);
      }
      a[r] = row;
    }
    dot_rows<Arch>(C, a, B, g, i0, rows, j0, j1);
  }
}

// Runs part(b, ws, j0, j1) on every batch entry b, for its columns [j0, j1), as threading th says:
// entries one per thread (th.batch), or one large product's columns split across the threads
// (th.inside), or all on the calling thread. Each thread gets its own `per` floats of ws, which
// holds few_rows_slices(th) of them (allocated before any parallel region). Tag: the caller's arch
// or kernel, so that each arch TU keeps its own copy (as line_floats in gemm_plan.hpp).
template <class Tag>
int few_rows_slices(const Threading& th) {
  return std::max(th.batch_threads, th.inside && !th.batch ? th.max_threads : 1);
}
template <class Tag, class F>
void few_rows_run(const Gemm& g, const Threading& th, float* ws, std::size_t per, F&& part) {
  if (th.inside && !th.batch) {
    for (int64_t b = 0; b < g.batch; ++b) {
#pragma omp parallel num_threads(th.max_threads)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t chunk = ((g.N + nt - 1) / nt + 15) / 16 * 16;  // whole dot tiles and vectors
        const int64_t j0 = std::min(g.N, t * chunk), j1 = std::min(g.N, j0 + chunk);
        if (j0 < j1) part(b, ws + static_cast<std::size_t>(t) * per, j0, j1);
      }
    }
  } else if (th.batch) {
#pragma omp parallel for schedule(static) num_threads(th.batch_threads)
    for (int64_t b = 0; b < g.batch; ++b)
      part(b, ws + static_cast<std::size_t>(omp_get_thread_num()) * per, 0, g.N);
  } else {
    for (int64_t b = 0; b < g.batch; ++b) part(b, ws, 0, g.N);
  }
}

}  // namespace tg::ops::simd
