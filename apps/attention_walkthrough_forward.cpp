// The walkthrough's forward part: the model, the sentence, the self-attention steps of encoder
// layer 0, greedy decoding, cross-attention of decoder layer 0; then run() puts it all together.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "apps/attention_walkthrough_block.hpp"
#include "apps/cli_errors.hpp"
#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "nn/decode.hpp"
#include "nn/family/transformer_family.hpp"

namespace tg::walkthrough {

using nn::kBos;
using nn::kEos;

Model builtin_model(const std::string& sentence, int64_t d_model, int64_t heads, uint64_t seed) {
  std::vector<std::string> tokens(std::begin(nn::kSpecialTokens), std::end(nn::kSpecialTokens));
  for (const std::string& w : nn::tokenize(sentence, nn::TokenizerKind::word))
    if (std::find(tokens.begin(), tokens.end(), w) == tokens.end()) tokens.push_back(w);
  nn::TransformerConfig cfg;
  cfg.src_vocab = cfg.tgt_vocab = static_cast<int64_t>(tokens.size());
  cfg.d_model = d_model;
  cfg.heads = heads;
  cfg.enc_layers = cfg.dec_layers = 1;
  cfg.d_ff = 2 * d_model;
  cfg.dropout = 0.0f;
  cfg.max_len = 64;
  Model m;
  m.transformer = std::make_unique<nn::Transformer>(cfg, seed);
  m.transformer->eval();
  m.src = m.tgt =
      std::make_shared<nn::VocabTokenizer>(nn::TokenizerKind::word, nn::Vocab::from_tokens(tokens));
  m.description =
      fmt::format("built-in, seed {} (untrained: xavier-uniform matrices, zero attention biases)", seed);
  return m;
}

Model load_model(const std::string& path) {
  nn::Checkpoint ck = nn::read_checkpoint(path);
  Model m;
  m.transformer = nn::load_transformer(ck, path);
  m.src = ck.info.src;
  m.tgt = ck.info.tgt;
  m.trained = true;
  m.description = path;
  return m;
}

WrongRule parse_wrong_rule(const std::string& s) {
  if (s == "none") return WrongRule::none;
  if (s == "softmax") return WrongRule::softmax;
  if (s == "scale") return WrongRule::scale;
  if (s == "transpose") return WrongRule::transpose;
  throw std::invalid_argument(fmt::format("unknown rule '{}' (none|softmax|scale|transpose)", s));
}

std::vector<int32_t> encode_source(const Model& m, const std::string& sentence) {
  nn::UnknownTokens unknown;
  std::vector<int32_t> ids = m.src->encode(sentence, &unknown);
  if (ids.empty()) throw cli::UsageError("--src is empty");
  const int64_t max_len = m.transformer->config().max_len;
  if (static_cast<int64_t>(ids.size()) + 1 > max_len)
    throw cli::UsageError(
        fmt::format("--src has {} tokens, the model takes at most {}", ids.size(), max_len - 1));
  // The walkthrough explains a model's numbers: an <unk> would explain nothing, so it refuses.
  std::vector<std::string> listed;
  for (const std::string& t : unknown.first) listed.push_back("'" + t + "'");
  if (unknown.count > 0)
    throw cli::UsageError(fmt::format("--src: {}{} not in the source vocabulary of {} ({} tokens)",
                                      fmt::join(listed, ", "),
                                      unknown.count > static_cast<int64_t>(listed.size()) ? ", ..." : "",
                                      m.description, m.src->vocab_size()));
  return ids;
}

namespace {

double variance(const Tensor& t) {
  const auto n = static_cast<double>(t.numel());
  double s = 0.0, s2 = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i)
    s += t.data()[i], s2 += static_cast<double>(t.data()[i]) * t.data()[i];
  return s2 / n - (s / n) * (s / n);
}

// Why scale by 1/sqrt(d_k): for q, k with independent N(0, 1) entries var(q . k) = d_k. Measured on
// 10000 random queries, each against `keys` random keys: the scores' variance, and the largest
// softmax weight of each query's row (unscaled and scaled), averaged.
std::string scaling_experiment(int64_t dk, int64_t keys, Generator& gen) {
  const int64_t queries = 10000;
  double s = 0, s2 = 0, top[2] = {0, 0};
  std::vector<double> row(static_cast<size_t>(keys)), q(static_cast<size_t>(dk));
  for (int64_t i = 0; i < queries; ++i) {
    for (double& x : q) x = gen.normal();
    for (double& score : row) {
      score = 0;
      for (double x : q) score += x * gen.normal();
      s += score, s2 += score * score;
    }
    for (int k = 0; k < 2; ++k) {
      const double scale = k == 0 ? 1.0 : 1.0 / std::sqrt(static_cast<double>(dk));
      const double mx = *std::max_element(row.begin(), row.end()) * scale;
      double z = 0;
      for (double x : row) z += std::exp(x * scale - mx);
      top[k] += 1.0 / z;  // exp(max - max) / sum
    }
  }
  const double n = static_cast<double>(queries * keys), var = s2 / n - (s / n) * (s / n);
  return fmt::format(
      "d_k = {}: var(q.k) = {:.2f}, var(q.k / sqrt(d_k)) = {:.3f}; the largest softmax weight "
      "averages {:.2f} unscaled, {:.2f} scaled",
      dk, var, var / static_cast<double>(dk), top[0] / queries, top[1] / queries);
}

// Greedy decoding one step at a time with the model's incremental state, as nn::greedy_decode does.
std::vector<DecodeStep> greedy_steps(nn::Transformer& model, const Model& m, const std::vector<int32_t>& src,
                                     int64_t max_len, std::vector<int32_t>& out) {
  NoGradGuard no_grad;
  const auto S = static_cast<int64_t>(src.size());
  int64_t limit = max_len > 0 ? max_len : 50 + S - 1;
  limit = std::min(limit, model.config().max_len);
  nn::DecoderState st = model.start_decoding(model.encode(src, 1, S), nn::padding_mask(src, 1, S));
  std::vector<DecodeStep> steps;
  std::vector<std::string> prefix = {"<bos>"};
  int32_t token = kBos;
  for (int64_t i = 0; i < limit; ++i) {
    const Tensor p = softmax(model.decode_step(st, std::span<const int32_t>(&token, 1)));  // [1, V]
    std::vector<int32_t> order(static_cast<size_t>(p.numel()));
    std::iota(order.begin(), order.end(), 0);
    // Ties go to the lower id, as nn::greedy_decode's argmax.
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return p.data()[a] > p.data()[b]; });
    DecodeStep step{prefix, {}, m.tgt->label(order[0]), order[0]};
    for (size_t k = 0; k < std::min<size_t>(3, order.size()); ++k)
      step.top.emplace_back(m.tgt->label(order[k]), p.data()[order[k]]);
    steps.push_back(std::move(step));
    token = order[0];
    if (token == kEos) break;
    out.push_back(token);
    prefix.push_back(m.tgt->label(token));
  }
  return steps;
}

// Embeddings plus positions, by the formulas: X = embedding(W_emb, ids) sqrt(d) + PE  [T, d].
Tensor embed(const Tensor& W_emb, const std::vector<int32_t>& ids, Tensor& E, Tensor& PE) {
  const auto T = static_cast<int64_t>(ids.size());
  const int64_t d = W_emb.size(1);
  E = embedding(W_emb, ids, {T}) * std::sqrt(static_cast<float>(d));
  // PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d))
  PE = Tensor::zeros({T, d});
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; 2 * i < d; ++i) {
      const double angle = static_cast<double>(p) / std::pow(10000.0, 2.0 * static_cast<double>(i) / d);
      PE.data()[p * d + 2 * i] = static_cast<float>(std::sin(angle));
      if (2 * i + 1 < d) PE.data()[p * d + 2 * i + 1] = static_cast<float>(std::cos(angle));
    }
  return E + PE;
}

Step step(std::string id, std::string title, std::string formula, std::vector<Matrix> matrices,
          std::vector<std::string> notes = {}) {
  return {std::move(id), std::move(title), std::move(formula), std::move(matrices), std::move(notes), {}};
}

// The self-attention of encoder layer 0, step by step. Returns X (the block's input) in `X_out`.
Section self_attention_section(Model& m, const std::vector<int32_t>& ids, const std::vector<std::string>& tok,
                               const Tensor& M, const Weights& w, const Options& opt, Tensor& X_out,
                               std::vector<Agreement>& agreements) {
  NoGradGuard no_grad;
  nn::Transformer& model = *m.transformer;
  nn::MultiHeadAttention& mha = model.encoder.layers[0]->self_attn;
  const int64_t T = static_cast<int64_t>(ids.size()), d = w.d_model(), H = w.heads, dk = w.d_k();
  const auto dims = index_labels(d), hd = head_labels(d, H), hk = index_labels(dk);
  Section sec{"self",
              "Self-attention, step by step",
              fmt::format("The weights of encoder layer 0 (self_attn, norm1). {} Each step is a few lines of "
                          "apps/attention_walkthrough_block.cpp.",
                          opt.causal ? "With the causal mask, as a decoder or a language model attends (the "
                                       "translate encoder itself uses none: --mask none)."
                                     : "No mask: every token sees every token, as the encoder attends."),
              {}};
  auto& steps = sec.steps;
  std::vector<std::string> id_text;
  for (int32_t id : ids) id_text.push_back(std::to_string(id));
  steps.push_back(step(
      "tokens", "Tokens", "source = tokens + <eos>, looked up in the source vocabulary", {},
      {fmt::format("tokens: {}", fmt::join(tok, " ")), fmt::format("ids: {}", fmt::join(id_text, " "))}));

  Tensor E, PE;
  const Tensor X = X_out = embed(model.src_embed.weight, ids, E, PE);
  agreements.push_back(agreement("PE by the formula = nn::PositionalEncoding's table", PE,
                                 slice(nn::PositionalEncoding(d, T).table(), 0, 0, T)));
  agreements.push_back(agreement("X = src_embed.forward(ids) + PE (nn::Embedding, nn::PositionalEncoding)", X,
                                 nn::PositionalEncoding(d, T).forward(model.src_embed.forward(ids, {T}))));
  steps.push_back(step("E", "Token embeddings", "E = embedding(W_emb, ids) * sqrt(d_model)",
                       {matrix("E", E, tok, dims)}));
  steps.push_back(step("PE", "Positions",
                       "PE[p, 2i] = sin(p / 10000^(2i/d)),  PE[p, 2i+1] = cos(p / 10000^(2i/d))",
                       {matrix("PE", PE, tok, dims)}));
  steps.push_back(step("X", "Embeddings plus positions", "X = E + PE", {matrix("X", X, tok, dims)}));

  const Block b = self_attention_block(X, w, M, Tensor::zeros({T, d}));
  const Attention& a = b.att;
  const std::string in = w.norm_first ? "A" : "X";
  if (w.norm_first)
    steps.push_back(step("A", "Pre-norm", "A = LayerNorm(X) (norm1): this layer normalises before attending",
                         {matrix("A", b.A, tok, dims)}));
  const std::string heads_note =
      fmt::format("{} heads of d_k = d_model / heads = {}: head h reads columns h.0 .. h.{} of Q, K and V", H,
                  dk, dk - 1);
  steps.push_back(
      step("W_qkv", "Projection weights",
           "W_q, W_k, W_v = rows 0..d-1, d..2d-1, 2d..3d-1 of in_proj_weight (PyTorch layout [out, in])",
           {matrix("W_q", w.W_q, hd, dims), matrix("W_k", w.W_k, hd, dims), matrix("W_v", w.W_v, hd, dims),
            matrix("biases", concat({w.b_q, w.b_k, w.b_v}, 0), {"b_q", "b_k", "b_v"}, hd)},
           {"row h.j of W_q makes column h.j of Q"}));
  steps.push_back(
      step("Q", "Queries", fmt::format("Q = {} W_q^T + b_q", in), {matrix("Q", a.Q, tok, hd)}, {heads_note}));
  steps.push_back(step("K", "Keys", fmt::format("K = {} W_k^T + b_k", in), {matrix("K", a.K, tok, hd)}));
  steps.push_back(step("V", "Values", fmt::format("V = {} W_v^T + b_v", in), {matrix("V", a.V, tok, hd)}));

  const double var_raw = variance(a.S_raw), var_s = variance(a.S);
  steps.push_back(
      step("QK", "Scores", "Q_h K_h^T per head: row t = query t, column s = key s",
           attention_maps("Q_h K_h^T", a.S_raw, tok, tok),
           {fmt::format("var(Q_h K_h^T) = {:.4f} (all heads, all entries; var(Q) = {:.4f}, var(K) = {:.4f})",
                        var_raw, variance(a.Q), variance(a.K))}));
  Generator gen(opt.seed);
  std::vector<std::string> why = {
      fmt::format("var(S) = {:.4f} = var(Q_h K_h^T) / d_k = {:.4f} / {}", var_s, var_raw, dk),
      fmt::format(
          "why: for q, k with independent N(0, 1) entries var(q . k) = d_k, and large scores saturate the "
          "softmax (one weight near 1, gradients near 0); measured on 10000 random queries against {} "
          "keys each:",
          std::max<int64_t>(T, 2)),
      "  " + scaling_experiment(dk, std::max<int64_t>(T, 2), gen)};
  if (dk != 64) why.push_back("  " + scaling_experiment(64, std::max<int64_t>(T, 2), gen));
  steps.push_back(step("S", "Scaled scores",
                       fmt::format("S = Q_h K_h^T / sqrt(d_k) = Q_h K_h^T / {:.4g}", std::sqrt(dk)),
                       attention_maps("S", a.S, tok, tok), why));
  Matrix mask = matrix("M", M, tok, tok);
  mask.row_title = "query";
  mask.col_title = "key";
  steps.push_back(step("M", "Mask",
                       opt.causal ? "M[t, s] = -inf where s > t (query t sees keys 0..t), else 0"
                                  : "M = 0: no mask, every query sees every key",
                       {mask}));
  steps.push_back(step("S+M", "Masked scores", "S + M", attention_maps("S + M", a.S + M, tok, tok)));

  double worst = 0.0;
  bool zeros = true;
  std::vector<std::string> sums;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t) {
      double s = 0;
      for (int64_t k = 0; k < T; ++k) {
        const float p = a.P.data()[(h * T + t) * T + k];
        s += p;
        zeros = zeros && (M.data()[t * T + k] == 0.0f || p == 0.0f);
      }
      worst = std::max(worst, std::abs(s - 1.0));
      if (h == 0) sums.push_back(fmt::format("{:.4f}", s));
    }
  steps.push_back(step("P", "Attention weights",
                       "P = softmax(S + M) over each row: P[t, s] = exp(S+M)[t, s] / sum_s' exp(S+M)[t, s']",
                       attention_maps("P", a.P, tok, tok, &M),
                       {fmt::format("row sums (head 0): {}; all rows of all heads: max |sum - 1| = {:.1e}",
                                    fmt::join(sums, " "), worst),
                        fmt::format("masked entries exactly 0: {}", zeros ? "yes" : "NO")}));
  steps.push_back(step("O_h", "Weighted values",
                       "O_h = P_h V_h: each query's average of the values, weighted by P",
                       per_head("O", a.O_h, tok, hk)));
  steps.push_back(step("O", "Heads concatenated", "O = [O_0 | O_1 | ...]", {matrix("O", a.O, tok, hd)}));
  steps.push_back(step("W_o", "Output projection weights", "W_o, b_o = out_proj.weight, out_proj.bias",
                       {matrix("W_o", w.W_o, dims, hd), matrix("b_o", w.b_o, {"b_o"}, dims)}));

  // The engine's fused path on the same weights: one QKV projection, attention_probs, attention_context.
  mha.keep_attention = true;
  const Tensor Y_fused = mha.self_attention(reshape(b.A, {1, T, d}), opt.causal);
  mha.keep_attention = false;
  agreements.push_back(
      agreement("P = attention_probs (inside nn::MultiHeadAttention)", a.P, mha.last_attention));
  agreements.push_back(
      agreement("Y = nn::MultiHeadAttention::self_attention (fused QKV, attention_probs, attention_context)",
                a.Y, Y_fused));
  steps.push_back(
      step("Y", "Attention output", "Y = O W_o^T + b_o", {matrix("Y", a.Y, tok, dims)},
           {fmt::format("the engine's fused nn::MultiHeadAttention gives the same Y: max |diff| = {:.1e}",
                        max_abs_diff(a.Y, Y_fused))}));
  steps.push_back(step(
      "Z", "Residual and layer norm",
      w.norm_first ? "Z = X + Y (pre-norm: the residual only)"
                   : "Z = LayerNorm(X + Y) = (R - mean(R)) / sqrt(var(R) + 1e-5) * gamma + beta, R = X + Y",
      {matrix("Z", b.Z, tok, dims), matrix("norm1", concat({w.ln_w, w.ln_b}, 0), {"gamma", "beta"}, dims)}));
  return sec;
}

// Two sentences in one batch: the sentence and a shorter one (the first half of its words), padded
// with <pad> to the same length. The short one's <pad> keys are masked, so padding changes nothing
// for its real tokens: their attention equals the short sentence's alone, and the engine's batched
// path with nn::padding_mask gives the same weights for both sentences.
Section padding_section(Model& m, const std::vector<int32_t>& ids, const std::vector<std::string>& tok,
                        const Weights& w, const Options& opt, std::vector<Agreement>& agreements) {
  NoGradGuard no_grad;
  nn::Transformer& model = *m.transformer;
  const auto T = static_cast<int64_t>(ids.size());     // the sentence's words + <eos>
  const int64_t n = (T - 1) / 2 + 1, d = w.d_model();  // the short one: half of the words + <eos>
  std::vector<int32_t> short_ids(ids.begin(), ids.begin() + (n - 1));
  short_ids.push_back(kEos);
  std::vector<int32_t> padded = short_ids;
  padded.resize(static_cast<size_t>(T), nn::kPad);
  std::vector<std::string> tok2;
  for (int32_t id : padded) tok2.push_back(m.src->label(id));

  // The short sentence's mask: its <pad> keys (and the causal mask when on).
  Tensor M2 = additive_mask(T, opt.causal);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = n; k < T; ++k) M2.data()[t * T + k] = -std::numeric_limits<float>::infinity();
  Tensor E, PE;
  const Block one = self_attention_block(embed(model.src_embed.weight, ids, E, PE), w,
                                         additive_mask(T, opt.causal), Tensor::zeros({T, d}));
  const Block two =
      self_attention_block(embed(model.src_embed.weight, padded, E, PE), w, M2, Tensor::zeros({T, d}));
  const Block alone = self_attention_block(embed(model.src_embed.weight, short_ids, E, PE), w,
                                           additive_mask(n, opt.causal), Tensor::zeros({n, d}));
  const Tensor P_real = slice(slice(two.att.P, 1, 0, n), 2, 0, n);
  agreements.push_back(
      agreement("padding changes nothing: P of the short sentence's tokens in the batch = P of it alone",
                P_real, alone.att.P));
  agreements.push_back(
      agreement("padding changes nothing: Z of the short sentence's tokens in the batch = Z of it alone",
                slice(two.Z, 0, 0, n), alone.Z));
  // The engine's batched path: both sentences in one [2, T, d] input, the padding as nn::padding_mask.
  std::vector<int32_t> batch_ids = ids;
  batch_ids.insert(batch_ids.end(), padded.begin(), padded.end());
  nn::MultiHeadAttention& mha = model.encoder.layers[0]->self_attn;
  mha.keep_attention = true;
  mha.self_attention(concat({reshape(one.A, {1, T, d}), reshape(two.A, {1, T, d})}, 0), opt.causal,
                     nn::padding_mask(batch_ids, 2, T));
  mha.keep_attention = false;
  agreements.push_back(
      agreement("P of the padded batch = attention_probs with nn::padding_mask (nn::MultiHeadAttention)",
                concat({one.att.P, two.att.P}, 0), mha.last_attention));

  Section sec{
      "padding",
      "Padding: two sentences in one batch",
      "A batch is one tensor, so a shorter sentence is padded with <pad> to the longest one's length. "
      "Its <pad> positions are keys no query may attend to (the key padding mask): their weights "
      "are exactly 0, and the real tokens attend as if the sentence were alone.",
      {}};
  std::vector<float> id_values(ids.begin(), ids.end());
  id_values.insert(id_values.end(), padded.begin(), padded.end());
  Matrix batch =
      matrix("ids", Tensor::from_data({2, T}, id_values), {"sentence 1", "sentence 2"}, index_labels(T));
  batch.row_title = "sentence";
  batch.col_title = "position";
  batch.cells = tok;
  batch.cells.insert(batch.cells.end(), tok2.begin(), tok2.end());
  batch.masked.assign(static_cast<size_t>(2 * T), 0);
  for (int64_t k = n; k < T; ++k) batch.masked[static_cast<size_t>(T + k)] = 1;
  sec.steps.push_back(
      step("batch", "A padded batch",
           "ids [2, T]: each sentence + <eos>, the shorter padded with <pad> (id 0)", {batch},
           {fmt::format("sentence 1: {}", fmt::join(tok, " ")),
            fmt::format("sentence 2: {}", fmt::join(tok2, " ")),
            fmt::format("nn::padding_mask(ids) marks the {} <pad> position{} of sentence 2 (hatched)", T - n,
                        T - n == 1 ? "" : "s")}));
  Matrix mask = matrix("M (sentence 2)", M2, tok2, tok2);
  mask.row_title = "query";
  mask.col_title = "key";
  sec.steps.push_back(step("Mpad", "The short sentence's mask",
                           opt.causal ? "M[t, s] = -inf where key s is <pad> or s > t, else 0"
                                      : "M[t, s] = -inf where key s is <pad>, else 0",
                           {mask}));
  sec.steps.push_back(step(
      "Ppad", "Its attention weights", "P = softmax(S + M): the <pad> columns are exactly 0",
      attention_maps("P (sentence 2)", two.att.P, tok2, tok2, &M2),
      {fmt::format("its {} real tokens' weights = those of the sentence alone: max |diff| = {:.1e}", n,
                   max_abs_diff(P_real, alone.att.P)),
       "the <pad> rows are computed too; nothing uses them (the loss ignores <pad> labels, and no query "
       "attends to a <pad> key)",
       fmt::format("both sentences through nn::MultiHeadAttention with nn::padding_mask: max |diff| = {:.1e}",
                   max_abs_diff(concat({one.att.P, two.att.P}, 0), mha.last_attention))}));
  return sec;
}

// Cross-attention of decoder layer 0: queries from the decoder prefix, keys and values from the
// encoder's output.
Section cross_attention_section(Model& m, const std::vector<int32_t>& src,
                                const std::vector<std::string>& tok, const std::vector<int32_t>& prefix_ids,
                                const std::vector<std::string>& prefix, std::vector<Agreement>& agreements) {
  NoGradGuard no_grad;
  nn::Transformer& model = *m.transformer;
  nn::DecoderLayer& layer = *model.decoder.layers[0];
  const bool pre = model.config().norm_first;
  const auto S = static_cast<int64_t>(src.size()), T = static_cast<int64_t>(prefix_ids.size());
  const int64_t d = model.config().d_model, H = model.config().heads;
  const auto dims = index_labels(d), hd = head_labels(d, H);
  Section sec{
      "cross",
      "Cross-attention from a two-token decoder prefix",
      "Decoder layer 0 (self_attn, multihead_attn): the queries come from the decoder, the keys and values "
      "from the encoder's output, so each target position looks at the whole source.",
      {}};
  Tensor E, PE;
  const Tensor D = embed(model.tgt_embed.weight, prefix_ids, E, PE);
  const Tensor D3 = reshape(D, {1, T, d});
  // The decoder's first sub-layer (its causal self-attention: the steps above, with its own weights).
  Tensor q_in = pre ? D3 + layer.self_attn.self_attention(layer.norm1.forward(D3), true)
                    : layer.norm1.forward(D3 + layer.self_attn.self_attention(D3, true));
  if (pre) q_in = layer.norm2.forward(q_in);
  const Tensor memory = model.encode(src, 1, S);
  const Weights w = copy_weights(layer.multihead_attn, layer.norm2, pre);
  const Attention a = multi_head(reshape(q_in, {T, d}), reshape(memory, {S, d}), w, Tensor::zeros({T, S}));
  layer.multihead_attn.keep_attention = true;
  const Tensor Y_fused = layer.multihead_attn.cross_attention(q_in, memory);
  layer.multihead_attn.keep_attention = false;
  agreements.push_back(agreement("cross P = attention_probs (inside nn::MultiHeadAttention)", a.P,
                                 layer.multihead_attn.last_attention));
  agreements.push_back(agreement("cross Y = nn::MultiHeadAttention::cross_attention", a.Y, Y_fused));

  auto& steps = sec.steps;
  steps.push_back(
      step("prefix", "Decoder prefix", "decoder input = <bos> + the target so far", {},
           {fmt::format("prefix: {} ({})", fmt::join(prefix, " "),
                        m.trained ? "<bos> and the model's first greedy token"
                                  : "<bos> and the first source word: the built-in model is untrained")}));
  steps.push_back(step("D", "Decoder embeddings plus positions",
                       "D = embedding(W_tgt, prefix) * sqrt(d_model) + PE", {matrix("D", D, prefix, dims)}));
  steps.push_back(
      step("H", "The decoder's first sub-layer",
           pre ? "H = LayerNorm2(D + SelfAttention_causal(LayerNorm1(D)))"
               : "H = LayerNorm1(D + SelfAttention_causal(D)): the steps above, with the decoder's weights",
           {matrix("H", q_in, prefix, dims)}));
  steps.push_back(step("memory", "Encoder output",
                       "memory = model.encode(source): all encoder layers and the final norm",
                       {matrix("memory", memory, tok, dims)}));
  steps.push_back(step("Qc", "Queries from the decoder", "Q = H W_q^T + b_q (multihead_attn's weights)",
                       {matrix("Q", a.Q, prefix, hd)}));
  steps.push_back(step("Kc", "Keys from the encoder", "K = memory W_k^T + b_k", {matrix("K", a.K, tok, hd)}));
  steps.push_back(
      step("Vc", "Values from the encoder", "V = memory W_v^T + b_v", {matrix("V", a.V, tok, hd)}));
  steps.push_back(step(
      "Pc", "Cross-attention weights",
      "P = softmax(Q_h K_h^T / sqrt(d_k)): no causal mask, every target position sees every source token",
      attention_maps("P", a.P, prefix, tok)));
  steps.push_back(
      step("Yc", "Cross-attention output", "Y = [P_0 V_0 | P_1 V_1 | ...] W_o^T + b_o",
           {matrix("Y", a.Y, prefix, dims)},
           {fmt::format("nn::MultiHeadAttention::cross_attention gives the same Y: max |diff| = {:.1e}",
                        max_abs_diff(a.Y, Y_fused))}));
  return sec;
}

}  // namespace

Result run(Model& m, const std::string& sentence, const Options& opt) {
  nn::Transformer& model = *m.transformer;
  const nn::TransformerConfig& cfg = model.config();
  Result r;
  r.sentence = sentence;
  r.model = m.description;
  r.mask = opt.causal ? "causal" : "none";
  r.d_model = cfg.d_model;
  r.heads = cfg.heads;
  r.d_k = cfg.d_model / cfg.heads;
  r.norm_first = cfg.norm_first;
  r.trained = m.trained;

  std::vector<int32_t> ids = encode_source(m, sentence);
  const std::vector<int32_t> words = ids;
  ids.push_back(kEos);
  for (int32_t id : ids) r.tokens.push_back(m.src->label(id));
  const auto T = static_cast<int64_t>(ids.size());
  const Tensor M = additive_mask(T, opt.causal);
  nn::EncoderLayer& enc0 = *model.encoder.layers[0];
  const Weights w = copy_weights(enc0.self_attn, enc0.norm1, cfg.norm_first);

  Tensor X;
  r.sections.push_back(self_attention_section(m, ids, r.tokens, M, w, opt, X, r.agreements));
  r.sections.push_back(padding_section(m, ids, r.tokens, w, opt, r.agreements));

  // The second decoder token: what a trained model would emit first; the built-in one copies (its
  // source and target vocabularies are one).
  std::vector<int32_t> prefix_ids = {kBos, words[0]};
  if (m.trained) {
    std::vector<int32_t> out;
    r.decoding = greedy_steps(model, m, ids, opt.max_len, out);
    r.translation = m.tgt->decode(out);
    const auto reference = nn::greedy_decode(model, ids, 1, T, opt.max_len).front();
    r.agreements.push_back(
        {"greedy steps = nn::greedy_decode", reference == out ? 0.0 : 1.0, 0.0, reference == out});
    prefix_ids[1] = r.decoding.empty() ? kEos : r.decoding.front().chosen_id;
  }
  for (int32_t id : prefix_ids) r.prefix.push_back(m.tgt->label(id));
  r.sections.push_back(cross_attention_section(m, ids, r.tokens, prefix_ids, r.prefix, r.agreements));

  Generator gen(opt.seed);
  const Tensor G = Tensor::uniform({T, cfg.d_model}, -1.0f, 1.0f, gen).set_name("G");
  r.sections.push_back(
      backward_section(X, w, M, G, enc0.self_attn, r.tokens, opt, r.agreements, r.tape_dot, r.fused_dot));
  return r;
}

std::vector<std::string> Result::failures() const {
  std::vector<std::string> f;
  for (const Section& s : sections)
    for (const Step& st : s.steps)
      if (st.check && !st.check->ok()) f.push_back(st.id);
  for (const Agreement& a : agreements)
    if (!a.ok) f.push_back(a.what);
  return f;
}

int64_t Result::num_checks() const {
  int64_t n = static_cast<int64_t>(agreements.size());
  for (const Section& s : sections)
    for (const Step& st : s.steps) n += st.check.has_value();
  return n;
}

const Step* Result::step(const std::string& id) const {
  for (const Section& s : sections)
    for (const Step& st : s.steps)
      if (st.id == id) return &st;
  return nullptr;
}

}  // namespace tg::walkthrough
