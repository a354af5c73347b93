// The avx512 kernel table: every ops/simd body instantiated for xsimd::avx512bw.
// Target: AVX-512 F/DQ/BW/VL (hadd needs DQ); flags from ops/meson.build:
// -mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma -mavx2.
//
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps() and trip -W(maybe-)uninitialized
// once inlined (GCC bug 105593, fixed in GCC 13): a false positive, silenced for this TU only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "ops/arch_tables.hpp"
#include "ops/simd/table.hpp"

namespace tg::ops {

const KernelTable& table_avx512() {
  static const KernelTable t = simd::make_table<xsimd::avx512bw>("avx512");
  return t;
}

}  // namespace tg::ops
