// The neon kernel table: every ops/simd body instantiated for xsimd::neon64.
// Target: NEON on aarch64 (baseline, no flags); this TU gets its flags from ops/meson.build.
#include "ops/arch_tables.hpp"
#include "ops/simd/table.hpp"

namespace tg::ops {

const KernelTable& table_neon() {
  static const KernelTable t = simd::make_table<xsimd::neon64>("neon");
  return t;
}

}  // namespace tg::ops
