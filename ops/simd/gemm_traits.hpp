// GEMM block sizes and driver thresholds per arch, in one table so they can be compared.
//
// Block sizes (BLIS's "blocksizes"):
//   MR x NR  register tile of the micro-kernel: MR * NR / lanes accumulators plus NR / lanes B
//            vectors plus one broadcast A value must fit the vector registers.
//   KC       K block: one B micro-panel (KC x NR floats) stays in L1 while loop 1 streams A panels.
//   MC       M block: the A block (MC x KC) stays in L2.
//   NC       N block: the packed B block (KC x NC) stays in L3 (shared by the threads).
//
// Thresholds: where the driver (ops/simd/gemm.hpp) switches between its paths. Each is a measured
// crossover; GemmThresholds holds the defaults with the measurement behind each, and an arch
// overrides one only with a measurement of its own (named beside the override).
//
// Only arch tags are named here (no batch types), so every arch TU can include this file.
#pragma once

#include <unistd.h>
#include <xsimd/xsimd.hpp>

#include <cstdint>

namespace tg::ops::simd {

struct GemmThresholds {
  // Few rows: M <= small_m goes to gemm_small_m (no packing: dot products or row axpys). Decoding
  // multiplies one row per step; packing a whole weight for it was 63% of batch-1 decoding and edge
  // tiles another 22% (greedy decode of bench_train's config S, AVX-512 Zen 5, 2026-11-22: batch 1
  // went from 4.9k to 24k tokens/s).
  static constexpr int64_t small_m = 4;
  // The same with op(B) = B^T (x W^T of a Linear at a small batch, decoding beams): up to
  // small_m_trans_b rows when K >= small_trans_b_min_k, gemm_small_m's dot-product tiles beat
  // packing B (a transposed B is the costly one to pack; K below ~256 leaves too few multiply-adds
  // per tile against the lane sums of its 16 results). Intel Xeon family 6 model 207, AVX-512, 1
  // thread, GFLOP/s packed -> tiles (2026-11-24): M5 N1024 K256 29 -> 63, M8 N256 K1024 33 -> 90,
  // M10 N1024 K256 46 -> 57, M12 N1024 K256 57 -> 66, but M10 N512 K128 55 -> 43, M8 N512 K64
  // 47 -> 30, M16 N1024 K256 74 -> 78 and M32 108 -> 78; on 2 threads (columns split between
  // them) M8 N1024 K256 85 -> 150, M4 38 -> 140.
  static constexpr int64_t small_m_trans_b = 12;
  // Those few-row products split their columns between the threads from this many multiply-adds
  // (M = 1: a 512 KiB weight) instead of thread_inside_min_macs: each reads its B from memory once,
  // and two threads read it faster. Decoding GPT-2 at batch 1, Cascade Lake, 2 threads (2026-11-26):
  // the 768 x 768 projections (590k multiply-adds, below the 1M of thread_inside_min_macs) ran at
  // 0.23-0.25 ms on 1 thread or 2 -> 0.13 ms split.
  static constexpr double small_m_thread_min_macs = 131072;
  static constexpr int64_t small_trans_b_min_k = 256;
  // Rows of op(A) per dot tile (x 4 columns): 2 x 4 accumulators + 4 + 2 loads fit 16 registers.
  static constexpr int64_t small_dot_rows = 2;

  // B read in place (not packed) when op(B) = B, N is whole NR panels and M <= direct_b_max_m: with
  // few rows a packed B panel would serve only a few MR-row panels of A, so packing costs about as
  // much as the multiply. Attention shapes (M = 32, 64), AVX-512 Zen 5, 2 threads: P V 297 -> 417
  // GFLOP/s, Q K^T 191 -> 231 (2026-11-23).
  static constexpr int64_t direct_b_max_m = 128;

  // A transposed (stored K x M) is packed per MC x KC block, instead of read in place, when its lda
  // is at least this many floats (and N > NR). In place, one MR-wide row piece per k lies lda apart:
  // with lda >= 512 floats (2 KiB) the kc rows of a panel touch up to kc pages, more than the L1 TLB
  // maps, and the panel is re-read for every NR panel of B. Measured on an AVX2-only Zen 1: dW = X^T
  // dY with 1024-wide X ran at 58% of the AVX2 peak in place and 87% packed (2026-11-23).
  static constexpr int64_t pack_trans_a_min_lda = 512;
  // The same for A stored M x K (op(A) = A): packed per MC x KC block from this lda on. Off by
  // default (no arch but avx2 measured a gain).
  static constexpr int64_t pack_a_min_lda = INT64_MAX;

  // Threading inside one product starts at this many multiply-adds: below it, waking the second
  // thread and the barriers cost more than they save (64^3 ran at 249 GFLOP/s on one AVX-512 Zen 5
  // thread and 120-230 on two; 2026-11-23).
  static constexpr double thread_inside_min_macs = 1.0e6;

  // A batch goes one matrix per thread when there are at least 4 matrices per thread, or when each
  // matrix is below this many multiply-adds (with fewer, larger matrices, threading inside each
  // balances better: the last round of a batch split leaves threads idle).
  static constexpr int64_t thread_batch_min_per_thread = 4;
  static constexpr double thread_batch_max_macs = 4.0e6;

  // Split K across threads (gemm_split_k) for few-row, long-K products (weight gradients dW = dY^T X):
  // M <= 2 MC (one or two row blocks cannot keep the threads busy) and K >= 2 KC per thread, unless
  // the M x N partial products (one per extra thread, added at the end) exceed split_k_max_mn floats
  // (16 MiB), where adding them costs more than the split saves. linear.dB shapes, AVX-512 Zen 5,
  // 2 threads: 66-69% -> 78-83% of the FMA peak (2026-11-23). Past 2 MC rows as well where K >= M
  // (the weight gradients of wider layers, which scaled 1.36-1.65x from 1 to 2 threads on the shared
  // path; split, each thread packs and reads only its own B panels): Cascade Lake, 2 threads, ops::gemm
  // on cold operands, two alternated rounds, GFLOP/s shared -> split (2026-11-27,
  // bench/results/gemm_split_k_rows_2026-11-27_cascadelake.txt): M1024 N256 K4096 tn 176 / 176 ->
  // 211 / 211, M768 N256 K4096 tn 176 / 174 -> 211 / 210, M1000 N256 K4096 tn 177 / 175 -> 193 / 200,
  // M1024 N1024 K4096 tn 190 / 207 -> 207 / 224; tall products (K < M: M4096 N256 K1024 nn 204 / 175
  // -> 192 / 202) keep the shared path.
  static constexpr int64_t split_k_max_mn = int64_t{1} << 22;

  // Loop order inside a work item (ops/simd/gemm.hpp). By default loop 2 walks B's NR-column panels
  // and loop 1 the MR-row panels of A, so one KC x NR panel of B stays in L1 while A streams from
  // L2. An arch whose B panel fills the L1D instead packs A and swaps the two loops where
  // a_panel_in_l1_here() says so (avx512 on some cores): one packed MR x KC panel of A stays in L1
  // while at most a_in_l1_max_panels panels of B stream from L2, for products with N >= a_in_l1_min_n
  // or, A read along K in place, lda >= a_in_l1_min_lda (rows that far apart share few L1 sets), or
  // a transposed A that is packed anyway.
  static constexpr int64_t a_in_l1_min_n = 1024;
  // ... or N >= a_in_l1_min_n_tall with M >= a_in_l1_tall_m: the tall products of a large batch of
  // tokens (config M's fused projections and its 1,000-word head at 4,096 rows). Cascade Lake, 1
  // thread, ops::gemm on cold operands, default -> A-in-L1 forced, three rounds (2026-11-27,
  // bench/results/gemm_a_in_l1_tall_2026-11-27_cascadelake.txt): M4096 N1000 K256 nt 97 / 93 / 92
  // -> 117 / 116 / 117, N768 K256 nt 100 / 100 / 99 -> 113 / 110 / 113, N512 K512 nn 102 / 102 /
  // 103 -> 114 / 109 / 113; at M 128-512 within the noise either way, and N 256 slower (M4096 N256
  // K768 nn 105 / 108 / 105 -> 92 / 92 / 94).
  static constexpr int64_t a_in_l1_min_n_tall = 512;
  static constexpr int64_t a_in_l1_tall_m = 1024;
  static constexpr int64_t a_in_l1_min_lda = 1024;
  static constexpr int64_t a_in_l1_max_panels = 16;
  // ... and each k prefetches B's panel this many floats ahead into L1 (16 rows of a 32-wide panel):
  // Cascade Lake, 1 thread, interleaved as below, +2-4% on the a_in_l1 shapes (M256 N2304 K768 nt
  // 85 -> 88, M1024 N1024 K1024 nn 102 -> 105, M2048 N1024 K256 nn 114 -> 118), the same at 256 and
  // 1024 floats.
  static constexpr int a_in_l1_prefetch_b = 512;
  static bool a_panel_in_l1_here() { return false; }
  // ... and, on any core, every product with N >= a_in_l1_wide_min_n (but B read in place). Off
  // unless an arch measured it (avx2 below).
  static constexpr int64_t a_in_l1_wide_min_n = INT64_MAX;

  // K blocks inside the work items (gemm.hpp, k_inner) for tall products (M >= k_inner_min_row_blocks
  // row blocks) whose K spans at least k_inner_min_k_blocks blocks, op(A) = A: where one row block's
  // tile of C (mc x N) fits k_inner_max_c_bytes (L2, beside A's block) and all of B's packed K blocks
  // k_inner_max_b_bytes (L3). Off (0) unless an arch measured it (avx2 below).
  static constexpr int64_t k_inner_max_c_bytes = 0;
  static constexpr int64_t k_inner_max_b_bytes = int64_t{4} << 20;
  static constexpr int64_t k_inner_min_row_blocks = 4;
  static constexpr int64_t k_inner_min_k_blocks = 3;
  // C^T = op(B)^T op(A)^T, tiles stored transposed (gemm.hpp, trans_c_pays), for x W^T products
  // (op(A) = A, op(B) = B^T) of at most trans_c_max_m rows and at least trans_c_min_n_per_m times
  // as many columns, W's rows (ldb) shorter than pack_a_min_lda. Off (0) unless an arch measured
  // it (avx2 below).
  static constexpr int64_t trans_c_max_m = 0;
  static constexpr int64_t trans_c_min_n_per_m = 2;
};

// An Intel core with a 32 KiB L1D (Skylake-SP, Cascade Lake, and others with AVX-512 on two
// full-width FMA units): where the avx512 traits below differ from Zen 4 / Zen 5's.
inline bool intel_core_with_32k_l1d() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool v = __builtin_cpu_is("intel") && sysconf(_SC_LEVEL1_DCACHE_SIZE) > 0 &&
                        sysconf(_SC_LEVEL1_DCACHE_SIZE) <= 32 * 1024;
  return v;
#else
  return false;
#endif
}

template <class Arch>
struct GemmTraits;

// 32 zmm registers: 12 x 2 accumulators + 2 B vectors + 1 broadcast = 27 (14 rows fit too, but
// 12 wastes less padding on the power-of-two row counts of attention and batches of tokens).
template <>
struct GemmTraits<xsimd::avx512bw> : GemmThresholds {
  static constexpr int MR = 12, NV = 2, NR = 32;
  static constexpr int64_t MC = 264, KC = 256, NC = 4096;
  // Never pack a transposed A: with 12-row panels read in place it is faster at every lda measured.
  // Zen 4 (EPYC family 25 model 17), 1 thread, thread CPU time (the machine was shared), GFLOP/s
  // packed at lda >= 512 -> in place, OpenBLAS 0.3.21 SkylakeX kernels beside: tn M1024 N256 K2048
  // 84 -> 99 (86), M512 N512 K4096 85 -> 89 (88), M2048 N256 K1024 86 -> 96 (91), M4096 N256 K1024
  // 87 -> 93 (89), M8192 N128 K512 75 -> 95 (79), M1024 N1024 K1024 90 -> 93 (95). On Zen 5 the
  // packing had made the same tn shapes slower than OpenBLAS too (M1024 N256 K2048: 0.88x).
  static constexpr int64_t pack_trans_a_min_lda = INT64_MAX;
  // ... except on an Intel core with two full-width 512-bit FMA units and a 32 KiB L1D (Skylake-SP,
  // Cascade Lake: GenuineIntel with a 32 KiB L1D and AVX-512), where the default (pack from lda 512)
  // holds: a 12-row panel read in place touches a new line per k beside the 32 KiB B micro-panel
  // (KC x NR), which alone fills that L1, and the FMAs, twice Zen 4's rate, wait on it. Cascade Lake
  // (family 6 model 85, 2 cores shared, load 8-9), 1 thread, best of 60 interleaved runs each,
  // GFLOP/s in place -> packed: tn M1024 N256 K2048 26-49 -> 59-99, M512 N512 K4096 38-78 -> 57-101,
  // M1000 N256 K4096 34-36 -> 48-50, in every run (bench/results/gemm_tn_pack_2026-11-26_cascadelake.txt);
  // at lda 256 within the noise. Since the A-in-L1 order below (which every packed A takes on these
  // cores), from lda 256: the weight gradients of 256-wide layers (config M's attention projections)
  // M256 N256 K2048 tn 82-84 -> 96-100 GFLOP/s, M256 N256 K4096 tn 81-87 -> 95-102, three rounds
  // each (ops::gemm on cold operands, 1 thread, quiet, 2026-11-27; bench/results/
  // gemm_tn_lda256_2026-11-27_cascadelake.txt).
  static constexpr int64_t pack_trans_a_min_lda_32k_l1d = 256;
  static int64_t pack_trans_a_min_lda_here() {
    return intel_core_with_32k_l1d() ? pack_trans_a_min_lda_32k_l1d : pack_trans_a_min_lda;
  }
  // On the same cores the 12 x 32 kernel's B panel (KC x NR = 32 KiB) is the whole L1D, so A's rows,
  // read in place beside it, evict it: there A is packed and its 12 x KC panel (12 KiB) is the one
  // kept in L1, B's panels streaming from L2 (GemmThresholds: a_panel_in_l1_here). Cascade Lake
  // (family 6 model 85, 2 cores, KVM guest, quiet), GFLOP/s median of 11 reps interleaved in one
  // process, default order -> A in L1 (16 panels of B per item, prefetched), 1 thread: M256 N3072 K768
  // nt 76 -> 86, M256 N768 K3072 nt 66 -> 81, nn 67 -> 93, M1024 N1024 K1024 nn 71 -> 93, M2048 N1024
  // K256 nn 104 -> 117, M256 N1024 K2048 tn 76 -> 95, M2304 N768 K256 tn 92 -> 109; 2 threads: M256
  // N3072 K768 nt 155 -> 172, M256 N768 K3072 nn 147 -> 186, M1024 N1024 K1024 nn 150 -> 177
  // (bench/results/gemm_a_in_l1_2026-11-26_cascadelake.txt). Smaller shapes, where it was within
  // -5% .. +5% in the exploratory runs, keep the default (the thresholds above). Zen 4 / Zen 5
  // keep the default order: forced on a Zen 4 (32 KiB L1D too, half-rate FMAs) it was slower or
  // equal on the bench_kernels shapes (2026-12-02, bench/results/gemm_pack_a_lda1024_2026-12-02_zen4.txt
  // section 6); forced on a Zen 5 (family 26 model 2, 48 KiB L1D, full-rate FMAs) 1.03-1.18x on
  // 1 thread but 0.85-0.93x on the tn shapes with K 2048, and on 2 threads 0.89-0.98x on GPT-2's
  // 256-row products (2026-12-02, bench/results/gemm_loop_order_2026-12-02_zen5.txt): mixed, not kept.
  static bool a_panel_in_l1_here() { return intel_core_with_32k_l1d(); }
  // An untransposed A is packed per MC x KC block from lda 1024 floats, as on AVX2: read in place,
  // the 12 rows of a panel lie 4 KiB (or a multiple) apart and share one L1 set, 12 lines in an
  // 8-way set beside the B micro-panel's. Zen 4 (family 25 model 17), 1 thread, bench_kernels
  // --filter "gemm " medians, two alternated runs, GFLOP/s in place -> packed (2026-12-02,
  // bench/results/gemm_pack_a_lda1024_2026-12-02_zen4.txt): M2048 N256 K1024 nt 67 / 70 -> 98 / 96,
  // nn 89 / 73 -> 99 / 98, M1024^3 68 / 70 -> 97 / 94, M2048^3 62 / 79 -> 96 / 94, GPT-2's
  // M256 N768 K3072 nn 79 / 80 -> 94 / 96, nt 64 / 71 -> 85 / 77; shapes with lda below 1024 within
  // the noise. On an Intel core with a 32 KiB L1D the A-in-L1 order already packed these. On a Zen 5
  // (48 KiB, 12-way L1D) in place or packed were within the noise (square M1024 168-174 packed
  // against 142-194 in place, two rounds; bench/results/gemm_loop_order_2026-12-02_zen5.txt); not
  // measured on an Intel core with a 48 KiB L1D.
  static constexpr int64_t pack_a_min_lda = 1024;
  static constexpr int64_t small_dot_rows = 4;  // 4 x 4 accumulators + 4 + 4 loads of 32 registers
};

// The transposed-A packing threshold on this CPU: the arch's trait, or where the arch chooses it by
// core (pack_trans_a_min_lda_here, avx512), that choice.
template <class Arch>
int64_t pack_trans_a_min_lda() {
  if constexpr (requires { GemmTraits<Arch>::pack_trans_a_min_lda_here(); })
    return GemmTraits<Arch>::pack_trans_a_min_lda_here();
  else
    return GemmTraits<Arch>::pack_trans_a_min_lda;
}

// 16 ymm registers: 6 x 2 accumulators + 2 B vectors + 1 broadcast = 15 (the classic 6x16).
// pack_trans_a_min_lda stays at the default (measured on Zen 1); on Zen 4 it still pays for AVX2's
// 6-row panels: tn M1024 N256 K2048, 1 thread, 69 GFLOP/s in place -> 85 packed (OpenBLAS 86). Zen 3
// (family 25 model 1), medians of 5 interleaved rounds, 1 thread: M1024 N256 K2048 37 in place -> 61-72
// packed (OpenBLAS 62); at lda 256 (M256 N256/N1024 K2048) packing or not is within the machine's
// +-10% noise (56-65 either way), so 512 stays (bench/results/gemm_tn_pack_threshold_2026-11-26_zen3.txt).
template <>
struct GemmTraits<xsimd::fma3<xsimd::avx2>> : GemmThresholds {
  static constexpr int MR = 6, NV = 2, NR = 16;
  static constexpr int64_t MC = 144, KC = 256, NC = 4096;
  // A not transposed is packed too from lda 1024 (4 KiB): in place, the 6 rows of a panel map to one
  // set of a 32 KiB 8-way L1D, beside the 16 KiB B micro-panel. Zen 3 (family 25 model 1), 1 thread,
  // ops::gemm on cold operands, process CPU time (the host was busy), median over 8 rounds of the
  // per-round ratio packed / in place (bench/results/gemm_pack_a_2026-11-27_zen3.txt): lda 1024
  // M2048 N256 K1024 nn 1.035, nt 1.05, M1024 N1024 K1024 nn 1.075, nt 1.06; lda 3072 M256 N768
  // K3072 nn 1.02, nt 1.02; at lda 256 mixed (0.98-1.05), so 256-wide layers keep A in place, and
  // 512-1000 within the noise. Not only multiples of 1024: in place / packed at lda 2304 (GPT-2's
  // c_attn dx, M256 N768 K2304 nn) 0.945 on 1 thread, 0.94 on 2; lda 50257 (its head's dx) 0.93 / 1.00.
  static constexpr int64_t pack_a_min_lda = 1024;
  // Products with N >= 768 run in the A-in-L1 order (A packed, one 6 x 256 panel in L1, chunks of
  // 16 B panels from L2), where the default order trailed OpenBLAS on the weight gradients (tn) with
  // cold operands. Zen 3 (family 25 model 1), ops::gemm on flushed operands, wall time, alternated
  // per call, medians of 7-15 (bench/results/gemm_a_in_l1_wide_2026-11-28_zen3.txt). The tn products
  // alone, GFLOP/s default -> A-in-L1, three runs: 1 thread M256 N1024 K2048 57.1 -> 62.4, 54.5 ->
  // 63.0, 67.1 -> 75.3, M768 N3072 K256 (GPT-2's dW) 65.9 -> 67.5, 58.1 -> 64.2, 69.2 -> 75.3; 2
  // threads (split along K) M256 N1024 K2048 71.8 -> 82.3, 103 -> 122. The order forced on every
  // product of config M's and GPT-2's steps, speed: 0.99-1.23x (median 1.07) at N >= 768 (GPT-2's
  // mlp c_proj dx M256 N3072 K768 1.19-1.23x), 0.89-0.95x on the N = 256 products k_inner serves.
  // The rule against the default order, time rule / default, the products as a step calls them, two
  // runs of 1 and 2 threads: config M's 18 0.975, 0.971 (1 thread), 0.979, 0.988 (2); GPT-2's 12 (no head)
  // 0.959, 0.964, 0.960, 0.976. Not at N = 512 (M512 N512 K4096 tn speed 0.93-1.02x).
  static constexpr int64_t a_in_l1_wide_min_n = 768;
  // K blocks inside the work items where C's row block is at most 256 KiB (half of Zen 3's 512 KiB
  // L2: N up to 448 at mc 144), so it stays in L2 across K instead of going to memory once per
  // K block. Zen 3, ops::gemm, process CPU time, medians of 5-7 rounds (each round both orders back
  // to back; bench/results/gemm_k_inner_2026-11-28_zen3.txt), GFLOP/s outer -> inner, 1 thread, cold
  // operands / warm (no flush between calls): M4096 N256 K768 nn 65.6 -> 72.7 / 64.8 -> 86.5, K1000
  // nn 59.3 -> 70.0 / 63.4 -> 87.6, K1024 nn 71.4 -> 78.6 / 77.9 -> 87.8, K1024 nt 70.5 -> 77.9 /
  // 79.7 -> 83.2; 2 threads, cold: K768 nn 127 -> 138, K1000 nn 125 -> 140, N384 K1024 nn 125 -> 140,
  // K1024 nt 138 -> 146. Not with two K blocks (K512 nn 78.0 -> 72.3 / 76.6 -> 75.4), nor where C's
  // block is larger (1 thread, N1024 K1024: M1024 nn 85.3 -> 82.9, M4096 nn 88.6 -> 81.6), nor for a
  // transposed A, whose K blocks lie in rows far apart (tn M1024 N256 K4096 69.7 -> 52.2).
  static constexpr int64_t k_inner_max_c_bytes = int64_t{256} << 10;
  // C^T = W x^T for x W^T at up to 256 rows and 3 times as many columns (gemm.hpp, trans_c_pays),
  // where W's rows are shorter than pack_a_min_lda (read in place; a packed W costs what the swap
  // saves). Zen 3 (family 25 model 1), ops::gemm on cold operands, medians of 5 alternated rounds,
  // GFLOP/s off -> on, 1 thread / 2 threads (bench/results/gemm_trans_c_2026-11-28_zen3.txt): M256
  // N50257 K768 nt (GPT-2's head) 59.1 -> 70.1 / 121 -> 132, N2304 K768 68.3 -> 73.2 / 119 -> 129,
  // N3072 K768 67.4 -> 70.0 / 117 -> 136, N768 K768 70.0 -> 70.3 / 130 -> 139, M128 N768 K768 62.6
  // -> 65.7 / 116 -> 127; not kept: N768 K3072 (W packed) 74.9 -> 72.6 / 141 -> 135, M256 N512 K512
  // 70.4 -> 67.8 / 116 -> 115, M512 N2304 K768 71.5 -> 64.7 / 140 -> 127.
  static constexpr int64_t trans_c_max_m = 256;
  static constexpr int64_t trans_c_min_n_per_m = 3;
};

// 16 xmm registers, no FMA (multiply then add needs a temporary): 4 x 2 accumulators.
template <>
struct GemmTraits<xsimd::sse2> : GemmThresholds {
  static constexpr int MR = 4, NV = 2, NR = 8;
  static constexpr int64_t MC = 128, KC = 256, NC = 2048;
};

// 32 q registers: 8 x 2 accumulators + 2 B vectors + 1 broadcast.
template <>
struct GemmTraits<xsimd::neon64> : GemmThresholds {
  static constexpr int MR = 8, NV = 2, NR = 8;
  static constexpr int64_t MC = 128, KC = 256, NC = 2048;
  static constexpr int64_t small_dot_rows = 4;  // 32 registers, as avx512
};

}  // namespace tg::ops::simd
