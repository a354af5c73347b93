// The avx2 kernel table: every ops/simd body instantiated for xsimd::fma3<xsimd::avx2>.
// Target: avx2 + FMA3 (-mavx2 -mfma); this TU gets its flags from ops/meson.build.
#include "ops/arch_tables.hpp"
#include "ops/simd/table.hpp"

namespace tg::ops {

const KernelTable& table_avx2() {
  static const KernelTable t = simd::make_table<xsimd::fma3<xsimd::avx2>>("avx2");
  return t;
}

}  // namespace tg::ops
