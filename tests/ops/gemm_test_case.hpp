// One GEMM test case, shared by the fp32 (test_gemm.cpp) and bf16 (test_gemm_bf16.cpp) GEMM tests:
// its shape and layout, the Gemm descriptor and buffers that layout implies, and the tolerance.
#pragma once

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "tests/ops/ops_test_util.hpp"

namespace tg::ops::test {

struct GemmCase {
  int64_t M, N, K;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // extra elements in each stored row (ld > width)
  int64_t batch = 1;
  bool broadcast_a = false, broadcast_b = false, accumulate_c = false;  // stride 0
  bool bias = false;                                                    // Gemm::bias, random
  DType da = DType::f32, db = DType::f32;                               // operand types (gemm_bf16)
};

// The four (op(A), op(B)) combinations: as stored, A transposed, B transposed, both.
struct Transposes {
  bool ta, tb;
};
inline constexpr Transposes kTransposes[4] = {{false, false}, {true, false}, {false, true}, {true, true}};

inline std::string describe(const std::string& kernel, const GemmCase& c) {
  auto dt = [](DType d) { return d == DType::bf16 ? "bf16" : "f32"; };
  return kernel + " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " ta=" + std::to_string(c.trans_a) + " tb=" + std::to_string(c.trans_b) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) +
         " pads=" + std::to_string(c.pad_a) + "," + std::to_string(c.pad_b) + "," + std::to_string(c.pad_c) +
         " batch=" + std::to_string(c.batch) + (c.broadcast_a ? " bcastA" : "") +
         (c.broadcast_b ? " bcastB" : "") + (c.accumulate_c ? " sumC" : "") + (c.bias ? " bias" : "") +
         " A " + dt(c.da) + " B " + dt(c.db);
}

// Shapes in which every awkward size (test::awkward_sizes) appears as M, N and K at least once.
struct Mnk {
  int64_t M, N, K;
};
inline std::vector<Mnk> awkward_shapes() {
  const auto& s = awkward_sizes();
  const size_t n = s.size();
  std::vector<Mnk> out;
  for (size_t i = 0; i < n; ++i) out.push_back({s[i], s[(i + 3) % n], s[(i + 7) % n]});
  return out;
}

// Padded leading dimensions (ld > width), odd ones included (a bf16 pair then starts at an odd
// element), K odd and even: a product into a fresh C, then a larger one adding into C (beta = 1).
inline std::vector<GemmCase> leading_dim_cases(bool ta, bool tb) {
  return {{31, 33, 17, ta, tb, 1.0f, 0.0f, 5, 3, 7}, {65, 47, 70, ta, tb, 1.0f, 1.0f, 1, 2, 7}};
}

// The batch layouts every batched GEMM handles, with op(A) and op(B) as ta and tb say: strided
// matrices, A or B broadcast over the batch (stride 0), and every entry adding into one C
// (stride_c = 0 with beta = 1: a sum over the batch).
inline std::vector<GemmCase> batch_layouts(bool ta, bool tb) {
  return {{17, 15, 33, ta, tb, 1.0f, 0.0f, 0, 0, 0, 5},
          {7, 33, 17, ta, tb, 1.0f, 0.0f, 0, 0, 0, 6, true, false},
          {33, 7, 17, ta, tb, 1.0f, 1.0f, 0, 0, 0, 6, false, true},
          {15, 17, 9, ta, tb, 1.0f, 1.0f, 0, 0, 0, 9, false, false, true}};
}

// The descriptor of a case, how many elements A and B hold (one past the last matrix, so reading
// past the end shows), and C: random, a sentinel in the padding columns and one past the end (both
// must stay untouched), NaN where beta == 0 (C is write-only then).
struct GemmProblem {
  Gemm g;
  int64_t a_size = 0, b_size = 0;
  std::vector<float> C, bias;
};

inline GemmProblem gemm_problem(const GemmCase& c, uint32_t seed) {
  constexpr float kSentinel = 12345.0f;
  GemmProblem p;
  Gemm& g = p.g;
  g.M = c.M, g.N = c.N, g.K = c.K, g.trans_a = c.trans_a, g.trans_b = c.trans_b;
  g.alpha = c.alpha, g.beta = c.beta, g.batch = c.batch;
  const int64_t a_rows = c.trans_a ? c.K : c.M, a_cols = c.trans_a ? c.M : c.K;
  const int64_t b_rows = c.trans_b ? c.N : c.K, b_cols = c.trans_b ? c.K : c.N;
  g.lda = a_cols + c.pad_a, g.ldb = b_cols + c.pad_b, g.ldc = std::max<int64_t>(1, c.N + c.pad_c);
  g.stride_a = c.broadcast_a ? 0 : a_rows * g.lda;
  g.stride_b = c.broadcast_b ? 0 : b_rows * g.ldb;
  g.stride_c = c.accumulate_c ? 0 : c.M * g.ldc;
  p.a_size = (c.broadcast_a ? 1 : c.batch) * a_rows * g.lda + 1;
  p.b_size = (c.broadcast_b ? 1 : c.batch) * b_rows * g.ldb + 1;
  const int64_t n_c = c.accumulate_c ? 1 : c.batch;
  p.C = random_vec(n_c * c.M * g.ldc + 1, seed + 2);
  for (int64_t i = 0; i < static_cast<int64_t>(p.C.size()); ++i) {
    if (i % g.ldc >= c.N || i == static_cast<int64_t>(p.C.size()) - 1)
      p.C[i] = kSentinel;
    else if (c.beta == 0.0f)
      p.C[i] = std::numeric_limits<float>::quiet_NaN();
  }
  p.bias = random_vec(c.N + 1, seed + 3);
  if (c.bias) g.bias = p.bias.data();
  return p;
}

// fp32 accumulation over K terms (K * batch when every entry sums into one C) of products of
// values in [-1, 1]: the rounding grows with K.
inline void check_gemm(const std::vector<float>& got, const std::vector<float>& want, const GemmCase& c,
                       const std::string& what) {
  const double kmag = static_cast<double>(c.K) * (c.accumulate_c ? c.batch : 1);
  check_close(got, want, 1e-6 * (4.0 + kmag), 1e-5, what);
}

}  // namespace tg::ops::test
