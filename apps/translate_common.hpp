// Pieces shared by the translate subcommands: loading a model, reading data, evaluation metrics.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/data.hpp"
#include "nn/family/transformer_family.hpp"
#include "nn/transformer.hpp"
#include "translate_commands.hpp"

namespace translate {

using namespace tg;
using namespace tg::nn;
using namespace tg::io;

// A model with what is needed to feed it text.
struct LoadedModel {
  std::unique_ptr<Transformer> model;
  CheckpointInfo info;
};
LoadedModel load_model(const std::string& path);

// Reads a TSV file, reporting skipped lines on stderr.
ParallelText read_data(const std::string& path, bool skip_bad_lines);

struct Metrics {
  double loss = 0;            // mean cross-entropy per label token (no smoothing)
  double token_accuracy = 0;  // fraction of label tokens predicted (argmax, teacher-forced)
  double exact_match = 0;     // fraction of sentences with every label token right
  int64_t tokens = 0, sentences = 0;
};
// Teacher-forced evaluation in eval mode under NoGradGuard.
//
// Exact match is read from the teacher-forced argmax: when every position's argmax equals the
// gold token (including <eos>), greedy decoding reproduces the reference exactly, and vice versa,
// because greedy then feeds back exactly the gold prefix. So this is greedy exact match at the
// cost of one forward pass.
Metrics evaluate(Transformer& model, const std::vector<EncodedPair>& pairs, int64_t batch_size);

// Drops pairs that do not fit the positional table (source + <eos> or <bos> + target longer than
// max_len); returns how many were dropped.
int64_t drop_too_long(std::vector<EncodedPair>& pairs, int64_t max_len);

}  // namespace translate
