// translate: train, evaluate and run an encoder-decoder Transformer on your own parallel text.
//
//   translate train --data train.tsv [--valid valid.tsv] --out model.safetensors [options]
//   translate eval --model model.safetensors --data test.tsv [--bleu] [--json]
//   translate decode --model model.safetensors [--beam K] < sources.txt
//   translate attention --model model.safetensors --src "..." --out attn.svg
//
// The options of each: translate_cli.cpp (translate <command> --help). The subcommands:
// translate_train.cpp, translate_eval.cpp (eval and decode), translate_attention.cpp.
#include "translate_commands.hpp"

int main(int argc, char** argv) {
  return translate::main(argc, argv);
}
