#include "train/copy_task.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace tg::train {

nn::Batch copy_batch(int64_t n, int64_t symbols, int64_t vocab, Generator& gen) {
  constexpr int32_t first = nn::kUnk + 1;
  if (n < 0 || symbols < 1 || vocab <= first)
    throw std::invalid_argument(
        fmt::format("copy_batch: {} sequences of {} symbols over a vocabulary of {}", n, symbols, vocab));
  nn::Batch b;
  b.batch = n, b.src_len = symbols + 1, b.tgt_len = symbols + 1;
  for (int64_t r = 0; r < n; ++r) {
    b.tgt_in.push_back(nn::kBos);
    for (int64_t t = 0; t < symbols; ++t) {
      const auto s =
          static_cast<int32_t>(first + static_cast<int64_t>(gen.below(static_cast<uint64_t>(vocab - first))));
      b.src.push_back(s);
      b.tgt_in.push_back(s);
      b.labels.push_back(s);
    }
    b.src.push_back(nn::kEos);
    b.labels.push_back(nn::kEos);
  }
  return b;
}

}  // namespace tg::train
