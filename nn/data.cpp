#include "nn/data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "io/json.hpp"

namespace tg::nn {

using io::DataError;
using io::is_space;
using io::trim;

// ---- batches --------------------------------------------------------------------------------

std::vector<EncodedPair> encode_pairs(const io::ParallelText& text, const Tokenizer& src,
                                      const Tokenizer& tgt, UnknownTokens* unknown) {
  const std::vector<std::string_view> src_text(text.src.begin(), text.src.end()),
      tgt_text(text.tgt.begin(), text.tgt.end());
  std::vector<std::vector<int32_t>> src_ids = src.encode_batch(src_text, unknown),
                                    tgt_ids = tgt.encode_batch(tgt_text, unknown);
  std::vector<EncodedPair> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = {std::move(src_ids[i]), std::move(tgt_ids[i])};
  return out;
}

// How many batches' worth of shuffled pairs are sorted by length together: enough that each batch
// finds pairs of about its length (little padding), few enough that which pairs meet stays random.
constexpr int64_t kLengthSortBatches = 100;

std::vector<std::vector<int64_t>> make_batches(const std::vector<EncodedPair>& pairs, int64_t batch_size,
                                               Generator* rng, bool by_length) {
  if (batch_size <= 0)
    throw std::invalid_argument(fmt::format("make_batches: batch size {} must be > 0", batch_size));
  const int64_t n = static_cast<int64_t>(pairs.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  auto shuffle = [&](auto& v) {  // Fisher-Yates with our own generator: identical on every platform
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng->below(i)]);
  };
  auto longer = [&](int64_t a, int64_t b) {
    const auto& pa = pairs[static_cast<size_t>(a)];
    const auto& pb = pairs[static_cast<size_t>(b)];
    return std::max(pa.src.size(), pa.tgt.size()) < std::max(pb.src.size(), pb.tgt.size());
  };
  // Sorting within windows keeps batches of similar length (little padding) while the shuffle
  // still mixes which pairs meet.
  const int64_t window = rng ? kLengthSortBatches * batch_size : n;
  if (rng) shuffle(order);
  if (rng || by_length)
    for (int64_t w = 0; w < n; w += window)
      std::stable_sort(order.begin() + w, order.begin() + std::min(n, w + window), longer);

  std::vector<std::vector<int64_t>> batches;
  for (int64_t i = 0; i < n; i += batch_size)
    batches.emplace_back(order.begin() + i, order.begin() + std::min(n, i + batch_size));
  if (rng) shuffle(batches);
  return batches;
}

Batch make_batch(const std::vector<EncodedPair>& pairs, std::span<const int64_t> indices) {
  if (indices.empty()) throw std::invalid_argument("make_batch: no pairs");
  Batch b;
  b.batch = static_cast<int64_t>(indices.size());
  for (int64_t i : indices) {
    if (i < 0 || i >= static_cast<int64_t>(pairs.size()))
      throw std::out_of_range(
          fmt::format("make_batch: pair index {} out of range ({} pairs)", i, pairs.size()));
    b.src_len = std::max(b.src_len, static_cast<int64_t>(pairs[static_cast<size_t>(i)].src.size()) + 1);
    b.tgt_len = std::max(b.tgt_len, static_cast<int64_t>(pairs[static_cast<size_t>(i)].tgt.size()) + 1);
  }
  b.src.assign(static_cast<size_t>(b.batch * b.src_len), kPad);
  b.tgt_in.assign(static_cast<size_t>(b.batch * b.tgt_len), kPad);
  b.labels.assign(static_cast<size_t>(b.batch * b.tgt_len), kPad);
  for (int64_t r = 0; r < b.batch; ++r) {
    const EncodedPair& p = pairs[static_cast<size_t>(indices[static_cast<size_t>(r)])];
    int32_t* src = b.src.data() + r * b.src_len;
    int32_t* tin = b.tgt_in.data() + r * b.tgt_len;
    int32_t* lab = b.labels.data() + r * b.tgt_len;
    std::copy(p.src.begin(), p.src.end(), src);
    src[p.src.size()] = kEos;
    tin[0] = kBos;
    std::copy(p.tgt.begin(), p.tgt.end(), tin + 1);
    std::copy(p.tgt.begin(), p.tgt.end(), lab);
    lab[p.tgt.size()] = kEos;
  }
  return b;
}

std::vector<int32_t> pad_sources(const std::vector<std::vector<int32_t>>& sources, int64_t& src_len) {
  src_len = 1;
  for (const auto& s : sources) src_len = std::max(src_len, static_cast<int64_t>(s.size()) + 1);
  std::vector<int32_t> out(sources.size() * static_cast<size_t>(src_len), kPad);
  for (size_t r = 0; r < sources.size(); ++r) {
    std::copy(sources[r].begin(), sources[r].end(), out.begin() + static_cast<int64_t>(r) * src_len);
    out[r * static_cast<size_t>(src_len) + sources[r].size()] = kEos;
  }
  return out;
}

}  // namespace tg::nn
