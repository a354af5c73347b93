// Parallel text for translation: pairs as ids and padded batches (reading the files: io/text.hpp;
// the tokenizers: nn/tokenizers/).
//
// Sequences (docs/ARCHITECTURE.md): source ids = tokens + <eos>; decoder input = <bos> + target; labels =
// target + <eos>; all padded on the right with <pad> = 0.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "autograd/random.hpp"
#include "io/text.hpp"
#include "nn/tokenizers/tokenizer.hpp"
#include "nn/tokenizers/vocab_tokenizer.hpp"
#include "nn/transformer.hpp"

namespace tg::nn {

// ---- batches --------------------------------------------------------------------------------

// A tokenised pair: source and target ids without any specials.
struct EncodedPair {
  std::vector<int32_t> src, tgt;
};

// Each side through its tokenizer; what became <unk> is counted in `unknown` when given.
std::vector<EncodedPair> encode_pairs(const io::ParallelText& text, const Tokenizer& src,
                                      const Tokenizer& tgt, UnknownTokens* unknown = nullptr);

// Groups pair indices into batches of at most batch_size pairs.
//  - shuffle (rng given): shuffle all indices, sort windows of 100 batches by length, cut them
//    into batches, shuffle the batch order; the same rng state gives the same batches.
//  - by_length without rng: all pairs sorted by length (stable), then cut (eval, decoding).
//  - neither: consecutive pairs in file order.
std::vector<std::vector<int64_t>> make_batches(const std::vector<EncodedPair>& pairs, int64_t batch_size,
                                               Generator* shuffle_rng, bool by_length = true);

// The padded batch of these pairs: src [B, S] = ids + <eos>, tgt_in [B, T] = <bos> + ids,
// labels [B, T] = ids + <eos>, <pad> elsewhere.
Batch make_batch(const std::vector<EncodedPair>& pairs, std::span<const int64_t> indices);

// Only the source side (decoding): src [B, S] with <eos>, padded.
std::vector<int32_t> pad_sources(const std::vector<std::vector<int32_t>>& sources, int64_t& src_len);

}  // namespace tg::nn
