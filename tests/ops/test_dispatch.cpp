// Arch selection: what is available, names, errors.
#include <algorithm>
#include <stdexcept>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "tests/ops/ops_test_util.hpp"

namespace {
using namespace tg::ops;

TEST_CASE("dispatch.available.scalar_first_best_last") {
  const std::vector<Arch> archs = available_archs();
  REQUIRE(!archs.empty());
  CHECK(archs.front() == Arch::scalar);
  for (Arch a : archs) {
    CAPTURE(arch_name(a));
    CHECK(std::string(kernels(a).name) == arch_name(a));
  }
  CHECK(&kernels(Arch::scalar) == &ref::table());
  MESSAGE("kernel tests run on every available arch (others are skipped): " << arch_report());
}

TEST_CASE("dispatch.tables.every_entry_filled") {
  for (Arch a : available_archs()) {
    const KernelTable& t = kernels(a);
    CAPTURE(t.name);
    const void* entries[] = {
        reinterpret_cast<const void*>(t.gemm),
        reinterpret_cast<const void*>(t.gemm_bf16),
        reinterpret_cast<const void*>(t.gemm_bf16_path),
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
        reinterpret_cast<const void*>(t.relu_forward),
        reinterpret_cast<const void*>(t.relu_backward),
        reinterpret_cast<const void*>(t.gelu_forward),
        reinterpret_cast<const void*>(t.gelu_backward),
        reinterpret_cast<const void*>(t.dropout_forward),
        reinterpret_cast<const void*>(t.dropout_backward),
        reinterpret_cast<const void*>(t.bias_add),
        reinterpret_cast<const void*>(t.bias_backward),
        reinterpret_cast<const void*>(t.axpy),
        reinterpret_cast<const void*>(t.add),
        reinterpret_cast<const void*>(t.scale),
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
    CAPTURE(arch_name(a));
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

// The bf16 GEMM path: widen on every arch; dot only where the build has it and the CPU reports the
// instructions (AVX512_BF16 in CPUID, HWCAP2_BF16 on Arm), otherwise asking for it is an error.
// The default table uses dot where it can, unless TAPEGRAD_BF16=widen (meson test 'ops-bf16-widen').
TEST_CASE("dispatch.bf16.paths") {
  const char* env = std::getenv("TAPEGRAD_BF16");
  const bool forced_widen = env && std::string(env) == "widen";
  for (Arch a : available_archs()) {
    CAPTURE(arch_name(a));
    const KernelTable& widen = kernels(a, Bf16Path::widen);
    CHECK(std::string(widen.name) == arch_name(a));
    if (has_bf16_dot(a)) {
      const KernelTable& dot = kernels(a, Bf16Path::dot);
      CHECK((dot.gemm_bf16 != widen.gemm_bf16));
      CHECK((dot.gemm == widen.gemm));  // everything but the bf16 GEMM is the arch's own table
      CHECK(&kernels(a) == (forced_widen ? &widen : &dot));
    } else {
      CHECK_THROWS_WITH_AS(kernels(a, Bf16Path::dot), doctest::Contains("no bf16 dot-product path"),
                           std::runtime_error);
      CHECK(&kernels(a) == &widen);
    }
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
  const std::string report = arch_report();
  CHECK(report.find("bf16 gemm: ") != std::string::npos);
  MESSAGE(report);
}

}  // namespace
