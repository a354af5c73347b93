// GEMM on every arch vs ops::ref: awkward shapes, all transposes, alpha/beta (beta = 0 with NaN
// in C), leading dimensions wider than the matrix, batches (strided, broadcast, many small ones).
#include <stdexcept>

#include "tests/ops/gemm_test_case.hpp"

namespace {
using namespace tg::ops;
using tg::ops::test::GemmCase;

// Runs one case through `t` and through the reference on identical inputs and compares all of C,
// including the padding columns (which must be left untouched).
void run_case(const KernelTable& t, const GemmCase& c, uint32_t seed) {
  test::GemmProblem p = test::gemm_problem(c, seed);
  const auto A = test::random_vec(p.a_size, seed), B = test::random_vec(p.b_size, seed + 1);
  std::vector<float> want = p.C;
  ref::table().gemm(want.data(), A.data(), B.data(), p.g);
  t.gemm(p.C.data(), A.data(), B.data(), p.g);
  test::check_gemm(p.C, want, c, std::string(t.name) + " " + describe("gemm", c));
}

// Every awkward size appears as M, N and K at least once, each with all four transposes.
void matches_ref(const KernelTable& t) {
  uint32_t seed = 1;
  for (const auto [M, N, K] : test::awkward_shapes())
    for (const auto [ta, tb] : test::kTransposes) run_case(t, {M, N, K, ta, tb}, seed++);
}
TG_OPS_ARCH_TESTS("gemm", "matches_ref", matches_ref)

// Shapes past one cache block in every dimension (several MC, KC and NC blocks, edge tiles).
void multi_block(const KernelTable& t) {
  const bool q = test::quick();
  const GemmCase cases[] = {
      {q ? 130 : 301, q ? 70 : 203, q ? 270 : 530},
      {q ? 40 : 300, q ? 90 : 257, 300, true, false},
      {9, q ? 4200 : 5000, 13, false, true},
      {q ? 30 : 70, q ? 4100 : 4500, q ? 260 : 600, true, true},
      // A transposed with lda >= 512 floats: packed per MC x KC block (pack_a_block) instead of
      // read in place where the arch's pack_trans_a_min_lda says so (AVX2, SSE2, NEON; AVX-512 reads
      // it in place); whole and partial row panels, edge column tiles, two K blocks
      {q ? 515 : 601, 70, 300, true, false},
      {515, 40, q ? 100 : 290, true, true},
      // A not transposed with lda >= 1024 floats: packed per block where the arch's pack_a_min_lda
      // says so (AVX2, AVX-512); partial row panels (1 and 5 rows past whole 6-row panels, 7 past 12-row
      // ones), edge column tiles, several K blocks. On 2 threads: split along K (the first two),
      // the shared path (K < M, more rows than two row blocks), split along N (few rows, lda padded
      // past 1024, B read in place at 1 thread)
      {q ? 157 : 301, 70, 1100, false, false},
      {q ? 31 : 151, 100, 1030, false, true},
      {q ? 599 : 1199, 40, 1030, false, false},
      {100, 96, 300, false, false, 1.0f, 0.0f, 800},
  };
  uint32_t seed = 100;
  for (const GemmCase& c : cases) run_case(t, c, seed++);
}
TG_OPS_ARCH_TESTS("gemm", "multi_block", multi_block)

void alpha_beta(const KernelTable& t) {
  uint32_t seed = 200;
  for (float beta : {0.0f, 1.0f, -0.75f})
    for (float alpha : {1.0f, 0.5f, -2.0f})
      for (const auto [ta, tb] : test::kTransposes) run_case(t, {33, 17, 65, ta, tb, alpha, beta}, seed++);
  // a product large enough to be threaded (>= 1M multiply-adds), with beta applied to a prior C
  run_case(t, {129, 95, 131, false, true, 0.25f, 0.5f}, seed++);
  run_case(t, {129, 95, 131, true, false, 1.0f, 0.0f}, seed++);
}
TG_OPS_ARCH_TESTS("gemm", "alpha_beta", alpha_beta)

// K = 0: the product is empty, C = beta * C (+ bias; beta = 0 clears NaNs).
void empty_k(const KernelTable& t) {
  run_case(t, {7, 9, 0, false, false, 1.0f, 0.0f}, 300);
  run_case(t, {7, 9, 0, true, true, 1.0f, 0.5f}, 301);
  GemmCase c{7, 9, 0, false, true, 1.0f, -0.75f, 1, 2, 3};
  c.bias = true;
  run_case(t, c, 302);
}
TG_OPS_ARCH_TESTS("gemm", "empty_k", empty_k)

void leading_dims(const KernelTable& t) {
  uint32_t seed = 400;
  for (const auto [ta, tb] : test::kTransposes)
    for (const GemmCase& c : test::leading_dim_cases(ta, tb)) run_case(t, c, seed++);
}
TG_OPS_ARCH_TESTS("gemm", "leading_dims", leading_dims)

void batched(const KernelTable& t) {
  uint32_t seed = 500;
  for (const auto [ta, tb] : test::kTransposes) {
    for (const GemmCase& c : test::batch_layouts(ta, tb)) run_case(t, c, seed++);
    // many small matrices: attention heads, one matrix per thread
    run_case(t, {16, 9, 33, ta, tb, 0.5f, 0.0f, 1, 0, 2, 37}, seed++);
  }
  run_case(t, {64, 64, 32, false, true, 1.0f, 0.0f, 0, 0, 0, test::quick() ? 4 : 16}, seed++);
}
TG_OPS_ARCH_TESTS("gemm", "batched", batched)

// Few rows (M <= 128, attention-sized): op(A) is read in place, and so is B (not transposed) when N
// is whole register panels (multiples of 32 cover NR = 8, 16 and 32), and the last row panel of A
// (M not a multiple of MR) runs a micro-kernel of exactly its rows. Every row count 1..MR-1 of that
// last panel, K below and above the KC block, padded leading dimensions, alpha and beta.
void few_rows_in_place(const KernelTable& t) {
  uint32_t seed = 600;
  for (int64_t M : {1, 5, 11, 12, 13, 23, 31, 64, 100, 128, 129})
    for (int64_t N : {32, 64, 96})
      for (const auto [ta, tb] : test::kTransposes) {
        run_case(t, {M, N, M % 3 == 0 ? 300 : 37, ta, tb, 1.0f, M % 2 == 0 ? 1.0f : 0.0f, 1, 5, 3}, seed++);
      }
  for (const auto [ta, tb] :
       test::kTransposes)  // alpha != 1 (applied in the store); batched like attention heads
    run_case(t, {29, 64, 40, ta, tb, 0.5f, 0.0f, 0, 0, 0, 8}, seed++);
  for (const auto [ta, tb] : test::kTransposes) {
    run_case(t, {128, 256, 64, ta, tb, 1.0f, 0.0f}, seed++);  // threaded inside (2M multiply-adds)
    run_case(t, {20, 4160, 40, ta, tb, 1.0f, 1.0f}, seed++);  // N past one NC block
  }
}
TG_OPS_ARCH_TESTS("gemm", "few_rows_in_place", few_rows_in_place)

// Few rows against a transposed B (M <= small_m_trans_b: x W^T at a small batch): dot-product tiles
// of up to 4 rows x 4 columns, so every row count 1..13 (whole tiles, 1-3 leftover rows, and past
// the threshold), column counts around the tile width, K around one vector (1, 15, 16, 17) and long,
// transposed A (rows gathered), padded leading dimensions, alpha, beta and bias; and products
// large enough (>= 1M multiply-adds) that 2 threads split their columns.
void few_rows_transposed_b(const KernelTable& t) {
  uint32_t seed = 650;
  for (int64_t M = 1; M <= 13; ++M)
    for (int64_t N : {1, 3, 4, 7, 37})
      for (int64_t K : {1, 15, 16, 17, 300})
        for (bool ta : {false, true}) {
          const bool odd = (M + N + K) % 2 == 1;
          GemmCase c{M, N, K, ta, true, odd ? 0.5f : 1.0f, odd ? 1.0f : 0.0f, M % 3, K % 2, 1};
          c.bias = M % 2 == 0;
          run_case(t, c, seed++);
        }
  for (int64_t M : {1, 4, 7, 12})
    for (bool ta : {false, true}) {
      GemmCase c{M, 1003, M == 1 ? 1100 : 301, ta, true, 0.5f, 1.0f, 3, 1, 2};
      c.bias = true;
      run_case(t, c, seed++);
      run_case(t, {M, 1003, 301, ta, false, 1.0f, 0.0f}, seed++);  // and with op(B) = B (M <= small_m)
    }
  run_case(t, {6, 40, 33, false, true, 1.0f, 0.0f, 0, 0, 0, 5}, seed++);  // a batch, one entry per thread
}
TG_OPS_ARCH_TESTS("gemm", "few_rows_transposed_b", few_rows_transposed_b)

// The bias epilogue (Linear's bias in the GEMM's store) on every path: packed and in-place operands,
// edge tiles, several K blocks (added once), K = 0, few rows (M <= 4), batches, alpha and beta.
void bias_epilogue(const KernelTable& t) {
  uint32_t seed = 700;
  const GemmCase shapes[] = {{33, 17, 65}, {129, 95, 300}, {64, 64, 32}, {13, 96, 37},
                             {3, 40, 70},  {2, 33, 9},     {7, 9, 0},    {300, 70, 20}};
  for (GemmCase c : shapes)
    for (const auto [ta, tb] : test::kTransposes) {
      c.trans_a = ta, c.trans_b = tb, c.bias = true;
      c.alpha = 1.0f, c.beta = 0.0f;
      run_case(t, c, seed++);
      c.alpha = 0.5f, c.beta = 1.0f;
      run_case(t, c, seed++);
    }
  run_case(t, {16, 32, 33, false, false, 1.0f, 0.0f, 1, 0, 2, 7, false, false, false, true}, seed++);
}
TG_OPS_ARCH_TESTS("gemm", "bias_epilogue", bias_epilogue)

// Few rows, long K (a weight gradient): with 2 threads the K blocks are split between threads and
// the partial products added (a K that is not whole KC blocks, beta and bias on thread 0's part).
void split_k(const KernelTable& t) {
  uint32_t seed = 800;
  for (const auto [ta, tb] : test::kTransposes) {
    run_case(t, {70, 50, 1100, ta, tb, 1.0f, 0.5f, 3, 1, 2, 1, false, false, false, true}, seed++);
    run_case(t, {33, 97, 1300, ta, tb, 0.5f, 0.0f}, seed++);
    // batched into one C (stride_c = 0, beta = 1): each entry split in turn
    run_case(t, {40, 64, 2100, ta, tb, 1.0f, 1.0f, 0, 0, 0, 3, false, false, true}, seed++);
    run_case(t, {96, 256, 1100, ta, tb, 1.0f, 0.0f, 0, 0, 0, 1, false, false, false, true}, seed++);
    // more rows than two row blocks on every arch but K >= M (the weight gradient of a wider layer),
    // each thread's part then several row blocks of its own
    if (!test::quick())
      run_case(t, {600, 50, 1100, ta, tb, 1.0f, 0.5f, 1, 2, 3, 1, false, false, false, true}, seed++);
  }
}
TG_OPS_ARCH_TESTS("gemm", "split_k", split_k)

// One row block, many columns: with 2 threads each takes a range of whole NR panels of C and runs
// the one-thread GEMM on it (a partial last panel, bias, beta, padded operands, a batch).
void split_n(const KernelTable& t) {
  uint32_t seed = 850;
  for (const auto [ta, tb] : test::kTransposes) {
    run_case(t, {30, 1061, 300, ta, tb, 0.5f, 1.0f, 2, 1, 3, 1, false, false, false, true}, seed++);
    run_case(t, {20, 1024, 256, ta, tb, 1.0f, 0.0f, 0, 0, 0, 2}, seed++);
  }
}
TG_OPS_ARCH_TESTS("gemm", "split_n", split_n)

// A GEMM test seam (ops/kernels.hpp, namespace testing) set for one scope, back to `cpu` (the
// traits' choice) at its end.
template <class Mode, void (*Set)(Mode)>
struct SeamScope {
  explicit SeamScope(Mode m) { Set(m); }
  ~SeamScope() { Set(Mode::cpu); }
  SeamScope(const SeamScope&) = delete;
  SeamScope& operator=(const SeamScope&) = delete;
};

// The other loop order (ops/simd/gemm.hpp, a_in_l1: A packed, its panel kept in L1, chunks of at
// most a_in_l1_max_panels B panels), which the traits choose only on some cores and shapes: forced
// here on every arch, over the cases above and products wide enough to be cut into several chunks
// per row block (threaded or not). The default order is forced too, for the cores that pick a_in_l1.
using LoopOrderScope = SeamScope<testing::GemmLoopOrder, testing::set_gemm_loop_order>;

void both_loop_orders(const KernelTable& t) {
  for (const auto order : {testing::GemmLoopOrder::a_in_l1, testing::GemmLoopOrder::b_in_l1}) {
    const LoopOrderScope scope(order);
    matches_ref(t);
    alpha_beta(t);
    leading_dims(t);
    if (!test::quick()) {  // the sanitizer and qemu runs (quick) keep the cheap cases and the wide ones below
      multi_block(t);
      bias_epilogue(t);
    }
    uint32_t seed = 900;
    for (const auto [ta, tb] : test::kTransposes) {
      run_case(t, {50, test::quick() ? 1100 : 2100, 70, ta, tb, 0.5f, 1.0f, 1, 2, 3}, seed++);
      GemmCase c{test::quick() ? 40 : 280, 1061, test::quick() ? 300 : 1030, ta, tb, 1.0f, 0.0f};
      c.bias = true;
      run_case(t, c, seed++);
    }
    // A not transposed with rows 768 and 1,024 floats apart, a partial row panel and edge column
    // tiles, B either way
    for (const int64_t K : {int64_t{768}, int64_t{1024}})
      for (const bool tb : {false, true}) run_case(t, {37, 1061, K, false, tb, 1.0f, 0.5f}, seed++);
  }
}
TG_OPS_ARCH_TESTS("gemm", "both_loop_orders", both_loop_orders)

// K blocks inside the work items (ops/simd/gemm.hpp, k_inner: all of B's column block packed first,
// then each work item runs its K blocks back to back), which the traits choose only for tall
// products on some arches: forced on every arch, and forced off, over products with several K
// blocks (the last one partial), several row blocks, edge tiles, padded operands, bias and beta, in
// both loop orders inside an item, past one NC column block and inside split-K parts; then tall
// products with a long K and a few hundred columns left to the traits (avx2 takes k_inner there),
// and both orders against each other, bit for bit.
using KOrderScope = SeamScope<testing::GemmKOrder, testing::set_gemm_k_order>;

// One case run with a test seam set two ways (Scope's constructor sets it, its destructor resets
// it): C must come out bit for bit the same.
template <class Scope, class Mode>
void same_bits(const KernelTable& t, const GemmCase& c, uint32_t seed, Mode a, Mode b) {
  test::GemmProblem p = test::gemm_problem(c, seed);
  const auto A = test::random_vec(p.a_size, seed), B = test::random_vec(p.b_size, seed + 1);
  std::vector<float> ca = p.C, cb = p.C;
  {
    const Scope scope(a);
    t.gemm(ca.data(), A.data(), B.data(), p.g);
  }
  {
    const Scope scope(b);
    t.gemm(cb.data(), A.data(), B.data(), p.g);
  }
  CHECK(ca == cb);
}

void both_k_orders(const KernelTable& t) {
  const bool q = test::quick();
  uint32_t seed = 950;
  for (const auto k_order : {testing::GemmKOrder::inner, testing::GemmKOrder::outer}) {
    const KOrderScope k_scope(k_order);
    for (const auto order : {testing::GemmLoopOrder::b_in_l1, testing::GemmLoopOrder::a_in_l1}) {
      const LoopOrderScope scope(order);
      for (const auto [ta, tb] : test::kTransposes) {
        GemmCase c{q ? 160 : 400, q ? 45 : 100, q ? 530 : 600, ta, tb, 0.5f, 1.0f};
        c.bias = true;
        run_case(t, c, seed++);
        run_case(t, {q ? 97 : 331, 37, 300, ta, tb, 1.0f, 0.0f, 3, 1, 2}, seed++);
      }
    }
    if (!q) run_case(t, {40, 4200, 530, false, true, 1.0f, 0.5f}, seed++);  // two NC column blocks
    // few rows, a long K: on 2 threads split along K, each part K-blocked in the order forced
    for (const bool tb : {false, true}) run_case(t, {q ? 50 : 130, 64, 1100, false, tb, 1.0f, 0.5f}, seed++);
  }
  // The avx2 traits' own choice: a tall product (4 row blocks and more), K over three blocks, 200
  // columns.
  for (const bool tb : {false, true}) run_case(t, {600, 200, 800, false, tb, 1.0f, 0.5f}, seed++);
  // Both orders give C bit for bit (the same sums in the same order), 1 and 2 threads.
  for (const GemmCase& c :
       {GemmCase{600, 200, 800, false, true, 0.5f, 1.0f}, GemmCase{130, 64, 1100, false, false, 1.0f, 1.0f}})
    same_bits<KOrderScope>(t, c, seed++, testing::GemmKOrder::inner, testing::GemmKOrder::outer);
}
TG_OPS_ARCH_TESTS("gemm", "both_k_orders", both_k_orders)

// C^T = op(B)^T op(A)^T with its tiles stored transposed (ops/simd/gemm.hpp, trans_c), which the
// traits choose only for x W^T at a few hundred rows on some arches: forced on every arch over the
// cases above (all transposes, alpha and beta, bias per column of C, padded operands, batches, edge
// tiles on both sides, several blocks), in both loop orders and K orders; then left to the traits
// on GPT-2-like shapes (avx2 takes it there), and forced off where it would take it; and forced on
// against off, bit for bit (each element gets the same sums in the same order, edge tiles and a beta
// that is neither 0 nor 1 included).
using CTransposeScope = SeamScope<testing::GemmCTranspose, testing::set_gemm_c_transpose>;

void both_c_orientations(const KernelTable& t) {
  const bool q = test::quick();
  uint32_t seed = 1000;
  {
    const CTransposeScope c_scope(testing::GemmCTranspose::on);
    matches_ref(t);
    empty_k(t);
    alpha_beta(t);
    leading_dims(t);
    batched(t);
    bias_epilogue(t);
    if (!q) multi_block(t);
    for (const auto k_order : {testing::GemmKOrder::inner, testing::GemmKOrder::outer})
      for (const auto order : {testing::GemmLoopOrder::b_in_l1, testing::GemmLoopOrder::a_in_l1}) {
        const KOrderScope k_scope(k_order);
        const LoopOrderScope scope(order);
        for (const auto [ta, tb] : test::kTransposes) {
          GemmCase c{q ? 45 : 100, q ? 700 : 1300, 600, ta, tb, 0.5f, 1.0f, 1, 2, 3};
          c.bias = true;
          run_case(t, c, seed++);
        }
      }
  }
  // Forced off: the paths x W^T products took before (split along N, the packed path with a bias),
  // which the traits now send through C^T on some arches.
  {
    const CTransposeScope c_scope(testing::GemmCTranspose::off);
    split_n(t);
    bias_epilogue(t);
  }
  // The traits' choice: x W^T at 256 rows and fewer (and more, which keeps C's orientation), with a
  // bias, edge tiles, K over three blocks.
  for (const GemmCase& c : {GemmCase{q ? 100 : 256, q ? 700 : 2304, 768, false, true},
                            GemmCase{61, 1000, 300, false, true, 0.5f, 1.0f, 3, 1, 2},
                            GemmCase{q ? 300 : 520, 1600, 200, false, true}}) {
    GemmCase b = c;
    b.bias = true;
    run_case(t, b, seed++);
  }
  // On against off, 1 and 2 threads (K below the split-K products' 2 x 2 x KC, so neither splits K).
  for (const GemmCase& c : {GemmCase{250, 900, 700, false, true, 0.5f, 1.0f, 0, 3, 1},
                            GemmCase{70, 1061, 513, true, false, 1.0f, 0.0f},
                            GemmCase{101, 997, 300, false, true, 1.0f, -0.75f, 2, 1, 3}})
    same_bits<CTransposeScope>(t, c, seed++, testing::GemmCTranspose::on, testing::GemmCTranspose::off);
}
TG_OPS_ARCH_TESTS("gemm", "both_c_orientations", both_c_orientations)

// Bad descriptors throw (naming the field) on every table, the reference included, before any write.
TEST_CASE("gemm.validate.bad_descriptors_throw") {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 7.0f);
  for (Arch arch : available_archs()) {
    const KernelTable& t = kernels(arch);
    CAPTURE(t.name);
    Gemm g = gemm_desc(4, 4, 4);
    g.lda = 3;
    CHECK_THROWS_WITH_AS(t.gemm(c.data(), a.data(), b.data(), g), doctest::Contains("lda 3"),
                         std::invalid_argument);
    g = gemm_desc(4, 4, 4, false, true);
    g.ldb = 2;
    CHECK_THROWS_WITH_AS(t.gemm(c.data(), a.data(), b.data(), g), doctest::Contains("ldb 2"),
                         std::invalid_argument);
    g = gemm_desc(4, 5, 4);
    g.ldc = 4;
    CHECK_THROWS_WITH_AS(t.gemm(c.data(), a.data(), b.data(), g), doctest::Contains("ldc 4"),
                         std::invalid_argument);
    g = gemm_desc(-1, 4, 4);
    CHECK_THROWS_AS(t.gemm(c.data(), a.data(), b.data(), g), std::invalid_argument);
    g = gemm_desc(2, 2, 2, false, false, 1.0f, 1.0f, 3);
    g.stride_c = 0, g.bias = b.data();  // a batch summed into one C cannot take a bias
    CHECK_THROWS_WITH_AS(t.gemm(c.data(), a.data(), b.data(), g),
                         doctest::Contains("bias with stride_c == 0"), std::invalid_argument);
    CHECK(c[0] == 7.0f);
  }
}

TEST_CASE("gemm.desc.contiguous_strides") {
  const Gemm g = gemm_desc(3, 5, 7, true, false, 2.0f, 0.5f, 4);
  CHECK(g.lda == 3);
  CHECK(g.ldb == 5);
  CHECK(g.ldc == 5);
  CHECK(g.stride_a == 21);
  CHECK(g.stride_b == 35);
  CHECK(g.stride_c == 15);
  CHECK(g.alpha == 2.0f);
  CHECK(g.beta == 0.5f);
}

}  // namespace
