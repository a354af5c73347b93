// int8 weights (kernels.hpp: Int8Rows): gemm_int8's checks, and the quantization's (its kernels:
// ops/simd/int8.hpp per arch, ref.cpp's scalar reference).
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
  if (g.ldb != g.K)
    throw std::invalid_argument("ops::gemm_int8: ldb " + std::to_string(g.ldb) + " must be K " +
                                std::to_string(g.K) + ": an int8 weight's rows are tiled (int8_offset)");
}

void quantize_int8_rows(int8_t* q, float* scale, const float* w, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    throw std::invalid_argument("ops::quantize_int8_rows: negative size " + std::to_string(rows) + " x " +
                                std::to_string(cols));
  const int64_t bad_row = active().quantize_int8_rows(q, scale, w, rows, cols);
  if (bad_row >= 0)
    throw std::invalid_argument("ops::quantize_int8_rows: row " + std::to_string(bad_row) +
                                " holds a value that is not finite (NaN or Inf)");
}

}  // namespace tg::ops
