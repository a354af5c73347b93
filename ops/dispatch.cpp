// Arch selection: which KernelTable the free functions in kernels.hpp call.
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "ops/kernels.hpp"

namespace tg::ops {

Gemm gemm_desc(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, float alpha, float beta,
               int64_t batch) {
  Gemm g;
  g.M = M, g.N = N, g.K = K;
  g.trans_a = trans_a, g.trans_b = trans_b;
  g.alpha = alpha, g.beta = beta;
  g.lda = trans_a ? M : K;
  g.ldb = trans_b ? K : N;
  g.ldc = N;
  g.batch = batch;
  g.stride_a = M * K, g.stride_b = K * N, g.stride_c = M * N;
  return g;
}

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::scalar: return "scalar";
    case Arch::sse2: return "sse2";
    case Arch::avx2: return "avx2";
    case Arch::avx512: return "avx512";
    case Arch::neon: return "neon";
  }
  return "?";
}

Arch parse_arch(const std::string& s) {
  for (Arch a : {Arch::scalar, Arch::sse2, Arch::avx2, Arch::avx512, Arch::neon})
    if (s == arch_name(a)) return a;
  throw std::invalid_argument("unknown arch '" + s + "' (expected scalar, sse2, avx2, avx512 or neon)");
}

std::vector<Arch> available_archs() { return {Arch::scalar}; }

const KernelTable& kernels(Arch a) {
  if (a == Arch::scalar) return ref::table();
  throw std::runtime_error(std::string("arch ") + arch_name(a) + " is not available on this machine/build");
}

namespace {
std::atomic<const KernelTable*> g_active{nullptr};
std::atomic<int> g_arch{-1};

Arch default_arch() {
  if (const char* env = std::getenv("TAPEGRAD_ARCH"); env && *env) return parse_arch(env);
  return available_archs().back();
}
}  // namespace

Arch active_arch() {
  if (g_arch.load() < 0) set_arch(default_arch());
  return static_cast<Arch>(g_arch.load());
}

const KernelTable& active() {
  const KernelTable* t = g_active.load(std::memory_order_acquire);
  if (!t) {
    active_arch();
    t = g_active.load(std::memory_order_acquire);
  }
  return *t;
}

void set_arch(Arch a) {
  const KernelTable& t = kernels(a);
  g_active.store(&t, std::memory_order_release);
  g_arch.store(static_cast<int>(a));
}

namespace {
int g_default_threads = -1;
}
int num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) {
  if (g_default_threads < 0) g_default_threads = omp_get_max_threads();
  omp_set_num_threads(n > 0 ? n : g_default_threads);
}

}  // namespace tg::ops
