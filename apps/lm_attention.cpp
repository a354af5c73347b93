// lm attention: draws every layer's and head's causal self-attention over a text as SVG heatmaps,
// labelled with the tokens (apps/heatmap_svg.hpp, shared with translate attention).
#include <fmt/format.h>

#include "apps/cli_errors.hpp"
#include "apps/heatmap_svg.hpp"
#include "autograd/tape.hpp"
#include "io/file.hpp"
#include "lm_commands.hpp"
#include "nn/family/hf_gpt2.hpp"
#include "nn/gpt_text.hpp"

namespace lm {

namespace nn = tg::nn;
using tg::cli::UsageError;

int run_attention(const AttentionArgs& args) {
  const nn::GptCheckpoint ck = nn::read_lm_model(args.model);
  const std::unique_ptr<nn::GPT> model = nn::load_gpt(ck, args.model);
  const nn::Tokenizer& tok = *ck.info.tokenizer;
  std::vector<int32_t> ids;
  try {
    nn::UnknownTokens unknown;
    ids = tok.encode(args.prompt, &unknown, "--prompt");
    nn::report_unknown(unknown, "--prompt", args.strict);
  } catch (const tg::io::DataError& e) {
    throw UsageError(e.what());
  }
  const auto T = static_cast<int64_t>(ids.size()), block = ck.info.config.block_size;
  if (T == 0) throw UsageError("--prompt is empty");
  if (T > block)
    throw UsageError(
        fmt::format("--prompt has {} tokens, more than the block size of {} ({})", T, args.model, block));

  // Every block's probabilities [1, H, T, T] from one forward pass.
  {
    tg::NoGradGuard no_grad;
    model->keep_attention(true);
    model->hidden(ids, 1, T);
  }
  const tg::NamedTensors maps = model->attention_maps();
  std::vector<std::string> labels;
  for (int32_t id : ids) labels.push_back(tok.label(id));
  const int64_t H = ck.info.config.n_head;
  std::vector<std::vector<tg::heatmap::Panel>> grid;
  for (const auto& [name, a] : maps) {
    auto& row = grid.emplace_back();
    for (int64_t h = 0; h < H; ++h) {
      row.push_back({fmt::format("{} head {}", name, h), a.data() + h * T * T, &labels, &labels});
      row.back().causal = true;  // a token sees itself and the tokens before it
    }
  }
  tg::io::write_file_atomic(args.out, tg::heatmap::page_svg({"text: " + args.prompt}, grid));
  // The note to stderr when the SVG went to stdout (--out /dev/stdout | rsvg-convert ...).
  fmt::print(tg::io::is_stdout(args.out) ? stderr : stdout, "wrote {} ({} layers x {} heads; {} tokens)\n",
             args.out, maps.size(), H, T);
  return 0;
}

}  // namespace lm
