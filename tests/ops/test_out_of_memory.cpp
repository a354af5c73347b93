// Running out of memory inside a kernel: the kernels take their scratch before opening an OpenMP
// region, so a failed allocation reaches the caller as std::bad_alloc (thrown inside a region it
// would call std::terminate and abort the test binary). testing::set_scratch_limit makes the
// scratch allocations fail; each case runs with 2 threads on shapes that are threaded, then checks
// the kernel still works once the limit is lifted.
#include <new>

#include "tests/ops/ops_test_util.hpp"

namespace {
using namespace tg::ops;
using tg::ops::test::check_close;

// Lifts the limit when a check fails half-way.
struct ScratchLimit {
  explicit ScratchLimit(std::size_t bytes) { testing::set_scratch_limit(bytes); }
  ~ScratchLimit() { testing::set_scratch_limit(0); }
};

// A GEMM that needs more than 4 KiB of scratch fails with bad_alloc, then matches the reference.
void gemm_case(const KernelTable& t, Gemm g) {
  const int64_t a_size = g.M * g.K * g.batch, b_size = g.K * g.N * g.batch, c_size = g.M * g.N * g.batch;
  const auto A = test::random_vec(a_size, 1), B = test::random_vec(b_size, 2);
  std::vector<float> C(static_cast<size_t>(c_size), 0.0f), want = C;
  {
    ScratchLimit limit(4096);
    CHECK_THROWS_AS(t.gemm(C.data(), A.data(), B.data(), g), std::bad_alloc);
  }
  t.gemm(C.data(), A.data(), B.data(), g);
  ref::table().gemm(want.data(), A.data(), B.data(), g);
  check_close(C, want, 1e-6 * (4.0 + static_cast<double>(g.K)), 1e-5,
              std::string(t.name) + " gemm after bad_alloc");
}

// The bf16 GEMM (the table's default path: vdpbf16ps / BFMMLA where the CPU has it), threaded
// inside and batched one matrix per thread.
void gemm_bf16_case(const KernelTable& t, Gemm g) {
  const auto A = test::random_vec(g.M * g.K * g.batch, 5), B = test::random_vec(g.K * g.N * g.batch, 6);
  std::vector<float> C(static_cast<size_t>(g.M * g.N * g.batch), 0.0f), want = C;
  {
    ScratchLimit limit(4096);
    CHECK_THROWS_AS(t.gemm_bf16(C.data(), operand(A.data()), operand(B.data()), g), std::bad_alloc);
  }
  t.gemm_bf16(C.data(), operand(A.data()), operand(B.data()), g);
  ref::table().gemm_bf16(want.data(), operand(A.data()), operand(B.data()), g);
  check_close(C, want, 1e-6 * (4.0 + static_cast<double>(g.K)), 1e-5,
              std::string(t.name) + " gemm_bf16 after bad_alloc");
}

void gemm_bf16_paths(const KernelTable& t) {
  gemm_bf16_case(t, gemm_desc(300, 200, 300));
  gemm_bf16_case(t, gemm_desc(32, 32, 64, false, true, 1, 0, 64));
}

void gemm_paths(const KernelTable& t) {
  gemm_case(t, gemm_desc(300, 200, 300));                         // threaded inside, shared packed B
  gemm_case(t, gemm_desc(96, 128, 2100, true, false));            // split K between threads
  gemm_case(t, gemm_desc(32, 32, 64, false, true, 1, 0, 64));     // a batch, one matrix per thread
  gemm_case(t, gemm_desc(3, 2000, 1500, false, false, 1, 0, 8));  // few rows, batch per thread
}

void softmax_masked(const KernelTable& t) {
  const int64_t rows = 4096, cols = 2048;
  const auto x = test::random_vec(rows * cols, 3);
  std::vector<uint8_t> pad(static_cast<size_t>(cols), 0);
  pad[5] = 1;
  SoftmaxMask m;
  m.key_mask = pad.data();
  m.q_len = rows;
  std::vector<float> y(x.size()), want(x.size());
  {
    ScratchLimit limit(1024);  // the masked rows: 2 x 2048 floats
    CHECK_THROWS_AS(t.softmax_forward(y.data(), x.data(), rows, cols, m), std::bad_alloc);
  }
  t.softmax_forward(y.data(), x.data(), rows, cols, m);
  ref::table().softmax_forward(want.data(), x.data(), rows, cols, m);
  check_close(y, want, 1e-6, 1e-5, std::string(t.name) + " softmax after bad_alloc");
}

void partial_sums(const KernelTable& t) {
  const int64_t rows = 8192, cols = 1024;
  const auto dout = test::random_vec(rows * cols, 4);
  std::vector<float> db(static_cast<size_t>(cols), 0.0f);
  ScratchLimit limit(1024);  // one partial row per thread: 2 x 1024 floats
  CHECK_THROWS_AS(t.bias_backward(db.data(), dout.data(), rows, cols), std::bad_alloc);
}

TG_OPS_ARCH_TESTS("out_of_memory", "gemm_throws_bad_alloc", gemm_paths)
TG_OPS_ARCH_TESTS("out_of_memory", "gemm_bf16_throws_bad_alloc", gemm_bf16_paths)
TG_OPS_ARCH_TESTS("out_of_memory", "softmax_throws_bad_alloc", softmax_masked)
TG_OPS_ARCH_TESTS("out_of_memory", "partial_sums_throw_bad_alloc", partial_sums)

}  // namespace
