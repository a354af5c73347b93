// translate: train, evaluate and run an encoder-decoder Transformer on your own parallel text.
//
//   translate train --data train.tsv [--valid valid.tsv] --out model.safetensors [options]
//   translate eval --model model.safetensors --data test.tsv [--bleu] [--json]
//   translate decode --model model.safetensors [--beam K] < sources.txt
//   translate attention --model model.safetensors --src "..." --out attn.svg
//
// Exit status: 0 success, 1 runtime error (bad data, unreadable checkpoint, a checkpoint that
// could not be written), 2 bad command line, 3 training stopped on a NaN/Inf loss or gradient
// (--on-nan stop, after saving the last good state), 130 training interrupted by Ctrl-C (after
// saving).
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <exception>

#include "translate_common.hpp"

namespace {

constexpr const char* kUsage =
    "usage: translate <command> [options]   (translate <command> --help for its options)\n";

constexpr const char* kHelp =
    "\ncommands:\n"
    "  train       train a model on source<TAB>target lines, keep the best checkpoint\n"
    "  eval        loss, token accuracy, exact match (and BLEU) of a model on a test set\n"
    "  decode      translate the lines of stdin (greedy or --beam K)\n"
    "  attention   draw every layer's and head's attention for one sentence as SVG\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "translate: error: no command given\n{}", kUsage);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    fmt::print("{}{}", kUsage, kHelp);
    return 0;
  }
  const std::vector<std::string> rest(argv + 2, argv + argc);
  // Over a file-size limit (ulimit -f) a write fails with EFBIG and is reported like a full disk,
  // instead of SIGXFSZ killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    if (cmd == "train") return translate::run_train(rest);
    if (cmd == "eval") return translate::run_eval(rest);
    if (cmd == "decode") return translate::run_decode(rest);
    if (cmd == "attention") return translate::run_attention(rest);
    fmt::print(stderr, "translate: error: unknown command '{}'\n{}", cmd, kUsage);
    return 2;
  } catch (const translate::UsageError& e) {
    fmt::print(stderr, "translate {}: error: {}\n{}\n", cmd, e.what(), e.usage);
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "translate {}: error: {}\n", cmd, e.what());
    return 1;
  }
}
