// translate train: trains a Transformer on parallel text, validating every N steps and keeping
// the best checkpoint (--out) and the latest state with the optimizer (<out>.last.safetensors),
// from which --resume continues exactly where the run stopped.
#include <fmt/format.h>

#include <csignal>
#include <filesystem>

#include "autograd/tape.hpp"
#include "nn/loss.hpp"
#include "ops/kernels.hpp"
#include "train/distributed.hpp"
#include "translate_common.hpp"

namespace translate {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) {
  g_interrupted = 1;
}

// "model.safetensors" -> "model.last.safetensors"
std::string last_path(const std::string& out) {
  const std::string ext = ".safetensors";
  if (out.size() > ext.size() && out.ends_with(ext))
    return out.substr(0, out.size() - ext.size()) + ".last" + ext;
  return out + ".last";
}

// Training options a resumed run takes from its checkpoint unless given again.
const char* kSavedOptions[] = {"steps",     "epochs",       "batch-size", "lr",
                               "optimizer", "warmup",       "schedule",   "label-smoothing",
                               "clip",      "weight-decay", "seed",       "eval-every"};

// With --resume or --init the model's shape, tokenizer and vocabularies come from a checkpoint:
// model options may be repeated (the same command line plus --resume) but must agree with it.
void check_model_options(const Args& args, const CheckpointInfo& info, const std::string& path) {
  const TransformerConfig& c = info.config;
  auto agree = [&](const char* name, bool same, const std::string& theirs) {
    if (args.given(name) && !same)
      throw args.error(
          fmt::format("--{} {} disagrees with {}, which has {}", name, args.str(name), path, theirs));
  };
  auto integer = [&](const char* name, int64_t v) {
    agree(name, !args.given(name) || args.integer(name, INT64_MIN) == v, std::to_string(v));
  };
  integer("d-model", c.d_model);
  integer("heads", c.heads);
  integer("enc-layers", c.enc_layers);
  integer("dec-layers", c.dec_layers);
  integer("d-ff", c.d_ff);
  agree("dropout", !args.given("dropout") || static_cast<float>(args.real("dropout", 0, 1)) == c.dropout,
        fmt::format("{}", c.dropout));
  agree("norm-first", c.norm_first, "post-norm layers");
  agree("activation", !args.given("activation") || args.str("activation") == c.activation, c.activation);
  agree("tokenizer", !args.given("tokenizer") || args.str("tokenizer") == tokenizer_name(info.tokenizer),
        tokenizer_name(info.tokenizer));
  for (const char* name : {"min-freq", "max-vocab"}) {
    auto it = info.extra.find(std::string("train.") + name);
    if (it != info.extra.end()) agree(name, !args.given(name) || args.str(name) == it->second, it->second);
  }
}

Args make_args() {
  Args a("train", "--data TRAIN.tsv --out MODEL.safetensors [options]",
         "Trains an encoder-decoder Transformer on source<TAB>target lines. Validates every --eval-every\n"
         "steps on --valid (loss, token accuracy, exact match), keeps the best model in --out and the\n"
         "latest state (with the optimizer) in <out>.last.safetensors for --resume. Ctrl-C (SIGINT) "
         "or\nSIGTERM saves and stops. Under mpirun -np N (a build with MPI) the N ranks share every batch\n"
         "(data parallelism: same results as one process up to rounding); rank 0 prints and saves.");
  a.option("data", "FILE", "training pairs, source<TAB>target per line")
      .option("valid", "FILE", "validation pairs (the best checkpoint is chosen on their loss)")
      .option("out", "FILE", "where to write the model (.safetensors)")
      .option("d-model", "N", "model width", "64")
      .option("heads", "N", "attention heads (must divide --d-model)", "4")
      .option("enc-layers", "N", "encoder layers", "2")
      .option("dec-layers", "N", "decoder layers", "2")
      .option("d-ff", "N", "feed-forward width", "256")
      .option("dropout", "P", "dropout probability in [0, 1)", "0.1")
      .flag("norm-first", "pre-norm layers (default: post-norm as in the paper)")
      .option("activation", "relu|gelu", "feed-forward activation", "relu")
      .option("tokenizer", "word|char", "split text into words (whitespace) or characters", "word")
      .option("min-freq", "N", "keep tokens seen at least N times in the training data", "1")
      .option("max-vocab", "N", "at most N tokens per vocabulary including the 4 specials (0: no limit)", "0")
      .option("steps", "N", "optimizer steps (0: use --epochs)", "0")
      .option("epochs", "N", "passes over the training data when --steps is 0", "5")
      .option("batch-size", "N", "sentence pairs per step", "64")
      .option("lr", "LR", "peak learning rate", "1e-3")
      .option("schedule", "noam|constant|cosine", "learning-rate schedule", "noam")
      .option("warmup", "N", "warmup steps (linear rise to --lr)", "200")
      .option("optimizer", "adam|adamw|sgd", "optimizer (sgd uses momentum 0.9)", "adam")
      .option("weight-decay", "W", "weight decay (adamw: decoupled, default 0.01)", "")
      .option("label-smoothing", "E", "label smoothing in [0, 1)", "0.1")
      .option("clip", "NORM", "clip the global gradient norm (0: off)", "1.0")
      .option("seed", "N", "seed for initialisation, shuffling and dropout", "1")
      .flag("no-shuffle", "train on batches in file order")
      .option("init", "CKPT", "start from this checkpoint's weights, vocabularies and shape")
      .flag("resume",
            "continue the run saved in <out>.last.safetensors (model, optimizer, step, data order, RNG)")
      .option("eval-every", "N", "validate and save every N steps", "500")
      .option("log-every", "N", "print progress every N steps", "50")
      .flag("skip-bad-lines", "skip malformed lines (reported) instead of stopping")
      .flag("json", "one JSON object per output line")
      .option("bucket-mb", "MB", "MPI: gradient allreduce bucket size in MiB (needs an MPI build)", "")
      .option("rank-timeout", "S",
              "MPI: a rank waiting S seconds in a collective stops the job (0: never; needs an MPI build)",
              "");
  TrainGuards::add_options(a);
  add_threads_option(a);
  return a;
}

// The World of this run: MPI ranks under mpirun, else one rank. The MPI options need an MPI build.
dist::Options dist_options(const Args& args) {
  dist::Options o;
  for (const char* name : {"bucket-mb", "rank-timeout"})
    if (args.given(name) && !dist::built_with_mpi())
      throw args.error(dist::needs_mpi_message(std::string("--") + name));
  if (args.given("bucket-mb")) o.bucket_bytes = args.integer("bucket-mb", 1, 1 << 12) << 20;
  if (args.given("rank-timeout")) o.timeout_s = args.real("rank-timeout", 0, 1e7);
  return o;
}

// Validation sharded over the ranks: each evaluates its slice, the sums are combined.
Metrics evaluate_sharded(dist::World& world, Transformer& model, const std::vector<EncodedPair>& valid,
                         int64_t batch_size) {
  if (!world.distributed()) return evaluate(model, valid, batch_size);
  const auto [lo, hi] = dist::shard(static_cast<int64_t>(valid.size()), world.rank(), world.size());
  const std::vector<EncodedPair> mine(valid.begin() + lo, valid.begin() + hi);
  Metrics m = evaluate(model, mine, batch_size);
  const auto tokens = static_cast<double>(m.tokens), sentences = static_cast<double>(m.sentences);
  double sums[5] = {m.loss * tokens, m.token_accuracy * tokens, m.exact_match * sentences, tokens, sentences};
  world.allreduce_sum(sums);
  m.tokens = std::llround(sums[3]);
  m.sentences = std::llround(sums[4]);
  m.loss = sums[3] > 0 ? sums[0] / sums[3] : 0;
  m.token_accuracy = sums[3] > 0 ? sums[1] / sums[3] : 0;
  m.exact_match = sums[4] > 0 ? sums[2] / sums[4] : 0;
  return m;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& kind, const NamedTensors& params, float lr,
                                          const Args& args) {
  const bool wd_given = args.has("weight-decay");
  const float wd = wd_given ? static_cast<float>(args.real("weight-decay", 0.0, 1.0)) : 0.0f;
  if (kind == "sgd")
    return std::make_unique<SGD>(params, SGDOptions{.lr = lr, .momentum = 0.9f, .weight_decay = wd});
  if (kind == "adamw")
    return std::make_unique<AdamW>(params, AdamOptions{.lr = lr, .weight_decay = wd_given ? wd : 0.01f});
  return std::make_unique<Adam>(params, AdamOptions{.lr = lr, .weight_decay = wd});
}

}  // namespace

int run_train(const std::vector<std::string>& argv) {
  Args args = make_args();
  if (!args.parse(argv)) {
    fmt::print("{}", args.help());
    return 0;
  }
  const std::string out = args.str("out");
  const std::string last = last_path(out);
  const bool resume = args.flag_set("resume");
  if (resume && args.given("init")) throw args.error("--resume and --init cannot be combined");

  // A resumed run starts from the saved checkpoint and the options it was started with.
  std::optional<Checkpoint> saved;
  if (resume) {
    if (!std::filesystem::exists(last))
      throw args.error(fmt::format("--resume: nothing to resume, {} does not exist", last));
    saved = read_checkpoint(last);
    if (!saved->info.train || !saved->has_optimizer_state())
      throw args.error(fmt::format("--resume: {} holds no training state", last));
    for (const char* o : kSavedOptions)
      if (auto it = saved->info.extra.find(std::string("train.") + o); it != saved->info.extra.end())
        args.set_default(o, it->second);
    if (saved->info.extra.contains("train.no-shuffle")) args.set_default("no-shuffle", "1");
  }

  // ---- options ----
  dist::World world(dist_options(args));  // ranks > 0 print nothing on stdout
  const Log log(args.flag_set("json"));
  apply_threads_option(args);
  if (world.distributed() && !args.given("threads") && std::getenv("OMP_NUM_THREADS") == nullptr)
    ops::set_num_threads(dist::default_threads(world));
  if (const std::string w = dist::threads_warning(world, ops::num_threads()); !w.empty() && world.is_root())
    fmt::print(stderr, "{}\n", w);
  const int64_t steps_opt = args.integer("steps", 0), epochs = args.integer("epochs", 1);
  const int64_t batch_size = args.integer("batch-size", 1), eval_every = args.integer("eval-every", 1);
  const int64_t log_every = args.integer("log-every", 1), warmup = args.integer("warmup", 0);
  const float lr = static_cast<float>(args.real("lr", 0.0, 10.0, false));
  const float smoothing = static_cast<float>(args.real("label-smoothing", 0.0, 0.999));
  const double clip = args.real("clip", 0.0, 1e9);
  const auto seed = static_cast<uint64_t>(args.integer("seed", 0));
  const std::string optimizer_kind = args.choice("optimizer", {"adam", "adamw", "sgd"});
  const std::string schedule_kind = args.choice("schedule", {"noam", "constant", "cosine"});
  const bool shuffle = !args.flag_set("no-shuffle");
  const bool skip_bad = args.flag_set("skip-bad-lines");
  const std::string data_path = args.str("data");
  TrainGuards guards(args);
  CheckpointInfo info;
  if (saved) {
    info = saved->info;
    check_model_options(args, info, last);
  } else if (args.given("init")) {
    info = read_checkpoint(args.str("init")).info;
    info.train.reset();
    std::erase_if(info.extra, [](const auto& kv) { return kv.first.starts_with("train."); });  // a new run
    check_model_options(args, info, args.str("init"));
  } else {
    info.tokenizer = parse_tokenizer(args.choice("tokenizer", {"word", "char"}));
    TransformerConfig& c = info.config;
    c.d_model = args.integer("d-model", 1, 1 << 16);
    c.heads = args.integer("heads", 1, c.d_model);
    if (c.d_model % c.heads != 0)
      throw args.error(fmt::format("--d-model {} must be divisible by --heads {}", c.d_model, c.heads));
    c.enc_layers = args.integer("enc-layers", 1, 64);
    c.dec_layers = args.integer("dec-layers", 1, 64);
    c.d_ff = args.integer("d-ff", 1, 1 << 20);
    c.dropout = static_cast<float>(args.real("dropout", 0.0, 0.999));
    c.norm_first = args.flag_set("norm-first");
    c.activation = args.choice("activation", {"relu", "gelu"});
  }
  const int64_t min_freq = args.integer("min-freq", 1), max_vocab = args.integer("max-vocab", 0);
  if (max_vocab != 0 && max_vocab < 5)
    throw args.error("--max-vocab must be 0 or at least 5 (4 specials + 1 token)");

  // ---- data ----
  const ParallelText train_text = read_data(data_path, skip_bad);
  if (!saved && !args.given("init")) {
    std::vector<std::vector<std::string>> src_tok, tgt_tok;
    int64_t longest = 0;
    for (size_t i = 0; i < train_text.size(); ++i) {
      src_tok.push_back(tokenize(train_text.src[i], info.tokenizer));
      tgt_tok.push_back(tokenize(train_text.tgt[i], info.tokenizer));
      longest = std::max({longest, static_cast<int64_t>(src_tok.back().size()),
                          static_cast<int64_t>(tgt_tok.back().size())});
    }
    info.src_vocab = Vocab::build(src_tok, min_freq, max_vocab);
    info.tgt_vocab = Vocab::build(tgt_tok, min_freq, max_vocab);
    info.config.src_vocab = info.src_vocab.size();
    info.config.tgt_vocab = info.tgt_vocab.size();
    // Room for test sentences twice as long as the longest training one.
    info.config.max_len = std::max<int64_t>(256, 2 * (longest + 1));
  }
  std::vector<EncodedPair> train = encode_pairs(train_text, info.tokenizer, info.src_vocab, info.tgt_vocab);
  if (const int64_t dropped = drop_too_long(train, info.config.max_len))
    fmt::print(stderr, "warning: {}: dropped {} pairs longer than {} tokens\n", data_path, dropped,
               info.config.max_len - 1);
  if (train.empty()) throw DataError(fmt::format("{}: no training pairs left", data_path));
  std::vector<EncodedPair> valid;
  if (args.given("valid")) {
    const ParallelText vt = read_data(args.str("valid"), skip_bad);
    valid = encode_pairs(vt, info.tokenizer, info.src_vocab, info.tgt_vocab);
    if (const int64_t dropped = drop_too_long(valid, info.config.max_len))
      fmt::print(stderr, "warning: {}: dropped {} pairs that are too long\n", args.str("valid"), dropped);
  }
  const auto batches_per_epoch = (static_cast<int64_t>(train.size()) + batch_size - 1) / batch_size;
  const int64_t total = steps_opt > 0 ? steps_opt : epochs * batches_per_epoch;

  // ---- model, optimizer, state ----
  Transformer model(info.config, seed);
  TrainState st;
  st.optimizer = optimizer_kind;
  st.schedule = {LrSchedule::parse(schedule_kind), lr, warmup, total, 0.0f};
  if (saved) load_weights(model, saved->file, last);
  if (args.given("init")) load_weights(model, read_checkpoint(args.str("init")).file, args.str("init"));
  std::unique_ptr<Optimizer> opt = make_optimizer(optimizer_kind, model.named_parameters(), lr, args);
  Generator data_rng(seed ^ 0x5eed'da7aull);
  if (saved) {
    if (saved->info.train->optimizer != optimizer_kind)
      throw args.error(fmt::format("--resume: the run used --optimizer {}, not {}",
                                   saved->info.train->optimizer, optimizer_kind));
    load_optimizer_state(*opt, saved->file, last);
    const TrainState& s = *saved->info.train;
    st.step = s.step;
    st.epoch = s.epoch;
    st.batch_in_epoch = s.batch_in_epoch;
    st.best_valid_loss = s.best_valid_loss;
    data_rng.set_state(s.data_rng);
    model.rng().set_state(s.dropout_rng);
  }
  for (const char* o : kSavedOptions)
    if (args.has(o)) info.extra[std::string("train.") + o] = args.str(o);
  if (!shuffle) info.extra["train.no-shuffle"] = "1";
  if (!saved && !args.given("init")) {
    info.extra["train.min-freq"] = std::to_string(min_freq);
    info.extra["train.max-vocab"] = std::to_string(max_vocab);
  }
  info.extra["train.data"] = data_path;

  // The batches of the current epoch; data_rng is saved as it was when they were drawn.
  std::vector<std::vector<int64_t>> batches;
  auto draw_epoch = [&] {
    st.data_rng = data_rng.state();
    batches = make_batches(train, batch_size, shuffle ? &data_rng : nullptr, false);
  };
  draw_epoch();

  auto save = [&](const std::string& path, bool with_optimizer, bool final) {
    if (!world.is_root()) return;  // one writer; every rank holds the same state
    st.dropout_rng = model.rng().state();
    info.train = st;
    guards.save([&] { save_checkpoint(path, model, info, with_optimizer ? opt.get() : nullptr); }, path,
                st.step, final);
  };
  if (world.is_root()) {
    prepare_output(out);
    prepare_output(last);
  }

  log.line(
      "start",
      json::Value::object({{"parameters", json::Value::integer(model.num_parameters())},
                           {"train_pairs", json::Value::integer(static_cast<int64_t>(train.size()))},
                           {"valid_pairs", json::Value::integer(static_cast<int64_t>(valid.size()))},
                           {"src_vocab", json::Value::integer(info.config.src_vocab)},
                           {"tgt_vocab", json::Value::integer(info.config.tgt_vocab)},
                           {"step", json::Value::integer(st.step)},
                           {"total_steps", json::Value::integer(total)},
                           {"threads", json::Value::integer(ops::num_threads())},
                           {"ranks", json::Value::integer(world.size())}}),
      fmt::format(
          "{} {} parameters; {} training pairs, {} validation; vocab {}/{}; {} steps ({} per epoch); "
          "kernels {}, {} threads{}",
          resume ? "resuming at step " + std::to_string(st.step) + ":" : "training:", model.num_parameters(),
          train.size(), valid.size(), info.config.src_vocab, info.config.tgt_vocab, total, batches_per_epoch,
          ops::arch_name(ops::active_arch()), ops::num_threads(),
          world.distributed() ? fmt::format(" per rank, {} MPI ranks", world.size()) : ""));

  g_interrupted = 0;
  auto old_int = std::signal(SIGINT, on_sigint);
  auto old_term = std::signal(SIGTERM, on_sigint);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first_step = st.step;
  double window_loss = 0;
  int64_t window_tokens = 0, run_tokens = 0;
  auto t_window = t0;
  const NamedTensors params = model.named_parameters();
  model.train();

  auto validate_and_save = [&](bool final) {
    if (!valid.empty()) {
      const Metrics m = evaluate_sharded(world, model, valid, batch_size);
      const bool best = m.loss < st.best_valid_loss;
      if (best) st.best_valid_loss = m.loss;
      log.line("valid",
               json::Value::object({{"step", json::Value::integer(st.step)},
                                    {"loss", json::Value::number(m.loss)},
                                    {"token_accuracy", json::Value::number(100 * m.token_accuracy)},
                                    {"exact_match", json::Value::number(100 * m.exact_match)},
                                    {"best", json::Value::boolean(best)}}),
               fmt::format("  valid @ step {}: loss {:.4f}, token accuracy {:.2f}%, exact match {:.2f}%{}",
                           st.step, m.loss, 100 * m.token_accuracy, 100 * m.exact_match,
                           best ? " (best, saved)" : ""));
      if (best) save(out, false, final);
    } else {
      save(out, false, final);
    }
    save(last, true, final);
  };

  // Several ranks stop together: each step's allreduce carries every rank's stop request (Ctrl-C,
  // or a failed save with --on-save-error stop, which only rank 0 can see), and all of them leave
  // the loop after that step. A NaN/Inf step is seen alike by all ranks (same global gradients).
  bool stop = false, stop_on_save = false;
  auto interrupted = [&] { return world.distributed() ? stop : g_interrupted != 0; };
  auto guard_stopped = [&] {
    return world.distributed() ? stop_on_save || guards.stopped_on_nan() : guards.stopped();
  };
  while (st.step < total && !interrupted() && !guard_stopped()) {
    if (st.batch_in_epoch >= static_cast<int64_t>(batches.size())) {
      ++st.epoch;
      st.batch_in_epoch = 0;
      draw_epoch();
    }
    // This rank's rows of the global batch (all of it on one rank).
    const std::span<const int64_t> global_batch = batches[static_cast<size_t>(st.batch_in_epoch)];
    const auto [lo, hi] = dist::shard(static_cast<int64_t>(global_batch.size()), world.rank(), world.size());
    const Batch b =
        hi == lo
            ? Batch{}  // a global batch smaller than the number of ranks leaves some idle
            : make_batch(train, global_batch.subspan(static_cast<size_t>(lo), static_cast<size_t>(hi - lo)));
    opt->set_lr(st.schedule.at(st.step + 1));
    Generator::State shared_rng{};
    if (world.distributed()) shared_rng = dist::fork_step_rng(model.rng(), world.rank());
    opt->zero_grad();
    int64_t ntok = b.num_label_tokens();
    double loss_sum = 0;  // loss x tokens, over all ranks
    if (b.batch > 0) {
      Tensor loss = label_smoothed_cross_entropy(model.forward(b), b.labels, smoothing);
      loss.backward();
      loss_sum = static_cast<double>(loss.item()) * static_cast<double>(ntok);
    }
    if (world.distributed()) {  // the global batch's gradient on every rank, and the global loss
      double extras[3] = {loss_sum, g_interrupted ? 1.0 : 0.0, guards.stopped() ? 1.0 : 0.0};
      ntok = world.allreduce_gradients(params, ntok, extras);
      loss_sum = extras[0];
      stop = extras[1] > 0 || extras[2] > 0;
      stop_on_save = extras[2] > 0;
      dist::join_step_rng(model.rng(), shared_rng);
    }
    // clip + opt->step(), except that a NaN/Inf loss or gradient is never applied (train/guard.hpp).
    const float step_loss = static_cast<float>(loss_sum / static_cast<double>(std::max<int64_t>(ntok, 1)));
    const bool applied = guards.step(*opt, step_loss, clip, st.step + 1);
    if (guards.stopped()) break;
    ++st.step;
    ++st.batch_in_epoch;
    if (!applied) ntok = 0, loss_sum = 0;
    window_loss += loss_sum;
    window_tokens += ntok;
    run_tokens += ntok;

    if (st.step % log_every == 0 || st.step == total) {
      const double elapsed = seconds_since(t0), dt = seconds_since(t_window);
      const double steps_per_s = static_cast<double>(st.step - first_step) / elapsed;
      const double eta = static_cast<double>(total - st.step) / steps_per_s;
      const double tok_s = static_cast<double>(window_tokens) / dt;
      const double mean = window_loss / static_cast<double>(std::max<int64_t>(window_tokens, 1));
      log.line(
          "train",
          json::Value::object({{"step", json::Value::integer(st.step)},
                               {"total_steps", json::Value::integer(total)},
                               {"epoch", json::Value::integer(st.epoch + 1)},
                               {"loss", json::Value::number(mean)},
                               {"lr", json::Value::number(std::stod(fmt::format("{:.6g}", opt->lr())))},
                               {"tokens_per_s", json::Value::number(std::round(tok_s))},
                               {"steps_per_s", json::Value::number(std::round(steps_per_s * 100) / 100)},
                               {"elapsed_s", json::Value::number(std::round(elapsed * 10) / 10)},
                               {"eta_s", json::Value::number(std::round(eta))}}),
          fmt::format(
              "step {}/{} (epoch {}) | loss {:.4f} | lr {:.2e} | {:.0f} tok/s, {:.1f} steps/s | {} elapsed, "
              "ETA {}",
              st.step, total, st.epoch + 1, mean, opt->lr(), tok_s, steps_per_s, format_duration(elapsed),
              format_duration(eta)));
      window_loss = 0;
      window_tokens = 0;
      t_window = std::chrono::steady_clock::now();
    }
    if (st.step % eval_every == 0 && st.step != total) validate_and_save(false);
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  const bool was_interrupted = interrupted() && !stop_on_save;
  const bool guard_stop = guards.stopped() || stop_on_save;
  if (guards.stopped_on_nan())
    save(last, true, true);  // the last good state, resumable (e.g. with --on-nan skip or a lower --lr)
  else if (!guard_stop)
    validate_and_save(true);
  const double elapsed = seconds_since(t0);
  log.line("done",
           json::Value::object({{"step", json::Value::integer(st.step)},
                                {"interrupted", json::Value::boolean(was_interrupted)},
                                {"stopped_on_nan", json::Value::boolean(guards.stopped_on_nan())},
                                {"skipped_steps", json::Value::integer(guards.skipped_steps())},
                                {"failed_saves", json::Value::integer(guards.failed_saves())},
                                {"elapsed_s", json::Value::number(std::round(elapsed * 10) / 10)},
                                {"tokens", json::Value::integer(run_tokens)},
                                {"model", json::Value::string(out)},
                                {"last", json::Value::string(last)}}),
           fmt::format("{} at step {} after {}; model in {}, latest state in {}{}",
                       guard_stop        ? "stopped"
                       : was_interrupted ? "interrupted, saved"
                                         : "done",
                       st.step, format_duration(elapsed), out, last,
                       guards.skipped_steps() || guards.failed_saves()
                           ? fmt::format(" ({} steps skipped on NaN/Inf, {} failed saves)",
                                         guards.skipped_steps(), guards.failed_saves())
                           : ""));
  if (guards.exit_status() != 0) return guards.exit_status();
  if (stop_on_save) return 1;  // rank 0's save failed with --on-save-error stop
  return was_interrupted ? 130 : 0;
}

}  // namespace translate
