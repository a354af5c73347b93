// translate attention: draws every layer's and head's attention for one sentence as SVG heatmaps
// (encoder self-attention, decoder self-attention, cross-attention), labelled with the tokens.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "apps/cli_errors.hpp"
#include "apps/heatmap_svg.hpp"
#include "autograd/tape.hpp"
#include "io/file.hpp"
#include "nn/decode.hpp"
#include "translate_common.hpp"

namespace translate {

namespace {

// The sentence pair to draw: --src, and --tgt or the greedy translation (both must fit the model).
EncodedPair attended_pair(const AttentionArgs& args, const LoadedModel& m) {
  const int64_t max_len = m.model->config().max_len;
  UnknownTokens unknown;
  EncodedPair pair{m.info.src->encode(args.src, &unknown), {}};
  report_unknown(unknown, "--src", args.strict);
  if (pair.src.empty()) throw tg::cli::UsageError("--src is empty");
  if (static_cast<int64_t>(pair.src.size()) + 1 > max_len)
    throw tg::cli::UsageError(
        fmt::format("--src has {} tokens, the model takes at most {}", pair.src.size(), max_len - 1));
  if (!args.tgt.empty()) {
    UnknownTokens unknown_tgt;
    pair.tgt = m.info.tgt->encode(args.tgt, &unknown_tgt);
    report_unknown(unknown_tgt, "--tgt", args.strict);
  } else {
    int64_t src_len = 0;
    const std::vector<int32_t> src = pad_sources({pair.src}, src_len);
    pair.tgt = greedy_decode(*m.model, src, 1, src_len, args.max_len).front();
  }
  if (static_cast<int64_t>(pair.tgt.size()) + 1 > max_len)
    throw tg::cli::UsageError(
        fmt::format("the target has {} tokens, the model takes at most {}", pair.tgt.size(), max_len - 1));
  return pair;
}

// Every attention block's weights [1, H, T, S] for one forward pass over the pair.
NamedTensors attention_maps(Transformer& model, const EncodedPair& pair) {
  const std::vector<EncodedPair> pairs = {pair};
  const std::vector<int64_t> idx = {0};
  NoGradGuard no_grad;
  model.eval();
  model.keep_attention(true);
  model.forward(make_batch(pairs, idx));
  NamedTensors maps = model.attention_maps();
  model.keep_attention(false);
  return maps;
}

// The SVG: a title with both sentences, then one row of H panels per attention block.
std::string attention_svg(const NamedTensors& maps, int64_t H, const std::vector<std::string>& src_labels,
                          const std::vector<std::string>& tgt_labels, const std::string& title_src,
                          const std::string& title_tgt) {
  std::vector<Tensor> weights;  // contiguous copies, alive until the page is drawn
  std::vector<std::vector<heatmap::Panel>> grid;
  for (const auto& [name, a] : maps) {
    if (!a.defined() || a.dim() != 4 || a.size(1) != H)
      throw std::runtime_error(fmt::format("attention: no [1, {}, T, S] map recorded for {}", H, name));
    const bool encoder = name.starts_with("encoder"), cross = name.ends_with("multihead_attn");
    const auto* rows = encoder ? &src_labels : &tgt_labels;
    const auto* cols = encoder || cross ? &src_labels : &tgt_labels;
    if (a.size(2) != static_cast<int64_t>(rows->size()) || a.size(3) != static_cast<int64_t>(cols->size()))
      throw std::runtime_error(fmt::format("attention: {} has shape {}, expected [1, {}, {}, {}]", name,
                                           shape_str(a.shape()), H, rows->size(), cols->size()));
    const Tensor& w = weights.emplace_back(a.clone());
    auto& row = grid.emplace_back();
    for (int64_t h = 0; h < H; ++h) {
      row.push_back({fmt::format("{} head {}", name, h), w.data() + h * a.size(2) * a.size(3), rows, cols});
      row.back().causal = !encoder && !cross;  // the decoder's self-attention
      row.back().row_title = encoder ? "query (source)" : "query (decoder input)";
      row.back().col_title = encoder || cross ? "key (source)" : "key (decoder input)";
    }
  }
  // The decoder's rows are its input, the target shifted right: the row of <bos> predicts the
  // first target word, so it looks at that word's source, which reads as a misalignment otherwise.
  const std::string next = tgt_labels.size() > 1 ? tgt_labels[1] : "<eos>";
  return heatmap::page_svg(
      {"source: " + title_src, "target: " + title_tgt,
       "decoder rows are the decoder's input, <bos> + the target shifted right by one: each "
       "row predicts the next token (the <bos> row predicts \"" +
           next + "\")"},
      grid);
}

}  // namespace

int run_attention(const AttentionArgs& args) {
  LoadedModel m = load_model(args.model);
  const EncodedPair pair = attended_pair(args, m);
  // Labels: what each position holds (unknown words shown as <unk>, as the model sees them).
  std::vector<std::string> src_labels, tgt_labels = {"<bos>"};
  for (int32_t id : pair.src) src_labels.push_back(m.info.src->label(id));
  src_labels.push_back("<eos>");
  for (int32_t id : pair.tgt) tgt_labels.push_back(m.info.tgt->label(id));

  const NamedTensors maps = attention_maps(*m.model, pair);
  const int64_t H = m.model->config().heads;
  write_file_atomic(args.out,
                    attention_svg(maps, H, src_labels, tgt_labels, args.src, m.info.tgt->decode(pair.tgt)));
  // The note to stderr when the SVG went to stdout (--out /dev/stdout | rsvg-convert ...).
  fmt::print(tg::io::is_stdout(args.out) ? stderr : stdout,
             "wrote {} ({} attention blocks x {} heads; source {} tokens, target {} tokens)\n", args.out,
             maps.size(), H, src_labels.size(), tgt_labels.size());
  return 0;
}

}  // namespace translate
