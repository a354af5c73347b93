// Arch selection: which KernelTable the free functions in kernels.hpp call.
// This TU is compiled without -m flags, so it names xsimd arch *tags* only (never batch types):
// xsimd::available_architectures() reads CPUID, the tables come from ops/arch_*.cpp.
#include <omp.h>
#include <xsimd/xsimd.hpp>

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "ops/arch_tables.hpp"
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

void validate(const Gemm& g) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("ops::gemm: " + what + " (M=" + std::to_string(g.M) +
                                " N=" + std::to_string(g.N) + " K=" + std::to_string(g.K) + " trans_a=" +
                                std::to_string(g.trans_a) + " trans_b=" + std::to_string(g.trans_b) +
                                " lda=" + std::to_string(g.lda) + " ldb=" + std::to_string(g.ldb) +
                                " ldc=" + std::to_string(g.ldc) + " batch=" + std::to_string(g.batch) + ")");
  };
  if (g.M < 0 || g.N < 0 || g.K < 0 || g.batch < 0) fail("negative size");
  // stored row lengths: A is M x K (K x M when transposed), B is K x N (N x K), C is M x N
  const int64_t a_row = g.trans_a ? g.M : g.K, b_row = g.trans_b ? g.K : g.N;
  if (g.M > 0 && g.K > 0 && g.lda < a_row)
    fail("lda " + std::to_string(g.lda) + " < row length of A " + std::to_string(a_row));
  if (g.N > 0 && g.K > 0 && g.ldb < b_row)
    fail("ldb " + std::to_string(g.ldb) + " < row length of B " + std::to_string(b_row));
  if (g.M > 0 && g.ldc < g.N) fail("ldc " + std::to_string(g.ldc) + " < N");
  if (g.bias && g.batch > 1 && g.stride_c == 0)
    fail("a bias with stride_c == 0 would be added once per batch entry to the one C");
}

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::scalar:
      return "scalar";
    case Arch::sse2:
      return "sse2";
    case Arch::avx2:
      return "avx2";
    case Arch::avx512:
      return "avx512";
    case Arch::neon:
      return "neon";
  }
  return "?";
}

Arch parse_arch(const std::string& s) {
  for (Arch a : {Arch::scalar, Arch::sse2, Arch::avx2, Arch::avx512, Arch::neon})
    if (s == arch_name(a)) return a;
  throw std::invalid_argument("unknown arch '" + s + "' (expected scalar, sse2, avx2, avx512 or neon)");
}

namespace {
// Whether this CPU (and OS) runs the instructions arch a's TU was compiled for.
bool cpu_supports(Arch a) {
  const auto cpu = xsimd::available_architectures();
  switch (a) {
    case Arch::scalar:
      return true;
    case Arch::sse2:
      return cpu.sse2;
    case Arch::avx2:
      return cpu.fma3_avx2;  // the TU uses -mavx2 -mfma
    case Arch::avx512:
#if defined(__x86_64__)
      // -mavx512vl is not an xsimd field; ask the compiler's CPU model too.
      return cpu.avx512f && cpu.avx512dq && cpu.avx512bw && cpu.fma3_avx2 &&
             __builtin_cpu_supports("avx512vl");
#else
      return false;
#endif
    case Arch::neon:
      return cpu.neon64;
  }
  return false;
}

// Whether this build has a table for arch a. Answered without calling table_<arch>(): that
// function is compiled with the arch's flags, and building its table may already execute the
// arch's instructions (an AVX-512 build's table_avx512() does, with zmm moves), so it must never
// run on a CPU without them.
bool compiled(Arch a) {
  switch (a) {
    case Arch::scalar:
      return true;
    case Arch::sse2:
    case Arch::avx2:
    case Arch::avx512:
#if defined(__x86_64__)
      return true;
#else
      return false;
#endif
    case Arch::neon:
#if defined(__aarch64__)
      return true;
#else
      return false;
#endif
  }
  return false;
}

// The table an arch was compiled into; call only when compiled(a) && cpu_supports(a).
const KernelTable* compiled_table(Arch a) {
  switch (a) {
    case Arch::scalar:
      return &ref::table();
#if defined(__x86_64__)
    case Arch::sse2:
      return &table_sse2();
    case Arch::avx2:
      return &table_avx2();
    case Arch::avx512:
      return &table_avx512();
#endif
#if defined(__aarch64__)
    case Arch::neon:
      return &table_neon();
#endif
    default:
      return nullptr;
  }
}

std::string names(const std::vector<Arch>& archs) {
  std::string s;
  for (Arch a : archs) s += std::string(s.empty() ? "" : " ") + arch_name(a);
  return s;
}

// Whether this CPU has arch a's bf16 dot-product instructions (asked only when it has a's own).
bool cpu_has_bf16_dot(Arch a) {
  switch (a) {
#if defined(__x86_64__)
    case Arch::avx512:
      return __builtin_cpu_supports("avx512bf16");
#endif
#if defined(__aarch64__)
    case Arch::neon:
      return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#endif
    default:
      return false;
  }
}

// Arch a's table with the dot-product bf16 GEMM: a copy of its table with gemm_bf16 replaced (the
// copy is made here, without any arch flags). Call only when has_bf16_dot(a).
const KernelTable* dot_table(Arch a) {
  switch (a) {
#if defined(__x86_64__)
    case Arch::avx512: {
      static const KernelTable t = [] {
        KernelTable d = table_avx512();
        d.gemm_bf16 = gemm_bf16_avx512_dot;
        d.gemm_bf16_path = kGemmBf16Avx512DotPath;
        return d;
      }();
      return &t;
    }
#endif
#if defined(__aarch64__)
    case Arch::neon: {
      static const KernelTable t = [] {
        KernelTable d = table_neon();
        d.gemm_bf16 = gemm_bf16_neon_dot;
        d.gemm_bf16_path = kGemmBf16NeonDotPath;
        return d;
      }();
      return &t;
    }
#endif
    default:
      return nullptr;
  }
}

// TAPEGRAD_BF16=widen keeps every table on the widen path; unset (or "dot") uses dot where it can.
bool dot_allowed() {
  static const bool allowed = [] {
    const char* env = std::getenv("TAPEGRAD_BF16");
    if (!env || !*env || std::string(env) == "dot") return true;
    if (std::string(env) == "widen") return false;
    throw std::runtime_error(std::string("TAPEGRAD_BF16=") + env + ": expected widen or dot");
  }();
  return allowed;
}
}  // namespace

const char* bf16_path_name(Bf16Path p) {
  return p == Bf16Path::dot ? "dot" : "widen";
}

bool has_bf16_dot(Arch a) {
  return compiled(a) && cpu_supports(a) && cpu_has_bf16_dot(a) && dot_table(a) != nullptr;
}

const KernelTable& kernels(Arch a, Bf16Path p) {
  kernels(a);  // throws if a is unavailable
  if (p == Bf16Path::widen) return *compiled_table(a);
  if (!has_bf16_dot(a))
    throw std::runtime_error(std::string("ops::kernels: arch ") + arch_name(a) +
                             " has no bf16 dot-product path here (" +
                             (a == Arch::avx512 || a == Arch::neon ? "this CPU lacks the bf16 instructions"
                                                                   : "none exists for this arch") +
                             ")");
  return *dot_table(a);
}

std::vector<Arch> available_archs() {
  std::vector<Arch> out;
  for (Arch a : {Arch::scalar, Arch::sse2, Arch::neon, Arch::avx2, Arch::avx512})  // best last
    if (compiled(a) && cpu_supports(a)) out.push_back(a);
  return out;
}

const KernelTable& kernels(Arch a) {
  if (compiled(a) && cpu_supports(a))
    return dot_allowed() && has_bf16_dot(a) ? *dot_table(a) : *compiled_table(a);
  throw std::runtime_error(
      std::string("ops::kernels: arch ") + arch_name(a) + " is not available (" +
      (compiled(a) ? "this CPU lacks its instructions" : "not compiled into this build") +
      "); available: " + names(available_archs()));
}

std::string arch_report() {
  const Arch a = active_arch();
  const KernelTable& t = active();
  const bool dot = t.gemm_bf16 != kernels(a, Bf16Path::widen).gemm_bf16;
  std::string why;
  if (!dot && has_bf16_dot(a)) why = ", TAPEGRAD_BF16=widen";
  return "available: " + names(available_archs()) + "; active: " + arch_name(a) +
         "; bf16 gemm: " + bf16_path_name(dot ? Bf16Path::dot : Bf16Path::widen) + " (" + t.gemm_bf16_path +
         why + ")";
}

namespace {
std::atomic<const KernelTable*> g_active{nullptr};
std::atomic<int> g_arch{-1};

Arch default_arch() {
  const char* env = std::getenv("TAPEGRAD_ARCH");
  if (!env || !*env) return available_archs().back();
  try {
    const Arch a = parse_arch(env);
    kernels(a);  // throws if unavailable
    return a;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("TAPEGRAD_ARCH=") + env + ": " + e.what());
  }
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
std::atomic<std::size_t> g_scratch_limit{0};
}  // namespace
void testing::set_scratch_limit(std::size_t bytes) {
  g_scratch_limit.store(bytes, std::memory_order_relaxed);
}
std::size_t testing::scratch_limit() {
  return g_scratch_limit.load(std::memory_order_relaxed);
}

int num_threads() {
  return omp_get_max_threads();
}
void set_num_threads(int n) {
  if (g_default_threads < 0) g_default_threads = omp_get_max_threads();
  omp_set_num_threads(n > 0 ? n : g_default_threads);
}

}  // namespace tg::ops
