// Shared pieces of the xsimd kernel bodies (ops/simd/*.hpp).
//
// Every function in ops/simd is a template on the xsimd arch tag and is instantiated only in that
// arch's TU (ops/arch_*.cpp), compiled with that arch's flags. Helpers are templates on Arch too,
// even when their body does not use it: a non-template inline helper (or a std:: template such as
// std::vector<float>) compiled in several TUs with different -m flags is one symbol to the linker,
// which may keep the AVX-512 copy and call it from the SSE2 path on a CPU without AVX-512.
#pragma once

#include <omp.h>
#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <new>
#include <type_traits>

#include "ops/kernels.hpp"

// each arch's intrinsics, for the per-arch branches of the kernels (a TU instantiates only its own)
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace tg::ops::simd {

template <class Arch>
using Vec = xsimd::batch<float, Arch>;
template <class Arch>
using IVec = xsimd::batch<int32_t, Arch>;

// Sum / max of the lanes. xsimd 8.1 has hadd (needs AVX512DQ on avx512, see docs/TOOLCHAIN.md) but no hmax
// (AVX-512: GCC's reduce intrinsic; elsewhere through memory).
template <class Arch>
inline float hsum(const Vec<Arch>& v) {
  return xsimd::hadd(v);
}
template <class Arch>
inline float hmax(const Vec<Arch>& v) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) return _mm512_reduce_max_ps(v);  // a shuffle tree
  alignas(64) float lanes[Vec<Arch>::size];
  v.store_aligned(lanes);
  float m = lanes[0];
  for (std::size_t i = 1; i < Vec<Arch>::size; ++i) m = lanes[i] > m ? lanes[i] : m;
  return m;
}

// The first n (0 < n < lanes) floats at p as a vector, `fill` in the other lanes; and the first n
// lanes of v stored at p. Nothing past p[n - 1] is read or written. AVX-512 by masked moves, AVX2
// by a masked load and a store in pieces; elsewhere through a buffer. A row's tail copied through a buffer
// element by element and read back as a vector stalls on store forwarding: on the causal rows of an attention
// block (1 to 64 keys), the tails took about half of the exps' time (Cascade Lake).
#if defined(__AVX2__)
// AVX2's masked moves take the mask as a vector: all ones in lanes 0 .. n - 1.
template <class Arch>
inline __m256i lanes_below(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif
template <class Arch>
inline Vec<Arch> load_partial(const float* p, int64_t n, float fill) {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>)
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), static_cast<__mmask16>((1u << n) - 1u), p);
#endif
#if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, Arch>) {
    const __m256i m = lanes_below<Arch>(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
#endif
  alignas(64) float buf[Vec<Arch>::size];
  for (int64_t j = 0; j < int64_t(Vec<Arch>::size); ++j) buf[j] = j < n ? p[j] : fill;
  return Vec<Arch>::load_aligned(buf);
}
template <class Arch>
inline void store_partial(float* p, const Vec<Arch>& v, int64_t n) {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v);
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, Arch>) {
    // In pieces of 4, 2 and 1 lanes, not by VMASKMOVPS: AMD cores microcode its store form (Zen 3:
    // 3.8 ns per 6-lane store against 0.7 ns in pieces, 2026-11-27), which made packing the GEMM's
    // 6-row A panels (one such store per k) cost more than the stores of the panel's data.
    const __m256 x = v;
    if (n >= 8) return _mm256_storeu_ps(p, x);
    __m128 part = _mm256_castps256_ps128(x);
    if (n >= 4) {
      _mm_storeu_ps(p, part);
      part = _mm256_extractf128_ps(x, 1);
      p += 4, n -= 4;
    }
    if (n >= 2) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_castps_si128(part));
      part = _mm_movehl_ps(part, part);
      p += 2, n -= 2;
    }
    if (n >= 1) _mm_store_ss(p, part);
    return;
  }
#endif
  alignas(64) float buf[Vec<Arch>::size];
  v.store_aligned(buf);
  for (int64_t j = 0; j < n; ++j) p[j] = buf[j];
}

// Per-thread scratch memory, 64-byte aligned, grown on demand and kept for the thread's life, so a
// training step does not allocate after its first call. Slot tells buffers of one thread apart.
// Kernels take scratch on the calling thread, before any parallel region opens, and hand each
// thread a slice: an exception escaping an OpenMP region calls std::terminate, so running out of
// memory must throw where the caller can catch it. Requests above testing::scratch_limit() throw
// std::bad_alloc as if memory had run out (a test seam; no limit by default).
enum class Slot { gemm, gemm_bf16, row, partial, attention };
template <class Arch, Slot S>
float* scratch(std::size_t n) {
  struct Buffer {
    float* p = nullptr;
    std::size_t n = 0;
    ~Buffer() { std::free(p); }
  };
  static thread_local Buffer buf;
  const std::size_t limit = testing::scratch_limit();
  if (limit != 0 && n > limit / sizeof(float)) throw std::bad_alloc();
  if (buf.n < n) {
    std::free(buf.p);
    const std::size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    buf.p = static_cast<float*>(std::aligned_alloc(64, bytes));
    buf.n = buf.p ? n : 0;
    if (!buf.p) throw std::bad_alloc();
  }
  return buf.p;
}

// Calls f(lo, hi, t) on contiguous chunks of [0, n), one per OpenMP thread t, when each thread gets
// at least min_per_thread items; otherwise f(0, n, 0) on the calling thread (a parallel region costs
// about a microsecond, more than a small kernel). Chunk borders are multiples of 16 so every
// chunk but the last runs whole SIMD batches. f should not throw (scratch is taken before); if it
// does, the first exception is rethrown on the calling thread after the region instead of
// terminating the program.
template <class Arch, class F>
void parallel_for(int64_t n, int64_t min_per_thread, F&& f) {
  const int64_t max_threads = omp_get_max_threads();
  if (max_threads < 2 || n < 2 * min_per_thread || omp_in_parallel()) {
    f(int64_t{0}, n, 0);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = ((n + nt - 1) / nt + 15) / 16 * 16;
    const int64_t lo = t * chunk < n ? t * chunk : n;
    const int64_t hi = lo + chunk < n ? lo + chunk : n;
    try {
      if (lo < hi) f(lo, hi, static_cast<int>(t));
    } catch (...) {
#pragma omp critical(tg_ops_parallel_for_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// The number of chunks (threads) parallel_for will use for n items: t < parallel_threads(...).
template <class Arch>
int parallel_threads(int64_t n, int64_t min_per_thread) {
  const int max_threads = omp_get_max_threads();
  if (max_threads < 2 || n < 2 * min_per_thread || omp_in_parallel()) return 1;
  return max_threads;
}

}  // namespace tg::ops::simd
