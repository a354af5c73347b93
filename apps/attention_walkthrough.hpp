// The attention walkthrough (apps/attention_walkthrough.cpp): scaled dot-product attention on
// a tiny input, every step one or more labelled matrices, forward and backward, on the real engine.
//
// The self-attention block of encoder layer 0 is computed step by step from the public ops
// (linear, matmul, softmax, layernorm ...: attention_walkthrough_forward.cpp) and shown to equal the
// engine's fused path (nn::MultiHeadAttention, attention_probs + attention_context) on the same
// weights. Then cross-attention of decoder layer 0 from a two-token decoder prefix over the
// encoder's output, and (with a trained checkpoint) greedy decoding step by step. The backward pass
// of L = sum(G * Z) (attention_walkthrough_backward.cpp) derives each gradient by its formula,
// compares it with the tape's and checks it against central differences of L.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.hpp"
#include "nn/data.hpp"
#include "nn/transformer.hpp"

namespace tg::walkthrough {

// One labelled matrix of a step, e.g. Q [T, d] with the tokens as rows.
struct Matrix {
  std::string label;  // "Q", "head 0", "b_q" ...
  Tensor value;       // 2-D, contiguous, without autograd history
  std::vector<std::string> rows, cols;
  // What the rows and columns are ("query", "key"); empty: the page names them from their labels.
  std::string row_title, col_title;
  // The cells a mask hides (row-major, 1 = masked; empty: none): drawn hatched, not as a value.
  std::vector<uint8_t> masked;
  // A text per cell (row-major) printed in it instead of its value (empty: none).
  std::vector<std::string> cells;
};

// How a gradient derived by its formula was checked.
struct GradCheck {
  double tape_diff = 0.0;          // max |formula - tape's gradient|
  double fd_error = 0.0;           // max |formula - central difference of L|
  double worst_ratio = 0.0;        // the largest error / tolerance over the checked elements
  double eps = 0.0;                // the finite-difference step h
  int64_t checked = 0, total = 0;  // elements checked (all, or a seeded sample), of
  bool fd_ok = true;               // every checked element within atol + rtol |numeric|
  bool tape_ok = true;             // tape_diff within the float rounding of the two computations
  bool ok() const { return fd_ok && tape_ok; }
};

struct Step {
  std::string id;       // a stable key ("Q", "dS", ...): --json, the tests
  std::string title;    // "Queries"
  std::string formula;  // "Q = X W_q^T + b_q"
  std::vector<Matrix> matrices;
  std::vector<std::string> notes;  // measured facts: variances, row sums, equalities
  std::optional<GradCheck> check;  // the gradients of the backward pass
};

struct Section {
  std::string id, title, intro;
  std::vector<Step> steps;
};

// The step-by-step result against the engine's own path for the same thing (tolerance 0: must be
// identical, as token sequences).
struct Agreement {
  std::string what;
  double max_diff = 0.0, tolerance = 0.0;
  bool ok = true;
};

// One step of greedy decoding: the prefix so far, the most likely next tokens, the choice.
struct DecodeStep {
  std::vector<std::string> prefix;
  std::vector<std::pair<std::string, double>> top;  // token, probability
  std::string chosen;
  int32_t chosen_id = -1;
};

// Where the weights come from and how text becomes ids.
struct Model {
  std::unique_ptr<nn::Transformer> transformer;
  std::shared_ptr<const nn::Tokenizer> src, tgt;
  bool trained = false;     // loaded from a checkpoint
  std::string description;  // "built-in, seed 1" or the checkpoint's path
};

// An untrained model whose vocabularies are the sentence's words (source and target alike):
// d_model, heads, one encoder and one decoder layer, d_ff 2 d_model, no dropout, seeded weights.
Model builtin_model(const std::string& sentence, int64_t d_model, int64_t heads, uint64_t seed);
// A translate checkpoint (nn/checkpoint.hpp); errors name the file.
Model load_model(const std::string& path);

// A deliberately wrong backward rule, to see the checks catch it.
enum class WrongRule {
  none,
  softmax,    // dS = P * dP: the softmax Jacobian without its rowsum term
  scale,      // dQ = dS K, dK = dS^T Q: the 1/sqrt(d_k) of the forward forgotten
  transpose,  // dV = P dO instead of P^T dO
};
WrongRule parse_wrong_rule(const std::string& s);  // "none" | "softmax" | "scale" | "transpose"

struct Options {
  bool causal = true;  // the causal mask in the self-attention (the encoder itself uses none)
  uint64_t seed = 1;   // G of the loss and the variance experiment (the built-in weights: builtin_model)
  WrongRule wrong_rule = WrongRule::none;
  int64_t fd_samples = 256;  // elements checked per gradient at most (a seeded sample beyond)
  int64_t max_len = 0;       // greedy decoding: tokens at most (0: source tokens + 50, as nn::greedy_decode)
};

struct Result {
  std::string sentence, model, mask;
  int64_t d_model = 0, heads = 0, d_k = 0;
  bool norm_first = false, trained = false;
  std::vector<std::string> tokens, prefix;  // source tokens with <eos>; the decoder prefix
  std::vector<Section> sections;            // forward self-attention, cross-attention, backward
  std::vector<Agreement> agreements;
  std::vector<DecodeStep> decoding;  // with a trained model
  std::string translation;
  std::string tape_dot, fused_dot;  // the tapes of the step-by-step and of the fused forward pass
  // The names of the checks that failed (gradients and agreements); empty when all passed.
  std::vector<std::string> failures() const;
  int64_t num_checks() const;
  const Step* step(const std::string& id) const;  // nullptr when absent
};

// The source ids of `sentence` (without <eos>); throws cli::UsageError naming --src when it is empty,
// too long for the model, or holds a token the model's source vocabulary lacks.
std::vector<int32_t> encode_source(const Model& m, const std::string& sentence);

// Runs the whole walkthrough.
Result run(Model& m, const std::string& sentence, const Options& opt);

// ---- output (attention_walkthrough_text.cpp, attention_walkthrough_page.cpp)
// The text for a terminal of `width` columns: long matrices are cut (the page and the JSON have all).
std::string text_report(const Result& r, int width = 100);
// Every number as one JSON document (-inf as null).
std::string json_report(const Result& r);
// The page of labelled heatmaps in the order of the text; the tape drawn by Graphviz's `dot` when
// it is on the PATH, else its DOT source and a note saying so.
std::string html_report(const Result& r);

// The DOT text rendered to SVG by `dot -Tsvg -Grankdir=TB` (top to bottom); nullopt with `why` set when dot
// is not on the PATH or fails.
std::optional<std::string> render_dot(const std::string& dot, std::string& why);

}  // namespace tg::walkthrough
