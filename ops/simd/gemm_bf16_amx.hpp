// The bf16 GEMM kernel on AMX tiles (TDPBF16PS), for the gemm_bf16 driver (gemm_bf16.hpp).
//
// AMX (Intel Xeon 4th and 5th generation: `amx_bf16` in /proc/cpuinfo) has eight tile registers of
// up to 16 rows x 64 bytes and one instruction that matters here:
//   TDPBF16PS  C (16 x 16 fp32)  +=  A (16 rows x 32 bf16)  B (16 rows x 16 (k, k+1) bf16 pairs)
//   C[m][n] += sum over q < 16 of A[m][2q] B[q][2n] + A[m][2q + 1] B[q][2n + 1]
// i.e. 16 x 16 x 32 multiply-adds, K in pairs down B's rows, as vdpbf16ps. The micro-kernel holds a
// 32 x 32 block of C in four tiles (tmm0..3), and per step of 32 k loads two A tiles (rows 0-15,
// 16-31: tmm4, 5) and two B tiles (columns 0-15, 16-31: tmm6, 7) and issues four TDPBF16PS.
//
// Packed layouts (bf16 words), both in steps of 32 k, K padded with zeros to a multiple of 32:
//   A, per 32-row panel: [step s][row r < 32][k < 32]      tile (s, rows 16t..) at s*1024 + t*512
//   B, per 32-column panel: [step s][half h][pair q < 16][column c < 16][2]
//                                                           tile (s, columns 16h..) at s*1024 + h*512
// so each tile is 1 KiB contiguous (16 rows 64 bytes apart). Rows of A past the matrix are zeros
// (the last panel always computes 32 rows or, when it has 16 or fewer, only its first 16), and
// columns of B past it too. fp32 operands are rounded to bf16 while packing by Tiles::Cvt: on AMX
// hardware vcvtne2ps2bf16 (CvtNe2; every CPU with AMX-BF16 has AVX512_BF16; it flushes denormals,
// which TDPBF16PS treats as zero anyway), in the emulation bf16.hpp's integer rounding (any AVX-512
// CPU).
//
// Tiles is the tile unit: AmxTiles (ops/arch_amx_bf16.cpp, the instructions) or an emulation in
// scalar code (tests/ops/amx_emulated.cpp: the packing, blocking and epilogue tested on any AVX-512
// CPU). It provides
//   Cvt                                the fp32 -> bf16 rounding of the packing (gemm_bf16_x86.hpp)
//   configure()                        loads kAmxTileConfig on the calling thread
//   template <bool kRows2, bool kCols2> product(a, b, steps, out)
//     out[32 x 32 fp32, row stride 32] := (A panel) (B panel) over `steps` steps of 32 k, only
//     rows < 16 unless kRows2 and columns < 16 unless kCols2 (the rest of out is not written).
//   product_into(a, b, steps, c, ldc, init, init_ld)
//     C[0:32, 0:32] (row stride ldc) := init + (A panel) (B panel), the accumulator tiles loaded
//     from init (rows init_ld floats apart: C itself to accumulate, beta 1; the bias with
//     init_ld 0, every row the same) or zeros (init null) and stored to C directly: a whole tile
//     with alpha 1 and beta 0 or 1 (every K block after the first).
// Everything here is in an anonymous namespace: each TU keeps its own copy, compiled with its flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "ops/simd/gemm_bf16.hpp"
#include "ops/simd/gemm_bf16_x86.hpp"

namespace tg::ops::simd {
namespace {

// The tile configuration of the kernel (palette 1): tmm0..7 all 16 rows x 64 bytes (C: 16 x 16 fp32;
// A: 16 rows of 32 bf16; B: 16 rows of 16 bf16 pairs). Bytes: 0 palette, 1 start row, 16..47 bytes
// per row of each tile (16-bit), 48..63 rows of each tile. Loaded with _tile_loadconfig.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(AmxTileConfig) == 64);
const AmxTileConfig kAmxTileConfig{};

template <class Tiles>
struct AmxKernel {
  using Cvt = typename Tiles::Cvt;              // how fp32 operands are rounded to bf16 while packing
  static constexpr bool few_rows_path = false;  // the table sends them to the widen kernel
  static constexpr int MR = 32, NR = 32;        // 2 x 2 tiles of 16 x 16 fp32
  static constexpr int64_t KS = 32;             // k per step (one tile of A holds 32 k per row)
  static constexpr int64_t kStepWords = 1024;   // bf16 words per step of a packed panel (2 tiles)
  static constexpr int64_t MC = 256, KC = 512, NC = 4096;
  // Threaded products are cut into a grid of one-thread products (gemm_bf16.hpp, bf16_split_2d): a
  // tile instruction does 16 x 16 x 32 multiply-adds, so packing (and rounding) costs about as much
  // as multiplying, and each thread packs only its own part.
  static constexpr Split2d split_2d = Split2d::always;
  static constexpr double grid_tile_cost = 2.0, grid_pack_cost = 0.5;
  // The tile configuration, loaded by each thread at the start of each product (not once per thread:
  // other code in the process, oneDNN say, may load its own or release the tiles in between).
  static void begin_thread() { Tiles::configure(); }

  static int64_t steps(int64_t kc) { return (kc + KS - 1) / KS; }
  static int64_t panel_words(int64_t kc) { return steps(kc) * kStepWords; }
  static int64_t a_block_floats(int64_t mc, int64_t kc) { return (mc + MR - 1) / MR * panel_words(kc) / 2; }
  static int64_t b_panel_floats(int64_t kc) { return panel_words(kc) / 2; }

  // Row i of the packed A block, step s: 32 words at a + (i / 32) * panel + s * 1024 + (i % 32) * 32.
  static uint16_t* a_row(uint16_t* a, int64_t i, int64_t s, int64_t panel) {
    return a + (i / MR) * panel + s * kStepWords + (i % MR) * KS;
  }

  template <class Src>
  static void pack_a_typed(uint16_t* dst, const Src* a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
    const int64_t ns = steps(kc), panel = panel_words(kc), rows = (mc + MR - 1) / MR * MR;
    if (!trans) {  // op(A)[i, k] = a[i * lda + k]: each row's 32 k of a step are contiguous
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t s = 0; s < ns; ++s)
          _mm512_storeu_si512(
              a_row(dst, i, s, panel),
              i < mc ? pairs_along_row<Cvt>(a + i * lda + s * KS, kc - s * KS) : _mm512_setzero_si512());
      return;
    }
    // op(A)[i, k] = a[k * lda + i]: per step and 16 rows, stored rows 2q and 2q + 1 interleaved into
    // 16 pairs (one per row i), then transposed so that each row's 16 pairs are one register. Steps
    // outside: a step's 32 stored rows are read along the whole block, not once per 16 rows.
    for (int64_t s = 0; s < ns; ++s)
      for (int64_t i0 = 0; i0 < rows; i0 += 16) {
        const __mmask16 m = first_lanes(mc - i0);
        __m512i r[16];
        for (int64_t q = 0; q < 16; ++q) {
          const int64_t k = s * KS + 2 * q;
          const Src* r0 = k < kc && i0 < mc ? a + k * lda + i0 : nullptr;
          const Src* r1 = k + 1 < kc && i0 < mc ? a + (k + 1) * lda + i0 : nullptr;
          r[q] = pairs_of_rows<Cvt>(r0, r1, m);
        }
        transpose16x16(r);
        for (int64_t i = 0; i < 16; ++i) _mm512_storeu_si512(a_row(dst, i0 + i, s, panel), r[i]);
      }
  }
  struct ABlock {
    const uint16_t* base = nullptr;
    int64_t panel = 0;  // words per 32-row panel
  };
  static ABlock pack_a(float* dst, const Operand& a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    with_storage(a, [&](const auto* src) { pack_a_typed(d, src, lda, trans, mc, kc); });
    return {d, panel_words(kc)};
  }

  template <class Src>
  static void pack_b_typed(uint16_t* dst, const Src* b, int64_t ldb, bool trans, int64_t kc, int64_t nc,
                           int64_t p_lo, int64_t p_hi) {
    const int64_t ns = steps(kc), panel = panel_words(kc);
    if (!trans) {
      // op(B)[k, j] = b[k * ldb + j]: stored rows 2q and 2q + 1 interleaved, 16 columns at a time.
      // Each pair of stored rows is read once along all the panels (a panel-major walk would read
      // every row of the block for each panel: with rows 4 KiB or more apart, a page per read).
      for (int64_t s = 0; s < ns; ++s)
        for (int64_t q = 0; q < 16; ++q) {
          const int64_t k = s * KS + 2 * q;
          for (int64_t p = p_lo; p < p_hi; ++p)
            for (int64_t h = 0; h < 2; ++h) {
              const int64_t j0 = p * NR + 16 * h, cols = std::clamp<int64_t>(nc - j0, 0, 16);
              const Src* r0 = k < kc && cols > 0 ? b + k * ldb + j0 : nullptr;
              const Src* r1 = k + 1 < kc && cols > 0 ? b + (k + 1) * ldb + j0 : nullptr;
              _mm512_storeu_si512(dst + p * panel + s * kStepWords + h * 512 + q * 32,
                                  pairs_of_rows<Cvt>(r0, r1, first_lanes(cols)));
            }
        }
      return;
    }
    // op(B)[k, j] = b[j * ldb + k]: column j's 16 pairs of a step are contiguous; 16 columns loaded
    // as rows and transposed, so that each register holds one pair of every column
    for (int64_t p = p_lo; p < p_hi; ++p)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t j0 = p * NR + 16 * h, cols = std::clamp<int64_t>(nc - j0, 0, 16);
        for (int64_t s = 0; s < ns; ++s) {
          uint16_t* d = dst + p * panel + s * kStepWords + h * 512;  // this tile: 16 rows of 32 words
          __m512i r[16];
          for (int64_t c = 0; c < 16; ++c)
            r[c] = c < cols ? pairs_along_row<Cvt>(b + (j0 + c) * ldb + s * KS, kc - s * KS)
                            : _mm512_setzero_si512();
          transpose16x16(r);
          for (int64_t q = 0; q < 16; ++q) _mm512_storeu_si512(d + q * 32, r[q]);
        }
      }
  }
  static void pack_b(float* dst, const Operand& b, int64_t ldb, bool trans, int64_t kc, int64_t nc,
                     int64_t p_lo, int64_t p_hi) {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    with_storage(b, [&](const auto* src) { pack_b_typed(d, src, ldb, trans, kc, nc, p_lo, p_hi); });
  }

  // C[0:mr, 0:nr] := alpha * (A rows ir..) (B panel) + beta * C (+ bias). A whole tile with alpha 1
  // and beta 0 (with or without the bias) or 1 (no bias) goes through the accumulator tiles directly
  // (product_into); any other runs the tiles' 32 x 32 product (or the quarter or half the tile needs:
  // 16 rows when mr <= 16, 16 columns when nr <= 16) and the epilogue on AVX-512 registers.
  static void tile(const ABlock& a, int64_t ir, int64_t kc, const float* bpanel, float* c, int64_t ldc,
                   int64_t mr, int64_t nr, const Epilogue& e) {
    const uint16_t* ap = a.base + (ir / MR) * a.panel;
    const uint16_t* bp = reinterpret_cast<const uint16_t*>(bpanel);
    const int64_t ns = steps(kc);
    if (mr == MR && nr == NR && e.alpha == 1.0f && (e.beta == 0.0f || (e.beta == 1.0f && !e.bias))) {
      if (e.beta == 1.0f)
        Tiles::product_into(ap, bp, ns, c, ldc, c, ldc);  // a later K block: onto C
      else
        Tiles::product_into(ap, bp, ns, c, ldc, e.bias, 0);  // the first: from the bias (or zeros)
      return;
    }
    alignas(64) float out[MR * NR];
    if (mr > 16 && nr > 16)
      Tiles::template product<true, true>(ap, bp, ns, out);
    else if (mr > 16)
      Tiles::template product<true, false>(ap, bp, ns, out);
    else if (nr > 16)
      Tiles::template product<false, true>(ap, bp, ns, out);
    else
      Tiles::template product<false, false>(ap, bp, ns, out);
    const __mmask16 m[2] = {first_lanes(nr), first_lanes(nr - 16)};
    __m512 bv[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    if (e.bias) bv[0] = _mm512_maskz_loadu_ps(m[0], e.bias), bv[1] = _mm512_maskz_loadu_ps(m[1], e.bias + 16);
    const __m512 va = _mm512_set1_ps(e.alpha), vb = _mm512_set1_ps(e.beta);
    const int halves = nr > 16 ? 2 : 1;
    for (int64_t i = 0; i < mr; ++i)
      for (int v = 0; v < halves; ++v) {
        float* ci = c + i * ldc + 16 * v;
        __m512 x = _mm512_load_ps(out + i * NR + 16 * v);
        if (e.alpha != 1.0f) x = _mm512_mul_ps(x, va);
        if (e.bias) x = _mm512_add_ps(x, bv[v]);
        if (e.beta == 1.0f)
          x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m[v], ci));
        else if (e.beta != 0.0f)
          x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m[v], ci), x);
        _mm512_mask_storeu_ps(ci, m[v], x);
      }
  }
};

}  // namespace
}  // namespace tg::ops::simd
