// int8 weights (kernels.hpp: Int8Rows): the quantization, once per weight, and gemm_int8's checks.
// Not per arch: a weight is quantized once (at the first decoding step that reads it) and the
// loop below is already bound by reading w.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "ops/kernels.hpp"

namespace tg::ops {

void validate_int8(const Gemm& g) {
  validate(g);
  if (!g.trans_b)
    throw std::invalid_argument("ops::gemm_int8: op(B) must be B^T (an int8 weight stored [N, K] in rows)");
  if (g.batch > 1)
    throw std::invalid_argument("ops::gemm_int8: one product at a time (batch " + std::to_string(g.batch) +
                                "): the row scales belong to one weight");
}

void quantize_int8_rows(int8_t* q, float* scale, const float* w, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    throw std::invalid_argument("ops::quantize_int8_rows: negative size " + std::to_string(rows) + " x " +
                                std::to_string(cols));
  int64_t bad_row = -1;  // the first row holding a value that is not finite
  const bool threaded = rows * cols >= (int64_t{1} << 20) && num_threads() > 1;
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (threaded)
  for (int64_t j = 0; j < rows; ++j) {
    const float* wj = w + j * cols;
    // The largest magnitude as the largest of the values' bits without the sign (for finite
    // values, and Inf and NaN above them, the integers order as the magnitudes do): an integer
    // reduction that vectorises (omp simd), where std::fmax and std::isfinite are calls into libm.
    uint32_t amax_bits = 0;
#pragma omp simd reduction(max : amax_bits)
    for (int64_t k = 0; k < cols; ++k) {
      uint32_t u;
      std::memcpy(&u, wj + k, sizeof u);
      amax_bits = std::max(amax_bits, u & 0x7fffffffu);
    }
    const bool finite = amax_bits < 0x7f800000u;
    float amax;
    std::memcpy(&amax, &amax_bits, sizeof amax);
    if (!finite) {
#pragma omp critical(tg_quantize_int8_bad_row)
      if (bad_row < 0 || j < bad_row) bad_row = j;
      continue;
    }
    // scale = amax / 127; q = w * (127 / amax) rounded to nearest even by the 1.5 * 2^23 trick
    // (exact for |x| < 2^22; vectorises, where nearbyint would not on SSE2). |w * inv| is at most
    // 127 (1 + 2^-23) after the two roundings, so it rounds to at most 127: no clamp. A row so
    // small that 127 / amax overflows (amax below about 2^-121) computes q in double instead; one
    // whose scale underflows to 0 (amax below about 127 * 2^-150) is stored as zeros, as it reads.
    const float s = amax / 127.0f, inv = 127.0f / amax;
    scale[j] = s;
    int8_t* qj = q + j * cols;
    constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
    if (s == 0.0f) {
      std::fill_n(qj, cols, int8_t{0});
    } else if (std::isfinite(inv)) {
#pragma omp simd
      for (int64_t k = 0; k < cols; ++k) {
        const float x = wj[k] * inv;
        qj[k] = static_cast<int8_t>(static_cast<int32_t>((x + kRound) - kRound));
      }
    } else {
      const double inv_d = 127.0 / static_cast<double>(amax);
      for (int64_t k = 0; k < cols; ++k)
        qj[k] = static_cast<int8_t>(std::nearbyint(static_cast<double>(wj[k]) * inv_d));
    }
  }
  if (bad_row >= 0)
    throw std::invalid_argument("ops::quantize_int8_rows: row " + std::to_string(bad_row) +
                                " holds a value that is not finite (NaN or Inf)");
}

}  // namespace tg::ops
