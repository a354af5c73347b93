// Helpers for the kernel tests: per-arch test registration, random data, check_close, and the
// awkward sizes every kernel is run on.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ops/kernels.hpp"
#include "tests/skip.hpp"

namespace tg::ops::test {

// TAPEGRAD_TEST_QUICK=1 (tools/test_neon.sh sets it for the qemu run) trims the largest shapes;
// the trimmed GEMM shapes still pass NEON's MC, KC and NC with partial blocks.
inline bool quick() {
  const char* q = std::getenv("TAPEGRAD_TEST_QUICK");
  return q && *q && *q != '0';
}

// Sizes around SIMD widths (4, 8, 16 lanes) and GEMM tiles: 1, below/at/above a batch, odd.
inline const std::vector<int64_t>& awkward_sizes() {
  static const std::vector<int64_t> all{1, 3, 7, 15, 16, 17, 31, 33, 63, 65, 127, 255, 257};
  static const std::vector<int64_t> small{1, 3, 7, 15, 16, 17, 31, 33, 63, 65};
  return quick() ? small : all;
}

inline std::vector<float> random_vec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Checks |got - want| <= atol + rtol * |want| elementwise (NaN never passes). On failure reports
// the number of bad elements, the first bad index and values, and the max difference.
inline bool check_close(const float* got, const float* want, int64_t n, double atol, double rtol,
                        const std::string& what) {
  int64_t bad = 0, first = -1, worst = -1;
  double max_diff = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    const bool ok = d <= atol + rtol * std::fabs(static_cast<double>(want[i]));  // false for NaN
    if (!std::isnan(max_diff) && (std::isnan(d) || d > max_diff)) max_diff = d, worst = i;
    if (!ok && bad++ == 0) first = i;
  }
  // One check either way: a passing comparison counts as a check (test_main fails a case that ran none).
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << n << " elements differ; first bad index " << first
                               << " (got " << got[first] << ", want " << want[first] << "); max |diff| "
                               << max_diff << " at " << worst << " (atol " << atol << ", rtol " << rtol
                               << ")");
  return bad == 0;
}
inline bool check_close(const std::vector<float>& got, const std::vector<float>& want, double atol,
                        double rtol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  return check_close(got.data(), want.data(), static_cast<int64_t>(got.size()), atol, rtol, what);
}

// d/dx of L(x) = sum_i w_i f(x)_i by central differences of a float forward f(y, x), summed in
// double: the truncation error is O(h^2), the rounding error O(1e-7 / h).
template <class Forward>
std::vector<float> fd_grad(std::vector<float> x, const std::vector<float>& w, Forward&& f, double h = 1e-2) {
  std::vector<float> y(w.size()), g(x.size());
  auto loss = [&] {
    f(y.data(), x.data());
    double s = 0.0;
    for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(w[i]) * y[i];
    return s;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i];
    x[i] = static_cast<float>(x0 + h);
    const double lp = loss();
    x[i] = static_cast<float>(x0 - h);
    const double lm = loss();
    x[i] = x0;
    g[i] = static_cast<float>((lp - lm) / (2.0 * h));
  }
  return g;
}

// Runs body(table) for one arch with 1 and then 2 OpenMP threads. An arch that is not compiled
// in or that this CPU lacks makes the case SKIPPED (tests/skip.hpp); meson runs each arch's cases as
// its own test (ops-<arch>), and .ci/run checks that every arch /proc/cpuinfo reports ran.
inline void run_on_arch(Arch a, const std::function<void(const KernelTable&)>& body) {
  bool available = false;
  for (Arch x : available_archs()) available = available || x == a;
  if (!available) TG_SKIP(std::string(arch_name(a)) + " is not available here (" + arch_report() + ")");
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_num_threads(threads);
    body(kernels(a));
  }
  set_num_threads(0);
}

// Finite-difference checks ("<kernel>.<arch>.<...>gradcheck") test a backward kernel against the
// math, so they also run on the scalar reference, the specification every other arch is compared
// with. (Other kernel tests compare an arch with the reference: on scalar that is the reference
// against itself, so they have no scalar case.)
constexpr bool checks_the_math(std::string_view what) {
  return what.ends_with("gradcheck");
}

// Whether arch a with bf16 path p runs here (compiled in, and the CPU has the instructions).
inline bool runs_here(Arch a, Bf16Path p) {
  bool available = false;
  for (Arch x : available_archs()) available = available || x == a;
  return available && has_bf16_path(a, p);
}

// body(table) for arch a with bf16 path p, with 1 and then 2 OpenMP threads; SKIPPED (tests/skip.hpp)
// where the arch or its bf16 dot-product instructions are missing.
inline void run_on_bf16_path(Arch a, Bf16Path p, const std::function<void(const KernelTable&)>& body) {
  if (!runs_here(a, p))
    TG_SKIP(std::string(arch_name(a)) +
            (p == Bf16Path::dot   ? " with bf16 dot products"
             : p == Bf16Path::amx ? " with AMX tiles"
                                  : "") +
            " is not available here (" + arch_report() + ")");
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_num_threads(threads);
    body(kernels(a, p));
  }
  set_num_threads(0);
}

#if defined(__x86_64__)
// The AMX kernel on an emulated tile unit (tests/ops/amx_emulated.cpp, avx512 flags).
void gemm_bf16_amx_emulated(float* C, const Operand& A, const Operand& B, const Gemm& g);
#endif

// body(table) for the avx512 table with gemm_bf16 on the AMX kernel over emulated tiles, 1, 2 and 4
// threads; SKIPPED where avx512 is missing (the kernel packs with AVX-512).
inline void run_on_amx_emulation(const std::function<void(const KernelTable&)>& body) {
#if defined(__x86_64__)
  if (!runs_here(Arch::avx512, Bf16Path::widen))
    TG_SKIP(std::string("avx512 (the emulated AMX kernel's packing) is not available here (") +
            arch_report() + ")");
  KernelTable t = kernels(Arch::avx512, Bf16Path::widen);
  t.gemm_bf16 = gemm_bf16_amx_emulated;
  t.gemm_bf16_path = "amx_bf16 packing and epilogue, emulated tiles";
  for (int threads : {1, 2, 4}) {  // 4: grids of 2 x 2 parts (bf16_split_2d)
    CAPTURE(threads);
    set_num_threads(threads);
    body(t);
  }
  set_num_threads(0);
#else
  (void)body;
  TG_SKIP("the AMX kernel is x86_64 only");
#endif
}

}  // namespace tg::ops::test

#define TG_OPS_BF16_TEST(kernel, arch, path, what, fn)                                 \
  TEST_CASE(kernel "." #arch "." #path "." what) {                                     \
    tg::ops::test::run_on_bf16_path(tg::ops::Arch::arch, tg::ops::Bf16Path::path, fn); \
  }
// One doctest case per arch and bf16 path (see Bf16Path), named "<kernel>.<arch>.<path>.<what>"
// (e.g. "gemm_bf16.avx512.dot.matches_ref"); a combination this machine lacks is reported skipped.
#define TG_OPS_BF16_TESTS(kernel, what, fn)         \
  TG_OPS_BF16_TEST(kernel, sse2, widen, what, fn)   \
  TG_OPS_BF16_TEST(kernel, avx2, widen, what, fn)   \
  TG_OPS_BF16_TEST(kernel, avx512, widen, what, fn) \
  TG_OPS_BF16_TEST(kernel, avx512, dot, what, fn)   \
  TG_OPS_BF16_TEST(kernel, avx512, amx, what, fn)   \
  TEST_CASE(kernel ".avx512.amx_emulated." what) {  \
    tg::ops::test::run_on_amx_emulation(fn);        \
  }                                                 \
  TG_OPS_BF16_TEST(kernel, neon, widen, what, fn)   \
  TG_OPS_BF16_TEST(kernel, neon, dot, what, fn)

// One doctest case per SIMD arch, named "<kernel>.<arch>.<what>" (e.g. "gemm.avx2.matches_ref"),
// all running the same body: void fn(const tg::ops::KernelTable&). A case whose arch is missing here
// is SKIPPED. For a "...gradcheck" `what`, also "<kernel>.scalar.<what>" on the scalar reference.
#define TG_OPS_ARCH_TESTS(kernel, what, fn)                                                              \
  TEST_CASE(kernel ".sse2." what) {                                                                      \
    tg::ops::test::run_on_arch(tg::ops::Arch::sse2, fn);                                                 \
  }                                                                                                      \
  TEST_CASE(kernel ".avx2." what) {                                                                      \
    tg::ops::test::run_on_arch(tg::ops::Arch::avx2, fn);                                                 \
  }                                                                                                      \
  TEST_CASE(kernel ".avx512." what) {                                                                    \
    tg::ops::test::run_on_arch(tg::ops::Arch::avx512, fn);                                               \
  }                                                                                                      \
  TEST_CASE(kernel ".neon." what) {                                                                      \
    tg::ops::test::run_on_arch(tg::ops::Arch::neon, fn);                                                 \
  }                                                                                                      \
  [[maybe_unused]] static const int DOCTEST_ANONYMOUS(tg_ops_scalar_) =                                  \
      tg::ops::test::checks_the_math(what)                                                               \
          ? doctest::detail::regTest(doctest::detail::TestCase(                                          \
                                         +[] { tg::ops::test::run_on_arch(tg::ops::Arch::scalar, fn); }, \
                                         __FILE__, __LINE__,                                             \
                                         doctest_detail_test_suite_ns::getCurrentTestSuite()) *          \
                                     (kernel ".scalar." what))                                           \
          : 0;
