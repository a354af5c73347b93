// The sse2 kernel table: every ops/simd body instantiated for xsimd::sse2.
// Target: sse2 (baseline of every x86_64 CPU, no extra flags); this TU gets its flags from ops/meson.build.
#include "ops/arch_tables.hpp"
#include "ops/simd/table.hpp"

namespace tg::ops {

const KernelTable& table_sse2() {
  static const KernelTable t = simd::make_table<xsimd::sse2>("sse2");
  return t;
}

}  // namespace tg::ops
