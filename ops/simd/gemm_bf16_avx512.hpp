// The bf16 GEMM kernel on AVX512_BF16's vdpbf16ps, for the gemm_bf16 driver (gemm_bf16.hpp).
// Included only by ops/arch_avx512_bf16.cpp, compiled with the avx512 flags plus -mavx512bf16 and
// entered only when CPUID reports AVX512_BF16 (ops/dispatch.cpp): an AVX-512 CPU without it
// (Skylake-X, Ice Lake) never runs a line of this file. Everything here is in an anonymous
// namespace, so no function compiled with -mavx512bf16 is shared with another TU.
//
// vdpbf16ps (_mm512_dpbf16_ps) takes 32 bf16 per operand as 16 (even, odd) pairs and adds
//   acc[l] += a[2l] * b[2l] + a[2l+1] * b[2l+1]           (l = 0..15, fp32 lanes)
// so K is packed in pairs: packed B holds, per k pair q, NR 32-bit lanes (B[2q, j], B[2q+1, j]) for
// the NR columns j of a panel (two zmm for NR = 32); packed A holds one 32-bit pair
// (A[i, 2q], A[i, 2q+1]) per row, broadcast to all 16 lanes. Per k pair the micro-kernel loads 2 B
// vectors and issues MR x 2 vdpbf16ps, the fp32 kernel's MR x NR = 12 x 32 tile and instruction
// count per k pair, so twice the multiply-adds per instruction. An odd K is padded with a zero
// pair half (k = K reads 0 from both operands).
//
// Conversion: fp32 operands are rounded with vcvtne2ps2bf16 (round to nearest even; it flushes
// denormals to zero, as vdpbf16ps itself treats denormal inputs as zero). Layouts of packed A:
//   trans_a (A stored K x M): MR-row panels, pair-major: panel[q * MR + i] (two stored rows 2q and
//            2q+1 interleaved, as B's panels are built)
//   else (A stored M x K):  rows of the block, row-major: block[i * P + q], P = KC / 2 + 16 pairs per
//            row (each row converted contiguously, no transpose); the micro-kernel broadcasts at
//            fixed offsets i * P from one pointer.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "ops/simd/gemm_bf16.hpp"
#include "ops/simd/gemm_bf16_x86.hpp"

namespace tg::ops::simd {
namespace {

struct Avx512DotKernel {
  static constexpr bool few_rows_path = false;  // the table sends them to the widen kernel
  // Threaded products with few row blocks (the weight gradients) are cut into a grid
  // (gemm_bf16.hpp, bf16_split_2d). Grid costs per k: a 12 x 32 tile is 12 cycles of vdpbf16ps,
  // an element packed about 1 (fp32 from L3 or memory, rounded).
  static constexpr Split2d split_2d = Split2d::few_row_blocks;
  static constexpr double grid_tile_cost = 12.0, grid_pack_cost = 1.0;
  static void begin_thread() {}
  static constexpr int MR = 12, NR = 32;  // 24 zmm accumulators + 2 B vectors
  static constexpr int64_t MC = 264, KC = 512, NC = 4096;
  // Row stride (pairs) of a row-major packed A block: KC / 2 pairs plus one 64-byte line, so that
  // rows are not a multiple of 1 KiB apart. At exactly KC / 2 (1 KiB) the 12 rows of a panel fall on
  // 4 of L1's 64 sets, and packing a block with a short K (attention: K = 64, 128 bytes per row)
  // evicts itself (perf: 19% of a batch of 32 x 32 x 64 products in that packing, 73% of it on
  // the loads).
  static constexpr int64_t P = KC / 2 + 16;

  static int64_t pairs(int64_t kc) { return (kc + 1) / 2; }
  static int64_t a_block_floats(int64_t mc, int64_t /*kc*/) { return (mc + MR - 1) / MR * MR * P; }
  static int64_t b_panel_floats(int64_t kc) { return NR * pairs(kc); }

  // A's source rows are prefetched this many rows ahead of the ones being converted (a transposed
  // A: the next kTransPairs pairs of stored rows, while a pass converts kTransPairs pairs): op(A)
  // comes from L3 or memory, and each row of a block starts a new page, so the hardware prefetchers lag.
  static constexpr int64_t kPackAhead = 4;
  static constexpr int64_t kTransPairs = 8;  // pairs of stored rows per pass of a transposed A
  template <class Src>
  static void pack_a_typed(uint32_t* dst, const Src* a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
    const int64_t np = pairs(kc);
    constexpr int64_t kLine = 64 / sizeof(Src);  // values per cache line
    if (trans) {
      // op(A)[i, k] = a[k * lda + i]: stored rows 2q and 2q+1 interleaved into MR-row panels,
      // kTransPairs pairs of stored rows at a time (16 rows, in L1 while they are read), panel by
      // panel, so each panel's stores are contiguous (one 48-byte store per pair and panel, panels
      // np * MR * 4 bytes apart, scattered over all the block's panels for every pair, held the
      // weight gradients' packing on its stores). The next pairs' rows are prefetched meanwhile.
      // AMD EPYC Zen 5 (family 26 model 2), bench_kernels, GFLOP/s one pair at a time -> this:
      // 1 thread linear.dB M256 N256 K2048 tn 386 / 396 -> 451 / 449, M1024 N256 K2048 392 / 419 ->
      // 467 / 444; 2 threads M256 N1024 K2048 fp32 operands 823 / 817 -> 876 / 869, M512 N512 K4096
      // 774 / 773 -> 838 / 832; one K block (K 256) the same
      // (bench/results/bf16_pack_a_trans_2026-12-02_zen5.txt).
      const __mmask16 all = __mmask16((1u << MR) - 1);
      for (int64_t q0 = 0; q0 < np; q0 += kTransPairs) {
        const int64_t q1 = std::min(np, q0 + kTransPairs);
        for (int64_t k = 2 * q1; k < std::min<int64_t>(2 * (q1 + kTransPairs), kc); ++k)
          for (int64_t j = 0; j < mc; j += kLine) __builtin_prefetch(a + k * lda + j);
        for (int64_t i0 = 0; i0 < mc; i0 += MR) {
          const __mmask16 m = first_lanes(std::min<int64_t>(MR, mc - i0));
          for (int64_t q = q0; q < q1; ++q) {
            const Src* r0 = a + 2 * q * lda + i0;
            const Src* r1 = 2 * q + 1 < kc ? r0 + lda : nullptr;
            _mm512_mask_storeu_epi32(dst + i0 * np + q * MR, all, pairs_of_rows<CvtNe2>(r0, r1, m));
          }
        }
      }
      return;
    }
    // op(A)[i, k] = a[i * lda + k]: each row converted in order (a last partial row panel is read by
    // a kernel of its own height, so there are no padding rows to fill)
    for (int64_t i = 0; i < mc; ++i) {
      const Src* next = i + kPackAhead < mc ? a + (i + kPackAhead) * lda : nullptr;
      for (int64_t q = 0; q < np; q += 16) {
        if (next)  // the 32 values of this step, kPackAhead rows down
          for (int64_t j = 2 * q; j < std::min<int64_t>(2 * q + 32, kc); j += kLine)
            __builtin_prefetch(next + j);
        _mm512_mask_storeu_epi32(dst + i * P + q, first_lanes(np - q),
                                 pairs_along_row<CvtNe2>(a + i * lda + 2 * q, kc - 2 * q));
      }
    }
  }
  // Where tile() reads A from: a packed block, pair-major or row-major (rows P pairs apart), or the
  // bf16 operand itself, row-major, `row_bytes` apart (its pairs are already what vdpbf16ps takes).
  enum class ALayout { pair_major, rows };
  struct ABlock {
    const char* base = nullptr;
    int64_t row_bytes = 0;  // rows only
    ALayout layout = ALayout::rows;
  };

  // A non-transposed bf16 A is read in place when each row holds whole pairs (kc even) and rows are
  // not a multiple of 1 KiB apart (12 rows would share few L1 sets): no packing pass, which for a
  // batch of small products (attention) is a third of the time; otherwise it is packed.
  static ABlock pack_a(float* dst, const Operand& a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
    if (!trans && a.dtype == DType::bf16 && kc % 2 == 0 && (lda * 2) % 1024 != 0)
      return {static_cast<const char*>(a.data), lda * 2, ALayout::rows};
    uint32_t* d = reinterpret_cast<uint32_t*>(dst);
    with_storage(a, [&](const auto* src) { pack_a_typed(d, src, lda, trans, mc, kc); });
    return {reinterpret_cast<const char*>(dst), P * 4, trans ? ALayout::pair_major : ALayout::rows};
  }

  // Panels [0, n_panels) of a non-transposed op(B) (op(B)[k, j] = b[k * ldb + j], nc valid columns
  // from b, panel p at d + p * NR * pairs(kc)): stored rows 2q and 2q+1 interleaved, columns past nc
  // zero. Each stored row is read across all the panels at once (up to kPackBGroup x 128 bytes of
  // fp32 in a row, not 128 bytes per page: a weight's rows lie 3-12 KiB apart), and the rows
  // kPackBAhead pairs down are prefetched, which the hardware prefetchers do not follow that far
  // apart. AMD EPYC Zen 5 (family 26 model 2), fp32 operands rounded while packing, GFLOP/s one
  // panel per pass -> this: lm.dx M256 N3072 K768 nn 1 thread 291 / 272 -> 359 / 367, 2 threads
  // median +13%, GPT-2's step 10-18 ms less backward, config M's the same
  // (bench/results/bf16_pack_b_rows_2026-12-02_zen5.txt).
  static constexpr int64_t kPackBAhead = 8;
  static constexpr int64_t kPackBGroup = 4;  // panels per row pass
  template <class Src>
  static void pack_b_rows(uint32_t* d, const Src* b, int64_t ldb, int64_t kc, int64_t nc, int64_t n_panels) {
    const int64_t np = pairs(kc), panel = NR * np;
    constexpr int64_t kLine = 64 / sizeof(Src);  // values per cache line
    for (int64_t q = 0; q < np; ++q) {
      for (int64_t k = 2 * (q + kPackBAhead); k < std::min<int64_t>(2 * (q + kPackBAhead + 1), kc); ++k) {
        const Src* ahead = b + k * ldb;
        for (int64_t j = 0; j < nc; j += kLine) __builtin_prefetch(ahead + j);
        __builtin_prefetch(ahead + nc - 1);  // the last line, where the row piece does not start on one
      }
      const Src* r0 = b + 2 * q * ldb;
      const Src* r1 = 2 * q + 1 < kc ? r0 + ldb : nullptr;
      for (int64_t p = 0; p < n_panels; ++p)
        for (int64_t h = 0; h < NR; h += 16) {  // 16 columns (one zmm of pairs) at a time
          const int64_t j = p * NR + h;
          _mm512_store_si512(d + p * panel + q * NR + h,
                             j < nc
                                 ? pairs_of_rows<CvtNe2>(r0 + j, r1 ? r1 + j : nullptr, first_lanes(nc - j))
                                 : _mm512_setzero_si512());
        }
    }
  }

  template <class Src>
  static void pack_b_typed(uint32_t* dst, const Src* b, int64_t ldb, bool trans, int64_t kc, int64_t nc,
                           int64_t p_lo, int64_t p_hi) {
    const int64_t np = pairs(kc);
    if (!trans) {  // op(B)[k, j] = b[k * ldb + j]: stored rows 2q and 2q+1 interleaved
      for (int64_t p = p_lo; p < p_hi; p += kPackBGroup) {
        const int64_t panels = std::min(kPackBGroup, p_hi - p);
        pack_b_rows(dst + p * NR * np, b + p * NR, ldb, kc, std::min(nc - p * NR, panels * NR), panels);
      }
      return;
    }
    for (int64_t p = p_lo; p < p_hi; ++p) {
      uint32_t* d = dst + p * NR * np;
      const int64_t j0 = p * NR;
      for (int64_t h = 0; h < NR; h += 16) {  // 16 columns (one zmm of pairs) at a time
        const int64_t cols = std::clamp<int64_t>(nc - j0 - h, 0, 16);
        if (cols == 0) {  // all past nc: zeros (no pointer to columns that do not exist is formed)
          for (int64_t q = 0; q < np; ++q) _mm512_store_si512(d + q * NR + h, _mm512_setzero_si512());
          continue;
        }
        // op(B)[k, j] = b[j * ldb + k]: the pairs (k, k+1) of column j are contiguous. 16 columns x 16
        // pairs are loaded as rows (k past kc reads 0: an odd kc's last pair gets a zero half) and
        // transposed, so each becomes one pair of the 16 columns.
        const Src* col0 = b + (j0 + h) * ldb;
        for (int64_t q0 = 0; q0 < np; q0 += 16) {
          __m512i r[16];
          for (int64_t c = 0; c < 16; ++c)
            r[c] = c < cols ? pairs_along_row<CvtNe2>(col0 + c * ldb + 2 * q0, kc - 2 * q0)
                            : _mm512_setzero_si512();
          transpose16x16(r);
          for (int64_t q = 0; q < 16 && q0 + q < np; ++q) _mm512_store_si512(d + (q0 + q) * NR + h, r[q]);
        }
      }
    }
  }
  static void pack_b(float* dst, const Operand& b, int64_t ldb, bool trans, int64_t kc, int64_t nc,
                     int64_t p_lo, int64_t p_hi) {
    uint32_t* d = reinterpret_cast<uint32_t*>(dst);
    with_storage(b, [&](const auto* src) { pack_b_typed(d, src, ldb, trans, kc, nc, p_lo, p_hi); });
  }

  // The micro-kernel: C[0:mr, 0:nr] := alpha * A_rows B_panel + beta * C (+ bias), np k pairs, for
  // R rows (MR, or the last partial row panel at its own height: no multiply-adds on padding rows).
  // kPairMajor: A's pair q of row i at a[q * MR + i] (32-bit units); else at byte i * row_bytes + 4q.
  template <bool kPairMajor, int R>
  static void micro(int64_t np, const char* __restrict a, int64_t row_bytes, const uint32_t* __restrict b,
                    float* c, int64_t ldc, int64_t mr, int64_t nr, const Epilogue& e) {
    const float alpha = e.alpha, beta = e.beta;
    const float* const bias = e.bias;
    const char* row[R];  // rows 0..R-1 of a row-major A (one register each while the loop runs)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) row[i] = a + i * row_bytes;
    __m512 acc[R][2];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
      if (i < mr) __builtin_prefetch(c + i * ldc, 1), __builtin_prefetch(c + i * ldc + 16, 1);
#pragma GCC unroll 2
    for (int64_t q = 0; q < np; ++q, b += NR) {
      const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        uint32_t pair;
        std::memcpy(&pair, kPairMajor ? a + 4 * (q * MR + i) : row[i] + 4 * q, sizeof pair);
        const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
        acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
        acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
      }
    }
    const __mmask16 m[2] = {first_lanes(nr), first_lanes(nr - 16)};
    __m512 bv[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    if (bias) bv[0] = _mm512_maskz_loadu_ps(m[0], bias), bv[1] = _mm512_maskz_loadu_ps(m[1], bias + 16);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      if (i >= mr) break;
#pragma GCC unroll 2
      for (int v = 0; v < 2; ++v) {
        float* ci = c + i * ldc + 16 * v;
        __m512 x = alpha == 1.0f ? acc[i][v] : _mm512_mul_ps(acc[i][v], va);
        if (bias) x = _mm512_add_ps(x, bv[v]);
        if (beta == 1.0f)
          x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m[v], ci));
        else if (beta != 0.0f)
          x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m[v], ci), x);
        _mm512_mask_storeu_ps(ci, m[v], x);
      }
    }
  }

  // micro at the tile's height: MR, or one instantiation per row count 1..MR-1 for the last panel.
  template <bool kPairMajor, int... Rows>
  static void micro_rows(std::integer_sequence<int, Rows...>, int64_t np, const char* a, int64_t row_bytes,
                         const uint32_t* b, float* c, int64_t ldc, int64_t mr, int64_t nr,
                         const Epilogue& e) {
    if (mr == MR) return micro<kPairMajor, MR>(np, a, row_bytes, b, c, ldc, mr, nr, e);
    (void)((mr == Rows + 1 ? (micro<kPairMajor, Rows + 1>(np, a, row_bytes, b, c, ldc, mr, nr, e), true)
                           : false) ||
           ...);
  }

  static void tile(const ABlock& a, int64_t ir, int64_t kc, const float* bpanel, float* c, int64_t ldc,
                   int64_t mr, int64_t nr, const Epilogue& e) {
    const uint32_t* b = reinterpret_cast<const uint32_t*>(bpanel);
    const int64_t np = pairs(kc);
    constexpr auto rows = std::make_integer_sequence<int, MR - 1>{};
    if (a.layout == ALayout::pair_major)  // panel ir / MR starts at (ir / MR) * MR * np pairs
      micro_rows<true>(rows, np, a.base + 4 * ir * np, 0, b, c, ldc, mr, nr, e);
    else
      micro_rows<false>(rows, np, a.base + ir * a.row_bytes, a.row_bytes, b, c, ldc, mr, nr, e);
  }
};

}  // namespace
}  // namespace tg::ops::simd
