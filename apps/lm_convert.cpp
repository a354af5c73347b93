// lm tokenize (the token ids of each line of stdin, for checking a tokenizer against other tools).
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "apps/cli_errors.hpp"
#include "lm_commands.hpp"
#include "nn/family/gpt_family.hpp"

namespace lm {

namespace nn = tg::nn;

int run_tokenize(const TokenizeArgs& args) {
  const nn::GptCheckpoint ck = nn::read_gpt_checkpoint(args.model);
  const nn::Tokenizer& tok = *ck.info.tokenizer;
  nn::UnknownTokens unknown;
  int64_t n = 0;
  for (std::string line; std::getline(std::cin, line);) {
    ++n;
    const std::vector<int32_t> ids = tok.encode(line, &unknown, fmt::format("stdin (line {})", n));
    fmt::print("{}\n", fmt::join(ids, " "));
    std::fflush(stdout);  // a line out for each line in, as they come
  }
  nn::report_unknown(unknown, "stdin", args.strict);
  return 0;
}

}  // namespace lm
