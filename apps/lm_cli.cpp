// lm's command line: every subcommand's options with their help, range and default
// (apps/cli.hpp), and the program's entry point.
#include <vector>

#include "apps/cli.hpp"
#include "lm_commands.hpp"

namespace lm {

namespace cli = tg::cli;

namespace {

// The training options a checkpoint keeps (metadata "train.<name>") and --resume reuses.
const std::vector<std::string> kSavedOptions = {"steps",      "batch-size",     "lr",          "min-lr",
                                                "warmup",     "weight-decay",   "clip",        "seed",
                                                "eval-every", "valid-fraction", "eval-tokens", "valid"};

constexpr const char* kModelHelp = "a checkpoint written by lm train, or a Hugging Face GPT-2 folder";

void add_shape_options(cli::Command& c, TrainArgs& a) {
  cli::add_choice(c, "--tokenizer", a.tokenizer,
                  "byte: the 256 byte values; char: the characters of the training text; spm: SentencePiece "
                  "subwords trained on it",
                  {"byte", "char", "spm"});
  cli::add_spm_options(c, a.spm);
  cli::add_int(c, "--n-layer", a.n_layer, "transformer blocks", 1, 256);
  cli::add_int(c, "--n-head", a.n_head, "attention heads (must divide --n-embd)", 1, 256);
  cli::add_int(c, "--n-embd", a.n_embd, "model width", 1, 1 << 16);
  cli::add_int(c, "--block-size", a.block_size, "context length in tokens (the model's positions)", 1,
               1 << 16);
  cli::add_real(c, "--dropout", a.dropout, "dropout probability", 0, 0.999, false, "P");
}

void add_training_options(cli::Command& c, TrainArgs& a) {
  cli::add_int(c, "--steps", a.steps, "optimizer steps", 1);
  cli::add_int(c, "--batch-size", a.batch_size, "random windows of --block-size tokens per step", 1);
  cli::add_real(c, "--lr", a.lr, "peak learning rate (AdamW)", 0, 10, cli::kOpenMin, "LR");
  cli::add_real(c, "--min-lr", a.min_lr, "learning rate at the end of the cosine decay", 0, 10, false, "LR");
  cli::add_int(c, "--warmup", a.warmup, "warmup steps (linear rise to --lr), then cosine decay to --min-lr",
               0);
  cli::add_real(c, "--weight-decay", a.weight_decay, "AdamW weight decay of matrices and embeddings", 0, 1,
                false, "W");
  cli::add_real(c, "--clip", a.clip, "clip the global gradient norm (0: off)", 0, 1e9, false, "NORM");
  cli::add_int(c, "--seed", a.seed, "seed for initialisation, the windows and dropout", 0);
  cli::add_int(c, "--eval-every", a.eval_every, "validate and save every N steps", 1);
  cli::add_real(c, "--valid-fraction", a.valid_fraction,
                "without --valid: validate on this last part of --data (0: no validation)", 0, 0.9, false,
                "F");
  cli::add_int(c, "--eval-tokens", a.eval_tokens,
               "validate on the first N tokens of the validation text (0: all of it)", 0);
}

cli::Command* add_train(cli::Command& app, TrainArgs& a) {
  cli::Command* c = cli::add_command(
      app, "train", "train a GPT language model on a text file, keep the best checkpoint",
      "--data TEXT --out MODEL.safetensors [options]",
      "Trains a decoder-only Transformer (GPT) to predict the next byte or character of a UTF-8 text\n"
      "file, on random windows of --block-size tokens. Validates every --eval-every steps on --valid, or\n"
      "else on the last --valid-fraction of --data (loss and bits per byte), keeps the best model in\n"
      "--out and the latest state (with the optimizer) in <out>.last.safetensors for --resume, which\n"
      "reuses the run's training options (--steps to --eval-tokens, and --valid) unless given again;\n"
      "--precision, --on-nan, --log-every and --threads are each run's own. AdamW (betas 0.9, 0.99;\n"
      "weight decay on matrices and embeddings only), linear warmup then cosine decay, gradient\n"
      "clipping. Ctrl-C (SIGINT) or SIGTERM saves and stops. Under mpirun -np N (a build with MPI) the\n"
      "N ranks share every batch; rank 0 prints and saves. With --init-from MODEL it fine-tunes that\n"
      "model instead of a new one: its shape and tokenizer stay, and --block-size is the length of the\n"
      "windows.");
  cli::add_text(*c, "--data", a.data, "training text, UTF-8").required();
  cli::add_text(*c, "--valid", a.valid, "validation text (default: the last --valid-fraction of --data)");
  cli::add_text(*c, "--out", a.out, "where to write the model (.safetensors)").required();
  cli::add_text(*c, "--init-from", a.init_from,
                "fine-tune: start from this model's weights, config and tokenizer (a Hugging Face GPT-2 "
                "folder or an lm checkpoint); --block-size is then the training window (default: 128, or "
                "the model's positions if fewer)",
                "MODEL");
  add_shape_options(*c, a);
  add_training_options(*c, a);
  cli::add_flag(*c, "--resume", a.resume,
                "continue the run saved in <out>.last.safetensors (model, optimizer, step, data order, RNG)");
  cli::add_run_options(*c, a);
  c->callback([c, &a] { a.given = cli::given_options(*c); });
  a.saved_options = [c] { return cli::option_values(*c, kSavedOptions, "train."); };
  a.reuse_saved_options = [c](const tg::io::Metadata& saved, const std::string& path) {
    cli::reuse_option_values(*c, kSavedOptions, saved, "train.", path);
  };
  return c;
}

cli::Command* add_eval(cli::Command& app, EvalArgs& a) {
  cli::Command* c = cli::add_command(
      app, "eval", "loss and bits per byte (or character) of a model on a text file",
      "--model MODEL.safetensors --data TEXT [options]",
      "Reads the text as consecutive chunks of --block-size tokens (each token but the first predicted\n"
      "once, from the tokens before it in its chunk) and prints the mean loss per token (nats), bits per\n"
      "byte of text and, for a char model, bits per character.");
  cli::add_model_options(*c, a, kModelHelp, {.json = "print the results as one JSON object"});
  cli::add_text(*c, "--data", a.data, "the text to evaluate, UTF-8").required();
  cli::add_int(*c, "--block-size", a.block_size, "chunk length (0: the model's block size; never more)", 0,
               1 << 20);
  cli::add_int(*c, "--batch-size", a.batch_size,
               "chunks per forward pass (speed and memory only: the loss agrees to float rounding)", 1);
  cli::add_flag(
      *c, "--int8", a.int8,
      "every product against a weight reads its int8 copy, as lm sample --int8's one-token steps do "
      "(slower than fp32; not with --precision bf16)");
  return c;
}

cli::Command* add_sample(cli::Command& app, SampleArgs& a) {
  cli::Command* c = cli::add_command(
      app, "sample", "continue a prompt, streaming the text as it is generated",
      "--model MODEL.safetensors [--prompt TEXT] [--tokens N] [options]",
      "Generates --tokens tokens after --prompt (default: a newline), printing each as soon as it is\n"
      "drawn. Each token runs the model on one new position, with the keys and values of the earlier\n"
      "ones cached; past the model's block size the context keeps its last half and is re-read once.\n"
      "The same --seed and options give the same text. With --precision bf16 those one-position steps\n"
      "read bf16 copies of the weights, made once (half the bytes per token, on any CPU: GPT-2 124M\n"
      "sampled 1.4-1.7x faster on a 2-core Xeon Cascade Lake); with --int8 they read int8 copies (one\n"
      "scale per output row: a quarter of the bytes, the weights rounded to 255 levels per row).");
  cli::add_model_options(
      *c, a, kModelHelp,
      {.json = "print one JSON object with the prompt, the text and the speed at the end",
       .threads = "OMP_NUM_THREADS if set, else 1, or all cores for a model of 32M parameters or more"});
  cli::add_text(*c, "--prompt", a.prompt, "the text to continue (default: a newline)", "TEXT");
  cli::add_int(*c, "--tokens", a.tokens, "tokens to generate", 1, 1 << 24);
  cli::add_real(*c, "--temperature", a.temperature, "softmax temperature (0: always the most likely token)",
                0, 100, false, "T");
  cli::add_int(*c, "--top-k", a.top_k, "sample among the K most likely tokens (0: all)", 0, 1 << 20, "K");
  cli::add_real(*c, "--top-p", a.top_p, "then among the fewest most likely tokens of probability >= P", 0, 1,
                cli::kOpenMin, "P");
  cli::add_int(*c, "--seed", a.seed, "seed of the sampling", 0);
  cli::add_flag(
      *c, "--int8", a.int8,
      "the one-position steps read int8 copies of the weights, made once (not with --precision bf16)");
  return c;
}

cli::Command* add_attention(cli::Command& app, AttentionArgs& a) {
  cli::Command* c = cli::add_command(
      app, "attention", "draw every layer's and head's attention over a text as SVG",
      "--model MODEL.safetensors --prompt TEXT --out attn.svg",
      "Runs the model on the prompt and draws the causal self-attention of every layer and head as SVG\n"
      "heatmaps. Rows are queries, columns keys (each token attends to itself and the tokens before\n"
      "it); hover a cell for its weight.");
  cli::add_model_options(*c, a, kModelHelp, {.precision = false});
  cli::add_text(*c, "--prompt", a.prompt, "the text (at most the model's block size in tokens)", "TEXT")
      .required();
  cli::add_text(*c, "--out", a.out, "the SVG file to write").required();
  return c;
}

cli::Command* add_export(cli::Command& app, ExportArgs& a) {
  cli::Command* c = cli::add_command(
      app, "export",
      "write a model as a Hugging Face GPT-2 folder (config.json, model.safetensors, tokenizer)",
      "--model MODEL.safetensors --hf DIR",
      "Writes the model as a folder that transformers reads offline with\n"
      "GPT2LMHeadModel.from_pretrained(DIR) and AutoTokenizer.from_pretrained(DIR): config.json,\n"
      "model.safetensors (GPT2LMHeadModel's names, the tied head left out as save_pretrained does) and\n"
      "the tokenizer's files. The model needs GPT-2's tokenizer (one fine-tuned from a GPT-2 folder),\n"
      "the byte or the char tokenizer (written as a BPE of the 256 bytes or of the characters with no\n"
      "merges: the same ids); an spm model is not exported.");
  cli::add_model_options(*c, a, kModelHelp, {.threads = "", .precision = false, .strict = false});
  cli::add_text(*c, "--hf", a.hf, "the folder to write (made if missing; its files replaced)", "DIR")
      .required();
  return c;
}

cli::Command* add_tokenize(cli::Command& app, TokenizeArgs& a) {
  cli::Command* c = cli::add_command(
      app, "tokenize", "print the token ids of each line of stdin (for checking against other tools)",
      "--model MODEL < text",
      "Reads stdin line by line and prints each line's token ids under the model's tokenizer, separated\n"
      "by spaces, one output line per input line (the newline itself is not encoded; an empty line gives\n"
      "an empty line).");
  cli::add_model_options(*c, a, kModelHelp, {.threads = "", .precision = false});
  return c;
}

}  // namespace

int main(int argc, char** argv, const tg::train::FaultInjector& fault) {
  cli::Program app("Train a GPT language model on any text file, evaluate it, sample from it.", "lm");
  cli::style_training_program(app);
  TrainArgs train;
  EvalArgs eval;
  SampleArgs sample;
  AttentionArgs attention;
  TokenizeArgs tokenize;
  ExportArgs export_args;
  return cli::run_commands(app, argc, argv,
                           {{add_train(app, train), [&] { return run_train(train, fault); }},
                            {add_eval(app, eval), [&] { return run_eval(eval); }},
                            {add_sample(app, sample), [&] { return run_sample(sample); }},
                            {add_attention(app, attention), [&] { return run_attention(attention); }},
                            {add_tokenize(app, tokenize), [&] { return run_tokenize(tokenize); }},
                            {add_export(app, export_args), [&] { return run_export(export_args); }}});
}

}  // namespace lm
