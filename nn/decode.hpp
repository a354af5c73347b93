// Decoding: greedy and beam search over a batch of sources, with the model's incremental state
// (each new token runs the decoder on one position). Runs under NoGradGuard and in eval mode
// (the model's training flag is restored afterwards).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "nn/transformer.hpp"

namespace tg::nn {

struct DecodeOptions {
  int64_t beam = 1;             // 1 = greedy
  int64_t max_len = 0;          // tokens generated at most per sequence (0: its source tokens + 50)
  float length_penalty = 1.0f;  // beam score = sum log p / length^alpha (0: raw sum)
};

// One decoded sequence per source row: token ids without <bos> and <eos>.
using Hypotheses = std::vector<std::vector<int32_t>>;

// src: [batch, src_len] ids (tokens + <eos>, <pad>-padded). A sequence stops at <eos> or after
// max_len tokens; max_len 0 means each sequence's own source tokens (without <eos> and padding) + 50,
// so a sentence decodes alike alone or in a batch with longer ones. Never more tokens than the
// model has positions (config().max_len).
Hypotheses greedy_decode(Transformer& model, std::span<const int32_t> src, int64_t batch, int64_t src_len,
                         int64_t max_len = 0);
Hypotheses beam_search(Transformer& model, std::span<const int32_t> src, int64_t batch, int64_t src_len,
                       const DecodeOptions& opt);
// beam == 1 -> greedy_decode, else beam_search.
Hypotheses decode(Transformer& model, std::span<const int32_t> src, int64_t batch, int64_t src_len,
                  const DecodeOptions& opt);

}  // namespace tg::nn
