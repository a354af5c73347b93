// lm: train a GPT language model on any text file, evaluate it, sample from it.
//
//   lm train --data text.txt --out model.safetensors [options]
//   lm eval --model model.safetensors --data text.txt [--json]
//   lm sample --model model.safetensors --prompt "..." [--tokens N --temperature T --top-k K --top-p P --seed
//   S] lm attention --model model.safetensors --prompt "..." --out attn.svg
//
// The options of each: lm_cli.cpp (lm <command> --help). The subcommands: lm_train.cpp (with
// lm_task.cpp), lm_eval.cpp (eval and sample), lm_attention.cpp. The model: nn/gpt.hpp.
#include "lm_commands.hpp"

int main(int argc, char** argv) {
  return lm::main(argc, argv);
}
