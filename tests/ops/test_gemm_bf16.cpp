// bf16 GEMM on every arch and bf16 path (widen everywhere; dot = vdpbf16ps / BFMMLA where the CPU
// has it) vs the scalar reference (operands rounded to bf16, fp32 accumulation): awkward sizes with
// all four transposes, every combination of fp32 and bf16 operands, odd K (pairs and fours need
// padding), K = 0, empty M/N/batch, alpha, beta 0/1/other, the bias, padded leading dimensions,
// batches (strided, broadcast, summed into one C), several cache blocks, 1 and 2 threads; the
// few-row path against bf16 weights.
#include <stdexcept>

#include "tests/ops/gemm_test_case.hpp"

namespace {
using namespace tg::ops;
using Case = tg::ops::test::GemmCase;

// An operand's storage: fp32 values, or their bf16 rounding.
struct Storage {
  std::vector<float> f;
  std::vector<bf16> h;
  Storage(int64_t n, uint32_t seed, DType d) : f(test::random_vec(n, seed)) {
    if (d == DType::bf16) {
      h.resize(f.size());
      for (size_t i = 0; i < f.size(); ++i) h[i] = to_bf16(f[i]);
      f.clear();
    }
  }
  Operand op() const { return h.empty() ? operand(f.data()) : operand(h.data()); }
};

void run_bf16_case(const KernelTable& t, const Case& c, uint32_t seed) {
  test::GemmProblem p = test::gemm_problem(c, seed);
  const Storage A(p.a_size, seed, c.da), B(p.b_size, seed + 1, c.db);
  std::vector<float> want = p.C;
  ref::table().gemm_bf16(want.data(), A.op(), B.op(), p.g);
  t.gemm_bf16(p.C.data(), A.op(), B.op(), p.g);
  test::check_gemm(p.C, want, c,
                   std::string(t.name) + " " + t.gemm_bf16_path + " " + describe("gemm_bf16", c));
}

constexpr DType kTypes[4][2] = {{DType::f32, DType::f32},
                                {DType::bf16, DType::bf16},
                                {DType::f32, DType::bf16},
                                {DType::bf16, DType::f32}};

// Every awkward size as M, N and K (odd K among them), all four transposes, all operand types.
void bf16_matches_ref(const KernelTable& t) {
  uint32_t seed = 1;
  for (const auto [M, N, K] : test::awkward_shapes())
    for (const auto [ta, tb] : test::kTransposes)
      for (const auto& types : kTypes) {
        Case c{M, N, K, ta, tb};
        c.da = types[0], c.db = types[1];
        run_bf16_case(t, c, seed++);
      }
}
TG_OPS_BF16_TESTS("gemm_bf16", "matches_ref", bf16_matches_ref)

// alpha, beta (0 with NaN in C, 1, other), the bias; a product large enough to be threaded.
void alpha_beta_bias(const KernelTable& t) {
  uint32_t seed = 200;
  for (float beta : {0.0f, 1.0f, -0.75f})
    for (float alpha : {1.0f, 0.5f, -2.0f})
      for (const auto [ta, tb] : test::kTransposes) {
        Case c{33, 17, 65, ta, tb, alpha, beta};
        c.bias = alpha != 1.0f;
        c.da = ta && !tb ? DType::bf16 : DType::f32;
        run_bf16_case(t, c, seed++);
      }
  for (const auto [ta, tb] :
       test::kTransposes) {  // >= 1M multiply-adds: threaded inside, edge tiles in both directions
    Case c{129, 95, 131, ta, tb, 0.25f, 0.5f};
    c.bias = true, c.db = DType::bf16;
    run_bf16_case(t, c, seed++);
  }
  for (const auto [ta, tb] : test::kTransposes) {  // a linear layer's forward: alpha 1, beta 0 and the
    Case c{96, 70, 600, ta, tb};                   // bias, whole tiles and edge ones, K past one block
    c.bias = true;
    run_bf16_case(t, c, seed++);
  }
}
TG_OPS_BF16_TESTS("gemm_bf16", "alpha_beta_bias", alpha_beta_bias)

// K = 0: C = beta * C (+ bias), NaNs cleared by beta = 0; M, N or batch = 0: nothing written.
void empty(const KernelTable& t) {
  run_bf16_case(t, {7, 9, 0}, 300);
  Case c{7, 9, 0, true, true, 1.0f, 0.5f};
  c.bias = true;
  run_bf16_case(t, c, 301);
  for (Case e : {Case{0, 9, 5}, Case{7, 0, 5}, Case{0, 0, 0}}) run_bf16_case(t, e, 302);
  Case nob{5, 6, 7};
  nob.batch = 0;
  run_bf16_case(t, nob, 303);
}
TG_OPS_BF16_TESTS("gemm_bf16", "empty", empty)

// Padded leading dimensions (test::leading_dim_cases) with every operand type.
void bf16_leading_dims(const KernelTable& t) {
  uint32_t seed = 400;
  for (const auto [ta, tb] : test::kTransposes)
    for (const auto& types : kTypes)
      for (Case c : test::leading_dim_cases(ta, tb)) {
        c.da = types[0], c.db = types[1];
        run_bf16_case(t, c, seed++);
      }
}
TG_OPS_BF16_TESTS("gemm_bf16", "leading_dims", bf16_leading_dims)

void bf16_batched(const KernelTable& t) {
  uint32_t seed = 500;
  for (const auto [ta, tb] : test::kTransposes) {
    for (const Case& c : test::batch_layouts(ta, tb)) run_bf16_case(t, c, seed++);
    Case heads{32, 32, 64, ta, tb, 0.5f, 0.0f, 1, 0, 2, 37};  // attention-sized, one matrix per thread
    heads.da = heads.db = DType::bf16;
    run_bf16_case(t, heads, seed++);
  }
  Case c{16, 32, 33, false, false, 1.0f, 0.0f, 1, 0, 2, 7, false, false, false, true};
  run_bf16_case(t, c, seed++);
}
TG_OPS_BF16_TESTS("gemm_bf16", "batched", bf16_batched)

// The few-row path (ops::bf16_few_rows: up to 4 rows against a transposed bf16 B, a decoding step
// against bf16 weights; B streamed, not packed) and its neighbours: 1..5 rows, A fp32 (rounded) or
// bf16, op(A) as stored or transposed, K below, at and past a vector with a tail, N with 0-3 columns
// past the 4-column tiles, alpha/beta/bias, padded leading dimensions, batches (either A layout),
// and products large enough to split their columns across threads (a GPT-2 projection's 768 x 3072).
void few_rows(const KernelTable& t) {
  uint32_t seed = 700;
  for (int64_t M : {1, 2, 3, 4, 5})
    for (int64_t K : {1, 7, 16, 33, 100})
      for (bool ta : {false, true})
        for (DType da : {DType::f32, DType::bf16}) {
          Case c{M, 4 * M + K % 4, K, ta, true, M == 3 ? 0.5f : 1.0f, M == 2 ? 1.0f : 0.0f};
          c.bias = M % 2 == 1, c.da = da, c.db = DType::bf16;
          run_bf16_case(t, c, seed++);
        }
  for (bool ta : {false, true})
    for (const Case& layout : test::batch_layouts(ta, true)) {
      Case c = layout;
      c.M = 1 + c.M % 4, c.db = DType::bf16;
      run_bf16_case(t, c, seed++);
    }
  for (Case c : test::leading_dim_cases(false, true)) {
    c.M = 3, c.db = DType::bf16;
    run_bf16_case(t, c, seed++);
  }
  for (int64_t M : {1, 4}) {  // threaded: columns split across the threads
    Case c{M, 3072 + 5, 768, false, true, 1.0f, 0.0f};
    c.bias = true, c.db = DType::bf16;
    run_bf16_case(t, c, seed++);
  }
}
TG_OPS_BF16_TESTS("gemm_bf16", "few_rows", few_rows)

// Past one cache block in every dimension (K blocks of every kernel's KC with an odd remainder,
// several row blocks, N past NC), threaded; the shapes of a Transformer layer's three products.
void bf16_multi_block(const KernelTable& t) {
  const bool q = test::quick();
  uint32_t seed = 600;
  for (const auto [ta, tb] : test::kTransposes) {
    Case c{q ? 130 : 301, q ? 70 : 203, q ? 515 : 1101, ta, tb, 1.0f, 0.5f};
    c.bias = true, c.da = ta ? DType::bf16 : DType::f32;
    run_bf16_case(t, c, seed++);
    run_bf16_case(t, {9, q ? 4200 : 4500, 13, ta, tb}, seed++);
    Case w{q ? 40 : 96, 64, q ? 600 : 2100, ta, tb};  // a weight gradient: few rows, long K
    w.db = DType::bf16;
    run_bf16_case(t, w, seed++);
  }
  // Enough row blocks (8 at 2 threads) that the threads share the packed B panels, packed a few per
  // call: B not transposed (rows read across a call's panels), 5 panels (4 + 1 partial), 2 K blocks.
  for (const bool ta : {false, true})
    for (const DType db : {DType::f32, DType::bf16}) {
      if (q && ta) continue;
      Case s{1900, 4 * 32 + 7, 515, ta, false};
      s.db = db;
      run_bf16_case(t, s, seed++);
    }
  // One row block (M <= MC): B packed and multiplied a few panels at a time, the panels after the
  // first group read from their own columns of B; 5 panels + a partial one, 3 K blocks.
  for (const auto [ta, tb] : test::kTransposes)
    for (const DType db : {DType::f32, DType::bf16}) {
      if (q && db == DType::bf16) continue;
      Case r{200, 5 * 32 + 7, 1100, ta, tb, 1.0f, 0.5f};
      r.bias = true, r.db = db;
      run_bf16_case(t, r, seed++);
    }
}
TG_OPS_BF16_TESTS("gemm_bf16", "multi_block", bf16_multi_block)

TEST_CASE("gemm_bf16.validate.bad_descriptors_throw") {
  std::vector<float> a(64, 1.0f), c(64, 7.0f);
  std::vector<bf16> b(64, to_bf16(1.0f));
  for (Arch arch : available_archs()) {
    const KernelTable& t = kernels(arch);
    CAPTURE(t.name);
    Gemm g = gemm_desc(4, 4, 4);
    g.lda = 3;
    CHECK_THROWS_WITH_AS(t.gemm_bf16(c.data(), operand(a.data()), operand(b.data()), g),
                         doctest::Contains("lda 3"), std::invalid_argument);
    g = gemm_desc(-1, 4, 4);
    CHECK_THROWS_AS(t.gemm_bf16(c.data(), operand(a.data()), operand(b.data()), g), std::invalid_argument);
    CHECK(c[0] == 7.0f);
  }
}

}  // namespace
