// The model configs S and M and the copy-task batches that bench_train and bench_mpi train on, so
// both programs measure the same model on the same data.
//
// Sequences: `length` - 1 random symbols (ids 4 .. vocab-1) + <eos> as source, <bos> + symbols as
// decoder input, symbols + <eos> as labels, so src_len = tgt_len = length and there is no padding.
#pragma once

#include <fmt/core.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "autograd/random.hpp"
#include "nn/transformer.hpp"
#include "train/copy_task.hpp"

namespace tg::bench {

struct TrainConfig {
  std::string name;
  nn::TransformerConfig model;
  int64_t batch = 64;
  int64_t length = 32;  // src_len = tgt_len
  float label_smoothing = 0.1f;
};

// Config "S" or "M" (both: dropout 0.1, label smoothing 0.1):
//   S: d 128, 4 heads, ff 512, 2+2 layers, vocab 32, batch 64, length 32
//   M: d 256, 8 heads, ff 1024, 3+3 layers, vocab 1000, batch 64, length 64
// Any other name throws invalid_argument, the message starting with `program`.
inline TrainConfig train_config(const std::string& name, const std::string& program) {
  TrainConfig c;
  c.name = name;
  c.model.dropout = 0.1f;
  if (name == "S") {
    c.model.src_vocab = c.model.tgt_vocab = 32;
    c.model.d_model = 128, c.model.heads = 4, c.model.d_ff = 512;
    c.model.enc_layers = c.model.dec_layers = 2;
    c.batch = 64, c.length = 32;
  } else if (name == "M") {
    c.model.src_vocab = c.model.tgt_vocab = 1000;
    c.model.d_model = 256, c.model.heads = 8, c.model.d_ff = 1024;
    c.model.enc_layers = c.model.dec_layers = 3;
    c.batch = 64, c.length = 64;
  } else {
    throw std::invalid_argument(fmt::format("{}: --config must be S or M, got '{}'", program, name));
  }
  c.model.max_len = 2 * c.length;
  return c;
}

// n copy-task sequences of config c (train/copy_task.hpp): length - 1 random symbols + <eos>.
inline nn::Batch copy_batch(const TrainConfig& c, int64_t n, Generator& gen) {
  return train::copy_batch(n, c.length - 1, c.model.tgt_vocab, gen);
}

}  // namespace tg::bench
