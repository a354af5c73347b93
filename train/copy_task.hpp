// The copy task of "The Annotated Transformer" as data: random symbol sequences that the model
// must reproduce. One batch maker for the demo (examples/copy_task.cpp), the benchmarks
// (bench/train_configs.hpp) and the convergence test (tests/nn/test_copy_task.cpp).
#pragma once

#include <cstdint>

#include "autograd/random.hpp"
#include "nn/data.hpp"

namespace tg::train {

// `n` sequences of `symbols` random symbols drawn uniformly from ids 4 .. vocab-1 (after the four
// specials), row by row: src = x + <eos>, tgt_in = <bos> + x, labels = x + <eos>, so
// src_len = tgt_len = symbols + 1 and there is no padding.
nn::Batch copy_batch(int64_t n, int64_t symbols, int64_t vocab, Generator& gen);

}  // namespace tg::train
