// lm tokenize (the token ids of each line of stdin, for checking a tokenizer against other tools) and
// lm export (a model as a Hugging Face GPT-2 folder: nn/family/hf_gpt2.hpp).
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "apps/cli_errors.hpp"
#include "lm_commands.hpp"
#include "nn/family/hf_gpt2.hpp"

namespace lm {

namespace nn = tg::nn;

int run_tokenize(const TokenizeArgs& args) {
  const nn::GptCheckpoint ck = nn::read_lm_model(args.model);
  const nn::Tokenizer& tok = *ck.info.tokenizer;
  nn::UnknownTokens unknown;
  int64_t n = 0;
  for (std::string line; std::getline(std::cin, line);) {
    ++n;
    const std::vector<int32_t> ids = tok.encode(line, &unknown, fmt::format("stdin:{}", n));
    fmt::print("{}\n", fmt::join(ids, " "));
    std::fflush(stdout);  // a line out for each line in, as they come
  }
  nn::report_unknown(unknown, "stdin", args.strict);
  return 0;
}

int run_export(const ExportArgs& args) {
  const nn::GptCheckpoint ck = nn::read_lm_model(args.model);
  const std::unique_ptr<nn::GPT> model = nn::load_gpt(ck, args.model);
  try {
    nn::write_hf_gpt2(args.hf, *model, *ck.info.tokenizer);
  } catch (const std::invalid_argument& e) {
    throw tg::cli::UsageError(e.what());  // a byte or char model: the wrong --model
  }
  fmt::print(
      "wrote {}: config.json, model.safetensors and the tokenizer's files ({} parameters, vocabulary {})\n",
      args.hf, model->num_parameters(), ck.info.config.vocab_size);
  return 0;
}

}  // namespace lm
