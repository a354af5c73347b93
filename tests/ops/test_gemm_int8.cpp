// int8 weights (ops::Int8Rows): the quantization of a weight's rows, and gemm_int8 on every arch vs
// the scalar reference: 1..5 rows (a decoding step and past it), op(A) as stored or transposed, K
// below, at and past a vector with a tail, N with 0-3 columns past the 4-column dot tiles,
// alpha/beta/bias, padded leading dimensions, K = 0, empty M and N, and products large enough to
// split their columns across threads (GPT-2's 768 x 3072 projection, its 50,257-word head's rows;
// TAPEGRAD_TEST_QUICK leaves the head out).
// The reference itself is checked against the fp32 GEMM on the dequantized weight.
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "tests/ops/gemm_test_case.hpp"

namespace {
using namespace tg::ops;
using Case = tg::ops::test::GemmCase;

// A weight of N x K in int8 tiles (random values in [-127, 127], scales about 1 / 127, so that
// op(B)'s values lie in about [-1.5, 1.5] like the other GEMM tests' operands), the padding zeros.
struct Int8Weight {
  std::vector<int8_t> q;
  std::vector<float> scale;
  Int8Weight(int64_t N, int64_t K, uint32_t seed) : q(static_cast<size_t>(int8_bytes(N, K)), 0) {
    const auto v = test::random_vec(N * K, seed, -127.49f, 127.49f);
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k)
        q[static_cast<size_t>(int8_offset(j, k, K))] =
            static_cast<int8_t>(std::lround(v[static_cast<size_t>(j * K + k)]));
    for (float s : test::random_vec(N + 1, seed + 1, 0.5f, 1.5f)) scale.push_back(s / 127.0f);
  }
  Int8Rows rows() const { return {q.data(), scale.data()}; }
  int8_t at(int64_t j, int64_t k, int64_t K) const { return q[static_cast<size_t>(int8_offset(j, k, K))]; }
};

void run_int8_case(const KernelTable& t, const Case& c, uint32_t seed) {
  test::GemmProblem p = test::gemm_problem(c, seed);
  const auto A = test::random_vec(p.a_size, seed);
  const Int8Weight B(c.N, c.K, seed + 1);
  std::vector<float> want = p.C;
  ref::table().gemm_int8(want.data(), A.data(), B.rows(), p.g);
  t.gemm_int8(p.C.data(), A.data(), B.rows(), p.g);
  test::check_gemm(p.C, want, c, std::string(t.name) + " " + describe("gemm_int8", c));
}

void int8_matches_ref(const KernelTable& t) {
  uint32_t seed = 900;
  for (int64_t M : {1, 2, 3, 4, 5})
    for (int64_t K : {1, 7, 8, 16, 33, 100})
      for (bool ta : {false, true}) {
        Case c{M, 4 * M + K % 4, K, ta, true, M == 3 ? 0.5f : 1.0f, M == 2 ? 1.0f : (M == 4 ? -0.75f : 0.0f)};
        c.bias = M % 2 == 1;
        run_int8_case(t, c, seed++);
      }
  for (bool ta : {false, true})
    for (Case c : test::leading_dim_cases(ta, true)) {  // A's and C's (B's rows are tiled: ldb = K)
      c.M = 3;
      c.pad_b = 0;
      run_int8_case(t, c, seed++);
    }
  for (int64_t M : {1, 4})  // threaded: columns split across the threads (under qemu, one shape)
    for (int64_t N : test::quick() ? std::vector<int64_t>{3072 + 5} : std::vector<int64_t>{3072 + 5, 50257}) {
      Case c{M, N, 768, false, true, 1.0f, 0.0f};
      c.bias = true;
      run_int8_case(t, c, seed++);
    }
  {  // 8 threads for 6 tiles: threads with no columns, and the last range ending mid-tile (N 21)
    const int saved = num_threads();
    set_num_threads(8);
    run_int8_case(t, Case{4, 21, 2000, false, true, 1.0f, 0.5f}, seed++);
    set_num_threads(saved);
  }
  for (bool bias : {false, true}) {  // K = 0: C = beta * C (+ bias)
    Case c{3, 9, 0, false, true, 1.0f, 0.5f};
    c.bias = bias;
    run_int8_case(t, c, seed++);
  }
  for (const auto& [M, N] : {std::pair<int64_t, int64_t>{0, 5}, {3, 0}})  // nothing is written
    run_int8_case(t, Case{M, N, 7, false, true}, seed++);
}
TG_OPS_ARCH_TESTS("gemm_int8", "matches_ref", int8_matches_ref)

// The quantization on every arch equals the reference bit for bit: widths below, at and past a
// vector with tails, values on the half steps (ties to even), a row of zeros, a row too small for
// 127 / max|w| in fp32, a row whose scale underflows, and rows enough to be threaded; a row holding
// NaN or Inf is the one reported (the first of two).
void quantize_matches_ref(const KernelTable& t) {
  for (int64_t cols : {1, 3, 4, 7, 8, 15, 16, 17, 31, 33, 64, 100, 771}) {
    const int64_t rows = 9;
    auto w = test::random_vec(rows * cols, static_cast<uint32_t>(cols), -2.0f, 2.0f);
    for (int64_t k = 0; k < cols; ++k) {
      w[static_cast<size_t>(cols + k)] = 0.0f;                                  // row 1: zeros
      w[static_cast<size_t>(2 * cols + k)] = static_cast<float>(k % 9) - 4.5f;  // row 2: ties
      w[static_cast<size_t>(3 * cols + k)] *= std::ldexp(1.0f, -125);           // row 3: 127 / max overflows
      w[static_cast<size_t>(4 * cols + k)] = k % 2 ? std::ldexp(1.0f, -149) : 0.0f;  // row 4: scale 0
    }
    w[static_cast<size_t>(2 * cols)] = 127.0f;  // row 2's largest: scale 1, q = w to even
    std::vector<int8_t> q(static_cast<size_t>(int8_bytes(rows, cols)), 99), want(q.size(), 77);
    std::vector<float> s(rows, -1.0f), want_s(rows, -2.0f);
    CAPTURE(cols);
    CHECK(t.quantize_int8_rows(q.data(), s.data(), w.data(), rows, cols) == -1);
    CHECK(ref::table().quantize_int8_rows(want.data(), want_s.data(), w.data(), rows, cols) == -1);
    CHECK(q == want);
    for (int64_t j = 0; j < rows; ++j)
      CHECK(std::bit_cast<uint32_t>(s[j]) == std::bit_cast<uint32_t>(want_s[j]));
    w[static_cast<size_t>(7 * cols + cols / 2)] = std::numeric_limits<float>::infinity();
    w[static_cast<size_t>(5 * cols)] = -std::numeric_limits<float>::quiet_NaN();
    CHECK(t.quantize_int8_rows(q.data(), s.data(), w.data(), rows, cols) == 5);
  }
  // threaded (2,047 x 768, past a million values; a partial tile): the same, and the first bad row of two in
  // different threads' halves
  const int64_t rows = 2047, cols = 768;
  auto w = test::random_vec(rows * cols, 77, -0.1f, 0.1f);
  std::vector<int8_t> q(static_cast<size_t>(int8_bytes(rows, cols)), 99), want(q.size(), 77);
  std::vector<float> s(rows), want_s(rows);
  CHECK(t.quantize_int8_rows(q.data(), s.data(), w.data(), rows, cols) == -1);
  CHECK(ref::table().quantize_int8_rows(want.data(), want_s.data(), w.data(), rows, cols) == -1);
  CHECK(q == want);
  CHECK(s == want_s);
  w[static_cast<size_t>(1900 * cols + 3)] = std::numeric_limits<float>::quiet_NaN();
  w[static_cast<size_t>(700 * cols + 767)] = -std::numeric_limits<float>::infinity();
  CHECK(t.quantize_int8_rows(q.data(), s.data(), w.data(), rows, cols) == 700);
  // empty: no rows, or rows of no values (scale 0)
  std::vector<float> s0(3, -1.0f);
  CHECK(t.quantize_int8_rows(nullptr, s0.data(), w.data(), 0, cols) == -1);
  CHECK(s0[0] == -1.0f);
  CHECK(t.quantize_int8_rows(nullptr, s0.data(), w.data(), 3, 0) == -1);
  CHECK(s0 == std::vector<float>(3, 0.0f));
}
TG_OPS_ARCH_TESTS("quantize_int8_rows", "matches_ref", quantize_matches_ref)

}  // namespace

// The reference against the fp32 GEMM on the dequantized weight scale[j] * q[int8_offset(j, k, K)].
TEST_CASE("gemm_int8.reference_is_the_product_with_the_dequantized_weight") {
  Case c{3, 21, 37, false, true, 1.0f, 0.0f};
  test::GemmProblem p = test::gemm_problem(c, 5);
  const auto A = tg::ops::test::random_vec(p.a_size, 5);
  const Int8Weight B(c.N, c.K, 6);
  std::vector<float> w(static_cast<size_t>(p.b_size));
  for (int64_t j = 0; j < c.N; ++j)
    for (int64_t k = 0; k < c.K; ++k) w[j * p.g.ldb + k] = B.scale[j] * B.at(j, k, c.K);
  std::vector<float> want = p.C, got = p.C;
  ref::table().gemm(want.data(), A.data(), w.data(), p.g);
  ref::table().gemm_int8(got.data(), A.data(), B.rows(), p.g);
  test::check_gemm(got, want, c, "gemm_int8 reference");
}

TEST_CASE("gemm_int8.bad_descriptors_throw") {
  const std::vector<int8_t> q(64, 1);
  const std::vector<float> scale(8, 1.0f), a(64, 1.0f);
  std::vector<float> c(64);
  const Int8Rows b{q.data(), scale.data()};
  for (const KernelTable* t : {&ref::table(), &active()}) {
    CAPTURE(t->name);
    CHECK_THROWS_AS(t->gemm_int8(c.data(), a.data(), b, gemm_desc(2, 4, 8, false, false)),
                    std::invalid_argument);
    Gemm batched = gemm_desc(2, 4, 8, false, true, 1.0f, 0.0f, 2);
    CHECK_THROWS_AS(t->gemm_int8(c.data(), a.data(), b, batched), std::invalid_argument);
    Gemm short_ldb = gemm_desc(2, 4, 8, false, true);
    short_ldb.ldb = 7;
    CHECK_THROWS_AS(t->gemm_int8(c.data(), a.data(), b, short_ldb), std::invalid_argument);
    Gemm long_ldb = gemm_desc(2, 4, 8, false, true);  // the rows are tiled, not ldb apart
    long_ldb.ldb = 9;
    CHECK_THROWS_WITH_AS(t->gemm_int8(c.data(), a.data(), b, long_ldb),
                         doctest::Contains("ldb 9 must be K 8"), std::invalid_argument);
  }
}

// Each row's largest magnitude maps to +-127, every value lies within half a step (scale / 2) of its
// row's dequantized value, ties round to even, a row of zeros gets scale 0, and a row holding NaN
// or Inf is refused by its index. Large enough to be threaded.
TEST_CASE("quantize_int8_rows.rows_scales_and_errors") {
  // q's value k of row j (kernels.hpp's tiles), and every padding byte zero
  const auto at = [](const std::vector<int8_t>& q, int64_t j, int64_t k, int64_t K) {
    return static_cast<int>(q[static_cast<size_t>(int8_offset(j, k, K))]);
  };
  const auto padding_is_zero = [](const std::vector<int8_t>& q, int64_t N, int64_t K) {
    std::vector<bool> used(q.size(), false);
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) used[static_cast<size_t>(int8_offset(j, k, K))] = true;
    for (size_t i = 0; i < q.size(); ++i)
      if (!used[i] && q[i] != 0) return false;
    return true;
  };
  {
    const std::vector<float> w = {0.5f, -1.27f, 0.0f, 1.0f, 0.0f,  0.0f,
                                  0.0f, 0.0f,   2.5f, 0.5f, -1.5f, 127.0f};
    std::vector<int8_t> q(static_cast<size_t>(int8_bytes(3, 4)), 99);
    CHECK(q.size() == 4 * 64);  // one tile of 4 rows (the 4th padding), one chunk of 64 values
    std::vector<float> s(3);
    quantize_int8_rows(q.data(), s.data(), w.data(), 3, 4);
    CHECK(s[0] == doctest::Approx(0.01f));
    CHECK(at(q, 0, 0, 4) == 50);
    CHECK(at(q, 0, 1, 4) == -127);
    CHECK(at(q, 0, 2, 4) == 0);
    CHECK(at(q, 0, 3, 4) == 100);
    CHECK(s[1] == 0.0f);
    for (int k = 0; k < 4; ++k) CHECK(at(q, 1, k, 4) == 0);
    CHECK(s[2] == 1.0f);  // 127 / 127: 2.5 -> 2, 0.5 -> 0, -1.5 -> -2 (ties to even)
    CHECK(at(q, 2, 0, 4) == 2);
    CHECK(at(q, 2, 1, 4) == 0);
    CHECK(at(q, 2, 2, 4) == -2);
    CHECK(at(q, 2, 3, 4) == 127);
    CHECK(at(q, 1, 0, 4) == q[64]);  // row 1's chunk follows row 0's
    CHECK(padding_is_zero(q, 3, 4));
  }
  const int64_t rows = 1502, cols = 770;  // past the threading threshold; a partial tile and chunk
  auto w = tg::ops::test::random_vec(rows * cols, 11, -0.1f, 0.1f);
  for (int64_t k = 0; k < cols; ++k) w[7 * cols + k] *= 1e-30f;  // tiny values keep their row's scale
  std::vector<int8_t> q(static_cast<size_t>(int8_bytes(rows, cols)), 99);
  std::vector<float> s(static_cast<size_t>(rows));
  quantize_int8_rows(q.data(), s.data(), w.data(), rows, cols);
  for (int64_t j = 0; j < rows; ++j) {
    int amax = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const int v = at(q, j, k, cols);
      amax = std::max(amax, std::abs(v));
      if (std::fabs(w[static_cast<size_t>(j * cols + k)] - s[j] * static_cast<float>(v)) > 0.5001f * s[j])
        FAIL_CHECK("row " << j << " col " << k);
    }
    if (amax != 127) FAIL_CHECK("row " << j << ": largest |q| " << amax);
  }
  CHECK(padding_is_zero(q, rows, cols));
  // rows too small for 127 / max|w| in fp32 (q in double), and below the smallest scale (zeros)
  const float t = std::ldexp(1.0f, -133), least = std::ldexp(1.0f, -149);  // denormals
  std::vector<float> tiny = {t, -t / 2, 0.0f, t / 4, least, 0.0f, -least, 0.0f};
  std::vector<int8_t> tq(static_cast<size_t>(int8_bytes(2, 4)), 99);
  std::vector<float> ts(2, -1.0f);
  quantize_int8_rows(tq.data(), ts.data(), tiny.data(), 2, 4);
  CHECK(ts[0] > 0.0f);
  CHECK(at(tq, 0, 0, 4) == 127);
  CHECK(at(tq, 0, 1, 4) == -64);  // -63.5 -> -64 (ties to even), in double
  CHECK(at(tq, 0, 2, 4) == 0);
  CHECK(at(tq, 0, 3, 4) == 32);  // 31.75 -> 32
  CHECK(ts[1] == 0.0f);
  for (int k = 0; k < 4; ++k) CHECK(at(tq, 1, k, 4) == 0);
  CHECK(padding_is_zero(tq, 2, 4));
  w[123 * cols + 5] = std::numeric_limits<float>::quiet_NaN();
  w[900 * cols] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS(quantize_int8_rows(q.data(), s.data(), w.data(), rows, cols),
                       doctest::Contains("row 123 holds a value that is not finite"), std::invalid_argument);
}
