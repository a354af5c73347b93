// translate's command line: every subcommand's options with their help, range and default
// (apps/cli.hpp), and the program's entry point.
#include <vector>

#include "apps/cli.hpp"
#include "translate_commands.hpp"

namespace translate {

namespace cli = tg::cli;

namespace {

// The training options a checkpoint keeps (metadata "train.<name>") and --resume reuses.
const std::vector<std::string> kSavedOptions = {
    "steps",           "epochs", "batch-size",   "lr",   "optimizer",  "warmup", "schedule",
    "label-smoothing", "clip",   "weight-decay", "seed", "eval-every", "valid"};

constexpr const char* kModelHelp = "a checkpoint written by translate train";

void add_shape_options(cli::Command& c, TrainArgs& a) {
  cli::add_int(c, "--d-model", a.d_model, "model width", 1, 1 << 16);
  cli::add_int(c, "--heads", a.heads, "attention heads (must divide --d-model)", 1, 64);
  cli::add_int(c, "--enc-layers", a.enc_layers, "encoder layers", 1, 64);
  cli::add_int(c, "--dec-layers", a.dec_layers, "decoder layers", 1, 64);
  cli::add_int(c, "--d-ff", a.d_ff, "feed-forward width", 1, 1 << 20);
  cli::add_real(c, "--dropout", a.dropout, "dropout probability", 0, 0.999, false, "P");
  cli::add_flag(c, "--norm-first", a.norm_first, "pre-norm layers (default: post-norm as in the paper)");
  cli::add_choice(c, "--activation", a.activation, "feed-forward activation", {"relu", "gelu"});
  cli::add_choice(
      c, "--tokenizer", a.tokenizer,
      "word: whitespace-separated words; char: characters; spm: SentencePiece subwords trained on "
      "the data",
      {"word", "char", "spm"});
  cli::add_spm_options(c, a.spm);
  cli::add_flag(c, "--spm-separate", a.spm_separate,
                "with --tokenizer spm: one model per side (default: one joint model for source and target)");
  cli::add_int(c, "--min-freq", a.min_freq, "keep tokens seen at least N times in the training data", 1);
  cli::add_option(c, "--max-vocab", a.max_vocab,
                  "at most N tokens per vocabulary including the 4 specials (0: no limit), 0 or >= 5")
      .type_name("N")
      .check(cli::int_range(0))
      .check([](const std::string& v) {
        return std::stoll(v) == 0 || std::stoll(v) >= 5
                   ? ""
                   : "must be 0 or at least 5 (4 specials + 1 token), got " + v;
      })
      .capture_default_str();
}

void add_training_options(cli::Command& c, TrainArgs& a) {
  cli::add_int(c, "--steps", a.steps, "optimizer steps (0: use --epochs)", 0);
  cli::add_int(c, "--epochs", a.epochs, "passes over the training data when --steps is 0", 1);
  cli::add_int(c, "--batch-size", a.batch_size, "sentence pairs per step", 1);
  cli::add_real(c, "--lr", a.lr, "peak learning rate", 0, 10, cli::kOpenMin, "LR");
  cli::add_choice(c, "--schedule", a.schedule, "learning-rate schedule", {"noam", "constant", "cosine"});
  cli::add_int(c, "--warmup", a.warmup, "warmup steps (linear rise to --lr)", 0);
  cli::add_choice(c, "--optimizer", a.optimizer, "optimizer (sgd uses momentum 0.9)",
                  {"adam", "adamw", "sgd"});
  cli::add_optional_real(c, "--weight-decay", a.weight_decay, "weight decay (adamw: decoupled)", 0, 1, "W",
                         "adamw 0.01, else 0");
  cli::add_real(c, "--label-smoothing", a.label_smoothing, "label smoothing of the training loss", 0, 0.999,
                false, "E");
  cli::add_real(c, "--clip", a.clip, "clip the global gradient norm (0: off)", 0, 1e9, false, "NORM");
  cli::add_int(c, "--seed", a.seed, "seed for initialisation, shuffling and dropout", 0);
  cli::add_flag(c, "--no-shuffle", a.no_shuffle, "train on batches in file order");
  cli::add_int(c, "--eval-every", a.eval_every, "validate and save every N steps", 1);
}

void add_run_options(cli::Command& c, TrainArgs& a) {
  cli::Option init = cli::add_text(c, "--init", a.init,
                                   "start from this checkpoint's weights, vocabularies and shape", "CKPT");
  cli::add_flag(c, "--resume", a.resume,
                "continue the run saved in <out>.last.safetensors (model, optimizer, step, data order, RNG)")
      .excludes(init);
  cli::add_flag(c, "--skip-bad-lines", a.skip_bad_lines,
                "skip malformed lines (reported) instead of stopping");
  cli::add_run_options(c, a);
}

cli::Command* add_train(cli::Command& app, TrainArgs& a) {
  cli::Command* c = cli::add_command(
      app, "train", "train a model on source<TAB>target lines, keep the best checkpoint",
      "--data TRAIN.tsv --out MODEL.safetensors [options]",
      "Trains an encoder-decoder Transformer on source<TAB>target lines. Validates every --eval-every\n"
      "steps on --valid (loss, token accuracy, exact match), keeps the best model in --out and the\n"
      "latest state (with the optimizer) in <out>.last.safetensors for --resume, which reuses the\n"
      "run's training options (--steps to --eval-every, and --valid) unless given again; --precision,\n"
      "--on-nan, --log-every and --threads are each run's own (--resume continues bit for bit with\n"
      "the same --threads). Ctrl-C (SIGINT) or SIGTERM saves and stops. The progress loss is the\n"
      "training loss, label smoothing included. Under mpirun -np N (a build with MPI) the N ranks\n"
      "share every batch (data parallelism: same results as one process up to rounding); rank 0\n"
      "prints and saves.");
  cli::add_text(*c, "--data", a.data, "training pairs, source<TAB>target per line").required();
  cli::add_text(*c, "--valid", a.valid, "validation pairs (the best checkpoint is chosen on their loss)");
  cli::add_text(*c, "--out", a.out, "where to write the model (.safetensors)").required();
  add_shape_options(*c, a);
  add_training_options(*c, a);
  add_run_options(*c, a);
  c->callback([c, &a] { a.given = cli::given_options(*c); });
  a.saved_options = [c] { return cli::option_values(*c, kSavedOptions, "train.", {"weight-decay"}); };
  a.reuse_saved_options = [c, &a](const tg::io::Metadata& saved, const std::string& path) {
    cli::reuse_option_values(*c, kSavedOptions, saved, "train.", path);
    if (saved.contains("train.no-shuffle")) a.no_shuffle = true;
  };
  return c;
}

// --beam, --max-len, --length-penalty (eval --bleu, decode).
void add_decoding_options(cli::Command& c, int64_t& beam, int64_t& max_len, double& length_penalty) {
  cli::add_int(c, "--beam", beam, "beam width (1: greedy; at most the target vocabulary)", 1, 1000, "K");
  cli::add_int(
      c, "--max-len", max_len,
      "most tokens generated per sentence (0: the sentence's source tokens + 50; never more than the "
      "model's positions)",
      0, 1 << 20);
  cli::add_real(c, "--length-penalty", length_penalty, "beam score = sum log p / length^A (0: raw sum)", 0,
                10, false, "A");
}

cli::Command* add_eval(cli::Command& app, EvalArgs& a) {
  cli::Command* c = cli::add_command(
      app, "eval", "loss, token accuracy, exact match (and BLEU) of a model on a test set",
      "--model MODEL.safetensors --data TEST.tsv [options]",
      "Prints the loss, token accuracy and exact-match accuracy (greedy) on a test set, and with --bleu\n"
      "the corpus BLEU-4 of decoded translations (greedy, or --beam K). The loss is the plain\n"
      "cross-entropy per target token, without the label smoothing of train's progress loss (so it\n"
      "is lower than train's for the same model).");
  cli::add_model_options(*c, a, kModelHelp, {.json = "print the results as one JSON object"});
  cli::add_text(*c, "--data", a.data, "test pairs, source<TAB>target per line").required();
  cli::add_int(*c, "--batch-size", a.batch_size, "sentences per batch", 1);
  cli::add_flag(*c, "--bleu", a.bleu, "also decode every source and report BLEU");
  add_decoding_options(*c, a.beam, a.max_len, a.length_penalty);
  cli::add_flag(*c, "--skip-bad-lines", a.skip_bad_lines,
                "skip malformed lines (reported) instead of stopping");
  return c;
}

cli::Command* add_decode(cli::Command& app, DecodeArgs& a) {
  cli::Command* c = cli::add_command(
      app, "decode", "translate the lines of stdin (greedy or --beam K)",
      "--model MODEL.safetensors [--beam K] < sources.txt",
      "Reads one source sentence per line on stdin and writes one translation per line on stdout\n"
      "(an empty line for an empty input line), greedy or with beam search. Unknown source words\n"
      "are read as <unk>; in the output a generated <unk> is printed as the text <unk>, <pad> and\n"
      "<bos> are left out, and <eos> ends the sentence.");
  cli::add_model_options(*c, a, kModelHelp,
                         {.json = "one JSON object per line: {\"source\": .., \"translation\": ..}"});
  add_decoding_options(*c, a.beam, a.max_len, a.length_penalty);
  cli::add_int(*c, "--batch-size", a.batch_size, "sentences decoded together (does not change the output)",
               1);
  return c;
}

cli::Command* add_attention(cli::Command& app, AttentionArgs& a) {
  cli::Command* c = cli::add_command(
      app, "attention", "draw every layer's and head's attention for one sentence as SVG",
      "--model MODEL.safetensors --src \"source sentence\" --out attn.svg [--tgt \"...\"]",
      "Runs the model on one sentence (the target is the greedy translation unless --tgt is given) and\n"
      "draws the attention of every layer and head as SVG heatmaps: encoder self-attention, decoder\n"
      "self-attention and cross-attention. Rows are queries, columns keys; hover a cell for its weight.");
  cli::add_model_options(*c, a, kModelHelp, {.precision = false});
  cli::add_text(*c, "--src", a.src, "the source sentence", "TEXT").required();
  cli::add_text(*c, "--tgt", a.tgt, "the target sentence to attend with (default: the greedy translation)",
                "TEXT");
  cli::add_text(*c, "--out", a.out, "the SVG file to write").required();
  cli::add_int(*c, "--max-len", a.max_len,
               "most tokens generated for the greedy translation (0: source tokens + 50)", 0, 1 << 20);
  return c;
}

}  // namespace

int main(int argc, char** argv, const tg::train::FaultInjector& fault) {
  cli::Program app("Train, evaluate and run an encoder-decoder Transformer on your own parallel text.",
                   "translate");
  cli::style_training_program(app);
  TrainArgs train;
  EvalArgs eval;
  DecodeArgs decode;
  AttentionArgs attention;
  return cli::run_commands(app, argc, argv,
                           {{add_train(app, train), [&] { return run_train(train, fault); }},
                            {add_eval(app, eval), [&] { return run_eval(eval); }},
                            {add_decode(app, decode), [&] { return run_decode(decode); }},
                            {add_attention(app, attention), [&] { return run_attention(attention); }}});
}

}  // namespace translate
