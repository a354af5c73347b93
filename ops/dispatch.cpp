// Arch selection: which KernelTable the free functions in kernels.hpp call.
// This TU is compiled without -m flags, so it names xsimd arch *tags* only (never batch types):
// xsimd::available_architectures() reads CPUID, the tables come from ops/arch_*.cpp.
#include <omp.h>
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
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

#if defined(__x86_64__)
// AMX-TILE and AMX-BF16 in CPUID (leaf 7, EDX bits 24 and 22), AVX512_BF16, and Linux's permission to use the
// tile data: its state is 8 KiB per thread, so the kernel grants it per process on request
// (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, Linux 5.16+); without it the first tile instruction
// faults. Asked once, before any thread runs a tile instruction.
bool cpu_has_amx_bf16() {
  static const bool ok = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if (!(edx & (1u << 24)) || !(edx & (1u << 22))) return false;
    if (!__builtin_cpu_supports("avx512bf16")) return false;  // the packing rounds with vcvtne2ps2bf16
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}
#endif

// The dot tables' gemm_bf16: a few rows against a transposed bf16 B (ops::bf16_few_rows, decoding)
// go to the arch's widen entry (Widen: its table), which reads B in place; the dot kernel (Dot) would
// pack it all. Decided here, in a TU without bf16 flags, so the dot TUs compile nothing of that path.
template <const KernelTable& (*Widen)(), void (*Dot)(float*, const Operand&, const Operand&, const Gemm&)>
void dot_or_few_rows(float* C, const Operand& A, const Operand& B, const Gemm& g) {
  if (bf16_few_rows(g, B.dtype))
    Widen().gemm_bf16(C, A, B, g);
  else
    Dot(C, A, B, g);
}

// Table()'s copy with gemm_bf16 on Unit (few-row products on Table()'s own), made once here, without
// any arch flags; path names the unit in arch_report(); attention: the fused attention's products
// on the unit (null: the attention keeps fp32 products).
template <const KernelTable& (*Table)(), void (*Unit)(float*, const Operand&, const Operand&, const Gemm&)>
const KernelTable* unit_copy(const char* path, const AttentionBf16* attention = nullptr) {
  static const KernelTable t = [path, attention] {
    KernelTable d = Table();
    d.gemm_bf16 = dot_or_few_rows<Table, Unit>;
    d.gemm_bf16_path = path;
    d.attention_bf16 = attention;
    return d;
  }();
  return &t;
}

// Arch a's table with the dot-product bf16 GEMM. Call only when has_bf16_dot(a).
const KernelTable* dot_table(Arch a) {
  switch (a) {
#if defined(__x86_64__)
    case Arch::avx512:
      return unit_copy<table_avx512, gemm_bf16_avx512_dot>(kGemmBf16Avx512DotPath, &kAttentionBf16Avx512Dot);
#endif
#if defined(__aarch64__)
    case Arch::neon:
      return unit_copy<table_neon, gemm_bf16_neon_dot>(kGemmBf16NeonDotPath);
#endif
    default:
      return nullptr;
  }
}

// Arch a's table with the AMX bf16 GEMM (x86 avx512 only). Call only when has_bf16_path(a, amx).
const KernelTable* amx_table(Arch a) {
#if defined(__x86_64__)
  if (a == Arch::avx512) return unit_copy<table_avx512, gemm_bf16_amx>(kGemmBf16AmxPath);
#endif
  (void)a;
  return nullptr;
}

const KernelTable* unit_table(Arch a, Bf16Path p) {
  return p == Bf16Path::amx ? amx_table(a) : p == Bf16Path::dot ? dot_table(a) : nullptr;
}

// Whether the CPU has unit p's instructions for arch a (p: dot or amx; asked only when it has a's own).
bool cpu_has_unit(Arch a, Bf16Path p) {
  if (p == Bf16Path::dot) return cpu_has_bf16_dot(a);
#if defined(__x86_64__)
  return a == Arch::avx512 && cpu_has_amx_bf16();
#else
  return false;
#endif
}

// TAPEGRAD_BF16: auto (unset or empty), dot, amx or widen.
enum class Bf16Mode { automatic, dot, amx, widen };
Bf16Mode bf16_mode() {
  static const Bf16Mode mode = [] {
    const char* env = std::getenv("TAPEGRAD_BF16");
    if (!env || !*env || std::string(env) == "auto") return Bf16Mode::automatic;
    if (std::string(env) == "dot") return Bf16Mode::dot;
    if (std::string(env) == "amx") return Bf16Mode::amx;
    if (std::string(env) == "widen") return Bf16Mode::widen;
    throw std::runtime_error(std::string("TAPEGRAD_BF16=") + env + ": expected auto, dot, amx or widen");
  }();
  return mode;
}

// Throws unless arch a is compiled in and the CPU runs it.
void require_available(Arch a) {
  if (compiled(a) && cpu_supports(a)) return;
  throw std::runtime_error(
      std::string("ops::kernels: arch ") + arch_name(a) + " is not available (" +
      (compiled(a) ? "this CPU lacks its instructions" : "not compiled into this build") +
      "); available: " + names(available_archs()));
}

// A bf16 dot-product unit is not the same unit on every CPU that has the instructions: an AMD Zen 4
// or Zen 5 core does twice the work of its fp32 FMAs with vdpbf16ps (bench_kernels' peak loops,
// per core: Zen 4 236 against 118-128 GFLOP/s, Zen 5 ~485 against 240-255), an Intel Xeon (family 6
// model 207, its AMX not exposed to that guest) half of it (105 against 219; its bf16 GEMM 91 against
// the fp32 GEMM's 186 GFLOP/s at M2048 N256 K256), while a Xeon's AMX tiles do many times it (the
// AMX GEMM 2.8-4.0x the fp32 one on a 16-core Xeon, 192 x 256 x 256). So in auto mode a unit is
// used only where it is measured to beat the fp32 GEMM by kMinSpeedup: once per process, arch
// and unit, on the calling thread, fp32 operands rounded while packing (what Precision::bf16 runs),
// a cache-resident 192 x 256 x 256 product, best of 7 interleaved runs each (~2 ms). Speeds differ
// 2x either way, so the choice does not flip with noise; below 1.2x the bf16 rounding would buy too
// little speed.
constexpr double kMinSpeedup = 1.2;

double measure_speedup(Arch a, Bf16Path p) {
  const KernelTable& fp32 = *compiled_table(a);
  const KernelTable& unit = *unit_table(a, p);
  constexpr int64_t M = 192, N = 256, K = 256;
  std::vector<float> A(M * K), B(K * N), C(M * N);
  for (size_t i = 0; i < A.size(); ++i) A[i] = float(int(i % 17) - 8) * 0.01f;
  for (size_t i = 0; i < B.size(); ++i) B[i] = float(int(i % 13) - 6) * 0.01f;
  const Gemm g = gemm_desc(M, N, K);
  struct OneThread {  // the product on this thread only; the caller's setting restored after
    int before = omp_get_max_threads();
    OneThread() { omp_set_num_threads(1); }
    ~OneThread() { omp_set_num_threads(before); }
  } one_thread;
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  double t_fp32 = 1e30, t_unit = 1e30;
  for (int rep = 0; rep < 8; ++rep) {  // rep 0 warms up (scratch, caches)
    auto t0 = clock::now();
    fp32.gemm(C.data(), A.data(), B.data(), g);
    const double f = seconds(t0);
    t0 = clock::now();
    unit.gemm_bf16(C.data(), operand(A.data()), operand(B.data()), g);
    const double d = seconds(t0);
    if (rep > 0) t_fp32 = std::min(t_fp32, f), t_unit = std::min(t_unit, d);
  }
  return t_fp32 / t_unit;
}

template <Arch A, Bf16Path P>
double measured_once() {
  static const double s = measure_speedup(A, P);
  return s;
}

double cached_speedup(Arch a, Bf16Path p) {
  if (a == Arch::avx512 && p == Bf16Path::dot) return measured_once<Arch::avx512, Bf16Path::dot>();
  if (a == Arch::avx512 && p == Bf16Path::amx) return measured_once<Arch::avx512, Bf16Path::amx>();
  if (a == Arch::neon && p == Bf16Path::dot) return measured_once<Arch::neon, Bf16Path::dot>();
  return 0.0;
}

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", r);
  return buf;
}

// The best unit the CPU has for arch a (amx, then dot), widen when none.
Bf16Path best_unit(Arch a) {
  for (Bf16Path p : {Bf16Path::amx, Bf16Path::dot})
    if (has_bf16_path(a, p)) return p;
  return Bf16Path::widen;
}
}  // namespace

const char* bf16_path_name(Bf16Path p) {
  return p == Bf16Path::dot ? "dot" : p == Bf16Path::amx ? "amx" : "widen";
}

// The unit kernels(a) takes: widen, or the best unit the CPU has, in auto mode only where measured at
// least kMinSpeedup the fp32 GEMM (a unit measured slower is not replaced by the next: vdpbf16ps on
// an AMX CPU is slower still).
Bf16Path bf16_path(Arch a) {
  switch (bf16_mode()) {
    case Bf16Mode::widen:
      return Bf16Path::widen;
    case Bf16Mode::dot:
      return has_bf16_path(a, Bf16Path::dot) ? Bf16Path::dot : Bf16Path::widen;
    case Bf16Mode::amx:
      return has_bf16_path(a, Bf16Path::amx) ? Bf16Path::amx : Bf16Path::widen;
    case Bf16Mode::automatic:
      break;
  }
  const Bf16Path p = best_unit(a);
  return p != Bf16Path::widen && cached_speedup(a, p) >= kMinSpeedup ? p : Bf16Path::widen;
}

bool has_bf16_path(Arch a, Bf16Path p) {
  if (!compiled(a) || !cpu_supports(a)) return false;
  if (p == Bf16Path::widen) return true;
  return cpu_has_unit(a, p) && unit_table(a, p) != nullptr;
}

bool has_bf16_dot(Arch a) {
  return has_bf16_path(a, Bf16Path::dot);
}

double bf16_speedup(Arch a, Bf16Path p) {
  return p != Bf16Path::widen && has_bf16_path(a, p) ? cached_speedup(a, p) : 0.0;
}

std::string bf16_widen_reason(Arch a) {
  const Bf16Path best = best_unit(a);
  if (best == Bf16Path::widen) return "no bf16 dot-product unit";
  if (bf16_mode() == Bf16Mode::widen) return "TAPEGRAD_BF16=widen";
  if (bf16_path(a) != Bf16Path::widen) return "";
  if (bf16_mode() != Bf16Mode::automatic) return "TAPEGRAD_BF16 names a unit this CPU lacks";
  return std::string("the bf16 ") + (best == Bf16Path::amx ? "AMX" : "dot-product") + " unit measured " +
         ratio_text(cached_speedup(a, best)) + " the fp32 GEMM here";
}

const KernelTable& kernels(Arch a, Bf16Path p) {
  require_available(a);
  if (p == Bf16Path::widen) return *compiled_table(a);
  if (!has_bf16_path(a, p)) {
    const bool exists = unit_table(a, p) != nullptr;  // in this build
    throw std::runtime_error(std::string("ops::kernels: arch ") + arch_name(a) + " has no bf16 " +
                             (p == Bf16Path::amx ? "AMX" : "dot-product") + " path here (" +
                             (exists ? "this CPU lacks the instructions" : "none exists for this arch") +
                             ")");
  }
  return *unit_table(a, p);
}

std::vector<Arch> available_archs() {
  std::vector<Arch> out;
  for (Arch a : {Arch::scalar, Arch::sse2, Arch::neon, Arch::avx2, Arch::avx512})  // best last
    if (compiled(a) && cpu_supports(a)) out.push_back(a);
  return out;
}

const KernelTable& kernels(Arch a) {
  require_available(a);
  return kernels(a, bf16_path(a));
}

namespace {
std::atomic<bool> g_bf16_everywhere{false};

// One or two rows against a transposed B (x w^T of a decoding step at batch 1 or 2, Q K^T of one new
// query): the fp32 GEMM reads B in place for these, while the bf16 one packs (converts) all of B for
// a product of 1-2 rows. Measured on a Zen 4 (AVX512_BF16), one thread, N x K 128..1024 x 128..512:
// bf16 / fp32 time 2.0-2.9x at M = 1, 1.1-1.6x at M = 2, 0.7-1.3x at M = 3, 0.67-0.81x at M = 4. With
// a non-transposed B (P V) bf16 is faster from M = 1 on (0.5x), so only the transposed case goes to fp32.
constexpr int64_t kBf16MinRowsTransB = 3;
}  // namespace

void testing::set_bf16_everywhere(bool on) {
  g_bf16_everywhere.store(on);
}

bool bf16_pays(const Gemm* g) {
  if (g && g->trans_b && g->M < kBf16MinRowsTransB) return false;
  if (g_bf16_everywhere.load()) return true;
  return bf16_path(active_arch()) != Bf16Path::widen;
}

std::string arch_report() {
  const Arch a = active_arch();
  const Bf16Path p = bf16_path(a), best = best_unit(a);
  std::string how = active().gemm_bf16_path;
  if (best != Bf16Path::widen && bf16_mode() == Bf16Mode::automatic)
    how += std::string(", ") + bf16_path_name(best) + " measured " + ratio_text(cached_speedup(a, best)) +
           " the fp32 GEMM";
  else if (p == Bf16Path::widen && best != Bf16Path::widen)
    how += bf16_mode() == Bf16Mode::widen ? ", TAPEGRAD_BF16=widen"
                                          : ", TAPEGRAD_BF16 names a unit this CPU lacks";
  return "available: " + names(available_archs()) + "; active: " + arch_name(a) +
         "; bf16 gemm: " + bf16_path_name(p) + " (" + how + ")";
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
namespace {
std::atomic<testing::GemmLoopOrder> g_gemm_loop_order{testing::GemmLoopOrder::cpu};
}  // namespace
void testing::set_gemm_loop_order(GemmLoopOrder order) {
  g_gemm_loop_order.store(order, std::memory_order_relaxed);
}
testing::GemmLoopOrder testing::gemm_loop_order() {
  return g_gemm_loop_order.load(std::memory_order_relaxed);
}
namespace {
std::atomic<testing::GemmKOrder> g_gemm_k_order{testing::GemmKOrder::cpu};
}  // namespace
void testing::set_gemm_k_order(GemmKOrder order) {
  g_gemm_k_order.store(order, std::memory_order_relaxed);
}
testing::GemmKOrder testing::gemm_k_order() {
  return g_gemm_k_order.load(std::memory_order_relaxed);
}
namespace {
std::atomic<testing::GemmCTranspose> g_gemm_c_transpose{testing::GemmCTranspose::cpu};
}  // namespace
void testing::set_gemm_c_transpose(GemmCTranspose mode) {
  g_gemm_c_transpose.store(mode, std::memory_order_relaxed);
}
testing::GemmCTranspose testing::gemm_c_transpose() {
  return g_gemm_c_transpose.load(std::memory_order_relaxed);
}

int num_threads() {
  return omp_get_max_threads();
}
void set_num_threads(int n) {
  if (g_default_threads < 0) g_default_threads = omp_get_max_threads();
  omp_set_num_threads(n > 0 ? n : g_default_threads);
}

}  // namespace tg::ops
