// Arch selection: what is available (and that it is what this CPU has), names, errors.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "tests/ops/ops_test_util.hpp"

namespace {
using namespace tg::ops;

// The archs this build compiles in (ops/meson.build, ops/dispatch.cpp's compiled()).
std::vector<Arch> compiled_archs() {
#if defined(__x86_64__)
  return {Arch::scalar, Arch::sse2, Arch::avx2, Arch::avx512};
#elif defined(__aarch64__)
  return {Arch::scalar, Arch::neon};
#else
  return {Arch::scalar};
#endif
}

std::string names(const std::vector<Arch>& archs) {
  std::string s;
  for (Arch a : archs) s += std::string(s.empty() ? "" : " ") + arch_name(a);
  return s;
}

// The first CPU's flags in /proc/cpuinfo (x86 "flags", Arm "Features"), space-delimited on both
// sides; empty where there is no such line.
std::string cpuinfo_flags() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.starts_with("flags") || line.starts_with("Features"))
      return " " + line.substr(line.find(':') + 1) + " ";
  return "";
}
// Whether the flags hold `flag` (the x86 cases only use it).
[[maybe_unused]] bool cpu_flags_contain(const std::string& flag) {
  return cpuinfo_flags().find(" " + flag + " ") != std::string::npos;
}

// The archs this machine should give the kernels, in available_archs() order (best last), with
// where that came from. TAPEGRAD_TEST_EXPECT_ARCHS=scalar,sse2,avx2 states it (the qemu scripts:
// an emulated CPU differs from the host's /proc/cpuinfo); otherwise /proc/cpuinfo's flags, read
// the way the dispatcher's checks read CPUID: avx2 needs fma, avx512 needs f, dq, bw and vl.
struct Expected {
  std::vector<Arch> archs;
  std::string source;
};
std::optional<Expected> expected_archs() {
  std::vector<Arch> want;
  std::string source;
  if (const char* env = std::getenv("TAPEGRAD_TEST_EXPECT_ARCHS"); env && *env) {
    std::stringstream in(env);
    for (std::string a; std::getline(in, a, ',');) want.push_back(parse_arch(a));
    source = std::string("TAPEGRAD_TEST_EXPECT_ARCHS=") + env;
  } else {
    const std::string flags = cpuinfo_flags();
    if (flags.empty()) return std::nullopt;
    auto has = [&](const char* flag) {
      return flags.find(std::string(" ") + flag + " ") != std::string::npos;
    };
    want.push_back(Arch::scalar);
    if (has("sse2")) want.push_back(Arch::sse2);
    if (has("asimd")) want.push_back(Arch::neon);
    if (has("avx2") && has("fma")) want.push_back(Arch::avx2);
    if (has("avx512f") && has("avx512dq") && has("avx512bw") && has("avx512vl") && has("avx2") && has("fma"))
      want.push_back(Arch::avx512);
    source = "/proc/cpuinfo";
  }
  const auto compiled = compiled_archs();
  Expected e{{}, source};
  for (Arch a : {Arch::scalar, Arch::sse2, Arch::neon, Arch::avx2, Arch::avx512})  // best last
    if (std::find(want.begin(), want.end(), a) != want.end() &&
        std::find(compiled.begin(), compiled.end(), a) != compiled.end())
      e.archs.push_back(a);
  return e;
}

TEST_CASE("dispatch.available.scalar_first_best_last") {
  const std::vector<Arch> archs = available_archs();
  REQUIRE(!archs.empty());
  CHECK(archs.front() == Arch::scalar);
  for (Arch a : archs) {
    const std::string arch = arch_name(a);
    CAPTURE(arch);
    CHECK(std::string(kernels(a).name) == arch_name(a));
  }
  CHECK(&kernels(Arch::scalar) == &ref::table());
  MESSAGE("kernel tests run on every available arch (others are skipped): " << arch_report());
}

// The dispatcher offers exactly the compiled-in archs this CPU has: none missing (a kernel test
// skipped for nothing), none extra (entered without its instructions). Every compiled-in arch the
// CPU lacks is refused as such; under qemu-x86_64 (tools/test_x86_without_avx512.sh) that is avx512.
TEST_CASE("dispatch.available.matches_the_cpu") {
  const std::optional<Expected> e = expected_archs();
  if (!e) TG_SKIP("no flags in /proc/cpuinfo and no TAPEGRAD_TEST_EXPECT_ARCHS");
  INFO("expected from " << e->source);
  CHECK(names(available_archs()) == names(e->archs));
  std::vector<Arch> refused;
  for (Arch a : compiled_archs()) {
    if (std::find(e->archs.begin(), e->archs.end(), a) != e->archs.end()) continue;
    const std::string arch = arch_name(a);
    CAPTURE(arch);
    CHECK_THROWS_WITH_AS(kernels(a), doctest::Contains("this CPU lacks its instructions"),
                         std::runtime_error);
    refused.push_back(a);
  }
  MESSAGE("archs (" << e->source << "): " << names(e->archs)
                    << "; compiled in and refused: " << (refused.empty() ? "none" : names(refused)));
}

TEST_CASE("dispatch.tables.every_entry_filled") {
  for (Arch a : available_archs()) {
    const KernelTable& t = kernels(a);
    CAPTURE(t.name);
    const void* entries[] = {
        reinterpret_cast<const void*>(t.gemm),
        reinterpret_cast<const void*>(t.gemm_bf16),
        reinterpret_cast<const void*>(t.gemm_bf16_path),
        reinterpret_cast<const void*>(t.gemm_int8),
        reinterpret_cast<const void*>(t.quantize_int8_rows),
        reinterpret_cast<const void*>(t.attention_forward),
        reinterpret_cast<const void*>(t.attention_backward),
        reinterpret_cast<const void*>(t.f32_to_bf16),
        reinterpret_cast<const void*>(t.bf16_to_f32),
        reinterpret_cast<const void*>(t.softmax_forward),
        reinterpret_cast<const void*>(t.softmax_backward),
        reinterpret_cast<const void*>(t.log_softmax_forward),
        reinterpret_cast<const void*>(t.log_softmax_backward),
        reinterpret_cast<const void*>(t.layernorm_forward),
        reinterpret_cast<const void*>(t.layernorm_backward),
        reinterpret_cast<const void*>(t.cross_entropy_forward),
        reinterpret_cast<const void*>(t.cross_entropy_backward),
        reinterpret_cast<const void*>(t.cross_entropy_fused),
        reinterpret_cast<const void*>(t.relu_forward),
        reinterpret_cast<const void*>(t.relu_backward),
        reinterpret_cast<const void*>(t.gelu_forward),
        reinterpret_cast<const void*>(t.gelu_backward),
        reinterpret_cast<const void*>(t.gelu_tanh_forward),
        reinterpret_cast<const void*>(t.gelu_tanh_backward),
        reinterpret_cast<const void*>(t.dropout_forward),
        reinterpret_cast<const void*>(t.dropout_backward),
        reinterpret_cast<const void*>(t.bias_add),
        reinterpret_cast<const void*>(t.bias_backward),
        reinterpret_cast<const void*>(t.axpy),
        reinterpret_cast<const void*>(t.add),
        reinterpret_cast<const void*>(t.copy),
        reinterpret_cast<const void*>(t.scale),
        reinterpret_cast<const void*>(t.fill),
        reinterpret_cast<const void*>(t.sum_squares),
        reinterpret_cast<const void*>(t.adam_update),
    };
    for (const void* e : entries) CHECK(e != nullptr);
  }
}

TEST_CASE("dispatch.arch.parse_and_errors") {
  for (Arch a : {Arch::scalar, Arch::sse2, Arch::avx2, Arch::avx512, Arch::neon})
    CHECK(parse_arch(arch_name(a)) == a);
  CHECK_THROWS_AS(parse_arch("avx3"), std::invalid_argument);
#if defined(__x86_64__)
  CHECK_THROWS_AS(kernels(Arch::neon), std::runtime_error);
#else
  CHECK_THROWS_AS(kernels(Arch::avx2), std::runtime_error);
#endif
}

// An arch compiled into the build but missing from this CPU (AVX-512 on an AVX2 machine, or under
// qemu-x86_64, which has no AVX-512) is refused with a message, never entered: building its table
// already runs its instructions. .ci/run runs these cases under qemu-x86_64 so this path is taken
// on every CI machine.
TEST_CASE("dispatch.arch.missing_instructions_are_an_error_not_a_crash") {
  const auto avail = available_archs();
  int refused = 0;
  for (Arch a : {Arch::sse2, Arch::avx2, Arch::avx512, Arch::neon}) {
    if (std::find(avail.begin(), avail.end(), a) != avail.end()) continue;
    const std::string arch = arch_name(a);
    CAPTURE(arch);
    CHECK_THROWS_WITH_AS(kernels(a), doctest::Contains("is not available"), std::runtime_error);
    CHECK_THROWS_AS(set_arch(a), std::runtime_error);
    ++refused;
  }
  CHECK(refused >= 1);  // neon on x86_64, the x86 archs on aarch64
  MESSAGE("archs on this CPU: " << arch_report());
}

TEST_CASE("dispatch.set_arch.switches_active_table") {
  const Arch before = active_arch();
  for (Arch a : available_archs()) {
    set_arch(a);
    CHECK(active_arch() == a);
    CHECK(&active() == &kernels(a));
  }
  set_arch(before);
  // The default is the best arch; TAPEGRAD_ARCH forces one (meson test 'ops-forced-arch' sets it).
  const char* env = std::getenv("TAPEGRAD_ARCH");
  if (env && *env)
    CHECK(before == parse_arch(env));
  else
    CHECK(before == available_archs().back());
}

// The bf16 GEMM paths: widen on every arch; dot and amx only where the build has them and the CPU
// reports the instructions (AVX512_BF16 or AMX-BF16 in CPUID, HWCAP2_BF16 on Arm), otherwise asking
// for one is an error. The default table (TAPEGRAD_BF16 unset or auto) uses the best unit (amx, else
// dot) where it is measured at least 1.2x the fp32 GEMM; TAPEGRAD_BF16=widen never (meson test
// 'ops-bf16-widen'), =dot wherever it can ('ops-bf16-dot'), =amx likewise ('ops-bf16-amx').
TEST_CASE("dispatch.bf16.paths") {
  const char* env = std::getenv("TAPEGRAD_BF16");
  const std::string mode = env && *env ? env : "auto";
  for (Arch a : available_archs()) {
    const std::string arch = arch_name(a);
    CAPTURE(arch);
    const KernelTable& widen = kernels(a, Bf16Path::widen);
    CHECK(std::string(widen.name) == arch_name(a));
    Bf16Path expected = Bf16Path::widen;
    bool decided = mode == "widen";
    for (Bf16Path p : {Bf16Path::amx, Bf16Path::dot}) {  // best unit first
      const std::string path = bf16_path_name(p);
      CAPTURE(path);
      if (!has_bf16_path(a, p)) {
        CHECK_THROWS_WITH_AS(
            kernels(a, p),
            doctest::Contains(p == Bf16Path::amx ? "no bf16 AMX path" : "no bf16 dot-product path"),
            std::runtime_error);
        CHECK(bf16_speedup(a, p) == 0.0);
        continue;
      }
      const KernelTable& unit = kernels(a, p);
      CHECK((unit.gemm_bf16 != widen.gemm_bf16));
      CHECK((unit.gemm == widen.gemm));  // everything but the bf16 GEMM is the arch's own table
      const double speedup = bf16_speedup(a, p);
      MESSAGE(std::string(arch_name(a))
              << ": bf16 " << bf16_path_name(p) << " path measured " << speedup << "x the fp32 GEMM");
      // A real measurement: positive and finite. No tighter bound: under the sanitizers the
      // instrumented fp32 micro-kernel ran 20x slower than the dot one (CI, Zen 4, ASan + UBSan).
      CHECK(std::isfinite(speedup));
      CHECK(speedup > 0.0);
      CHECK(bf16_speedup(a, p) == speedup);  // measured once per process
      if (mode == bf16_path_name(p)) expected = p, decided = true;
      if (mode == "auto" && !decided) expected = speedup >= 1.2 ? p : Bf16Path::widen, decided = true;
    }
    CHECK(&kernels(a) == &kernels(a, expected));
    CHECK(bf16_path(a) == expected);
    const std::string reason = bf16_widen_reason(a);
    CHECK(reason.empty() == (expected != Bf16Path::widen));
    const bool has_unit = has_bf16_path(a, Bf16Path::amx) || has_bf16_dot(a);
    if (!has_unit) CHECK(reason == "no bf16 dot-product unit");
    if (has_unit && mode == "widen") CHECK(reason == "TAPEGRAD_BF16=widen");
    if (has_unit && mode == "auto" && expected == Bf16Path::widen)
      CHECK(reason.find("measured") != std::string::npos);
  }
  CHECK(!has_bf16_dot(Arch::scalar));
  CHECK(!has_bf16_dot(Arch::sse2));
  CHECK(!has_bf16_dot(Arch::avx2));
#if defined(__x86_64__)
  // the CPU's own answer, asked independently of the dispatcher
  CHECK(has_bf16_dot(Arch::avx512) ==
        (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512bf16")));
#endif
#if defined(__aarch64__)
  CHECK(has_bf16_dot(Arch::neon) == ((getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0));
#endif
  for (Arch a : {Arch::scalar, Arch::sse2, Arch::avx2, Arch::neon}) CHECK(!has_bf16_path(a, Bf16Path::amx));
#if defined(__x86_64__)
  // AMX exactly where the kernel lists its flags (Linux lists them only when it supports the tile
  // state) on a CPU whose AVX-512 has bf16 (the AMX tables' packing rounds with it)
  CHECK(has_bf16_path(Arch::avx512, Bf16Path::amx) ==
        (has_bf16_dot(Arch::avx512) && cpu_flags_contain("amx_tile") && cpu_flags_contain("amx_bf16")));
#endif
  const std::string report = arch_report();
  CHECK(report.find("bf16 gemm: ") != std::string::npos);
  MESSAGE(report);
}

}  // namespace
