// Attention, number by number: scaled dot-product attention on a tiny sentence, every step printed
// with its shape and values, forward and backward, on the real engine.
//
//   build/apps/attention_walkthrough                      "the ball is blue", d_model 8, 2 heads
//   build/apps/attention_walkthrough --html page.html --dot tape.dot
//   build/apps/attention_walkthrough --model toy.safetensors --src "the big dog sees a small cat"
//   build/apps/attention_walkthrough --wrong-rule softmax   a wrong backward rule, caught by the checks
//
// The tour itself: apps/attention_walkthrough_block.cpp (multi-head attention from the public
// ops, one formula per line), _forward.cpp (the steps shown), _backward.cpp (each gradient by its
// formula, against the tape and central differences).
#include <fmt/format.h>

#include <optional>
#include <string>

#include "apps/attention_walkthrough.hpp"
#include "apps/cli.hpp"
#include "io/file.hpp"

using namespace tg;

int main(int argc, char** argv) {
  cli::Program app(
      "Scaled dot-product attention, number by number: every step of the forward and backward pass of "
      "one attention block on a tiny sentence, each gradient checked against central differences.",
      "attention_walkthrough");
  cli::style(app, "[options]");
  std::string src, model_path, mask, wrong = "none", html, dot;
  int64_t d_model = 8, heads = 2, seed = 1, fd_samples = 256, max_len = 0;
  bool json = false;
  std::optional<int> threads;
  auto src_opt = cli::add_text(app, "--src", src,
                               "the sentence (default \"the ball is blue\"; required with --model)", "TEXT");
  cli::add_text(
      app, "--model", model_path,
      "a translate checkpoint: its weights and vocabularies instead of the built-in untrained model, "
      "and greedy decoding step by step");
  auto d_opt = cli::add_int(app, "--d-model", d_model, "width of the built-in model", 2, 512);
  auto h_opt =
      cli::add_int(app, "--heads", heads, "heads of the built-in model (must divide --d-model)", 1, 64);
  cli::add_int(app, "--seed", seed, "seed of the built-in weights and of the loss's G", 0);
  cli::add_option(app, "--mask", mask, "the self-attention's mask")
      .type_name("causal|none")
      .check(cli::one_of({"causal", "none"}))
      .default_str("causal; none with --model, as its encoder attends");
  cli::add_choice(
      app, "--wrong-rule", wrong,
      "use a deliberately wrong backward rule to see the checks catch it: softmax (no rowsum term), "
      "scale (no 1/sqrt(d_k)), transpose (dV = P dO)",
      {"none", "softmax", "scale", "transpose"});
  cli::add_int(app, "--fd-samples", fd_samples,
               "elements checked by central differences per gradient (0: all)", 0);
  cli::add_int(app, "--max-len", max_len, "greedy decoding: tokens at most (0: source tokens + 50)", 0);
  cli::add_text(app, "--html", html,
                "write the steps as a page of labelled heatmaps, with the tape drawn by Graphviz");
  cli::add_text(app, "--dot", dot, "write the tape of the forward pass as Graphviz DOT");
  cli::add_flag(app, "--json", json, "print every number as one JSON document instead of the text");
  cli::add_threads(app, threads, "1");

  return cli::run(app, argc, argv, [&] {
    if (!threads)
      ops::set_num_threads(1);  // tiny matrices: one thread is fastest, and the numbers never vary
    if (src_opt.count() && src.find_first_not_of(" \t\r\n") == std::string::npos)
      throw cli::UsageError("--src is empty");
    walkthrough::Model m;
    if (!model_path.empty()) {
      if (d_opt.count() || h_opt.count())
        throw cli::UsageError("--d-model and --heads shape the built-in model; a --model brings its own");
      if (src.empty())
        throw cli::UsageError("--model needs --src, a sentence in the model's source language");
      m = walkthrough::load_model(model_path);
    } else {
      if (d_model % heads != 0)
        throw cli::UsageError(fmt::format("--d-model {} must be divisible by --heads {}", d_model, heads));
      if (src.empty()) src = "the ball is blue";
      m = walkthrough::builtin_model(src, d_model, heads, static_cast<uint64_t>(seed));
    }
    walkthrough::Options opt;
    opt.causal = mask.empty() ? model_path.empty() : mask == "causal";
    opt.seed = static_cast<uint64_t>(seed);
    opt.wrong_rule = walkthrough::parse_wrong_rule(wrong);
    opt.fd_samples = fd_samples;
    opt.max_len = max_len;
    const walkthrough::Result r = walkthrough::run(m, src, opt);

    // The files first, so that an unwritable path fails before the report is printed.
    if (!html.empty()) io::write_file_atomic(html, walkthrough::html_report(r));
    if (!dot.empty()) io::write_file_atomic(dot, r.tape_dot);
    std::FILE* notes = json ? stderr : stdout;  // with --json, stdout holds the JSON only
    fmt::print("{}", json ? walkthrough::json_report(r) : walkthrough::text_report(r));
    if (!html.empty()) fmt::print(io::is_stdout(html) ? stderr : notes, "wrote {}\n", html);
    if (!dot.empty())
      fmt::print(io::is_stdout(dot) ? stderr : notes, "wrote {} (render: dot -Tsvg {} -o tape.svg)\n", dot,
                 dot);
    const auto failed = r.failures();
    if (failed.empty()) return cli::kSuccess;
    std::fflush(stdout);
    fmt::print(stderr, "attention_walkthrough: {} of {} checks failed: {}\n", failed.size(), r.num_checks(),
               fmt::join(failed, "; "));
    return cli::kFailure;
  });
}
