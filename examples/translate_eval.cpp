// translate eval (metrics on a test set) and translate decode (stdin -> translations).
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <map>

#include "io/utf8.hpp"
#include "nn/decode.hpp"
#include "translate_common.hpp"

namespace translate {

namespace {

// Corpus BLEU-4 (Papineni et al. 2002): geometric mean of clipped n-gram precisions for n = 1..4
// times the brevity penalty exp(min(0, 1 - ref_len / hyp_len)). No smoothing; 0 if some
// precision is 0. Computed on the tokenizer's tokens.
double corpus_bleu(const std::vector<std::vector<std::string>>& hyps,
                   const std::vector<std::vector<std::string>>& refs) {
  double match[4] = {}, count[4] = {};
  double hyp_len = 0, ref_len = 0;
  for (size_t s = 0; s < hyps.size(); ++s) {
    const auto &h = hyps[s], &r = refs[s];
    hyp_len += static_cast<double>(h.size());
    ref_len += static_cast<double>(r.size());
    for (size_t n = 1; n <= 4; ++n) {
      std::map<std::vector<std::string>, int64_t> ref_grams;
      for (size_t i = 0; i + n <= r.size(); ++i)
        ++ref_grams[{r.begin() + static_cast<int64_t>(i), r.begin() + static_cast<int64_t>(i + n)}];
      for (size_t i = 0; i + n <= h.size(); ++i) {
        auto it =
            ref_grams.find({h.begin() + static_cast<int64_t>(i), h.begin() + static_cast<int64_t>(i + n)});
        if (it != ref_grams.end() && it->second > 0) {
          --it->second;
          match[n - 1] += 1;
        }
        count[n - 1] += 1;
      }
    }
  }
  double log_p = 0;
  for (int n = 0; n < 4; ++n) {
    if (match[n] == 0) return 0.0;
    log_p += std::log(match[n] / count[n]) / 4;
  }
  const double bp = hyp_len >= ref_len ? 1.0 : std::exp(1.0 - ref_len / std::max(hyp_len, 1.0));
  return bp * std::exp(log_p);
}

// Decodes sources (token ids, no specials) in batches of similar length; results in input order.
std::vector<std::vector<int32_t>> decode_all(Transformer& model,
                                             const std::vector<std::vector<int32_t>>& sources,
                                             int64_t batch_size, const DecodeOptions& opt) {
  std::vector<EncodedPair> pairs(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) pairs[i].src = sources[i];
  std::vector<std::vector<int32_t>> out(sources.size());
  for (const auto& idx : make_batches(pairs, batch_size, nullptr, true)) {
    std::vector<std::vector<int32_t>> chunk;
    for (int64_t i : idx) chunk.push_back(sources[static_cast<size_t>(i)]);
    int64_t src_len = 0;
    const std::vector<int32_t> src = pad_sources(chunk, src_len);
    Hypotheses h = decode(model, src, static_cast<int64_t>(chunk.size()), src_len, opt);
    for (size_t r = 0; r < idx.size(); ++r) out[static_cast<size_t>(idx[r])] = std::move(h[r]);
  }
  return out;
}

// Source ids of a line, cut to what the positional table holds (with a warning).
std::vector<int32_t> encode_source(const LoadedModel& m, const std::string& line, int64_t lineno) {
  std::vector<int32_t> ids = m.info.src_vocab.encode(tokenize(line, m.info.tokenizer));
  const auto limit = static_cast<size_t>(m.model->config().max_len - 1);
  if (ids.size() > limit) {
    fmt::print(stderr, "warning: input line {}: {} tokens, cut to the model's limit of {}\n", lineno,
               ids.size(), limit);
    ids.resize(limit);
  }
  return ids;
}

DecodeOptions decode_options(const Args& args, const LoadedModel& m) {
  DecodeOptions opt;
  opt.beam = args.integer("beam", 1, 1000);
  if (opt.beam > m.info.config.tgt_vocab)
    throw args.error(fmt::format("--beam {} is larger than the target vocabulary ({} tokens)", opt.beam,
                                 m.info.config.tgt_vocab));
  opt.max_len = args.integer("max-len", 0, 1 << 20);
  opt.length_penalty = static_cast<float>(args.real("length-penalty", 0, 10));
  return opt;
}

}  // namespace

int run_eval(const std::vector<std::string>& argv) {
  Args args(
      "eval", "--model MODEL.safetensors --data TEST.tsv [options]",
      "Prints the loss, token accuracy and exact-match accuracy (greedy) on a test set, and with --bleu\n"
      "the corpus BLEU-4 of decoded translations (greedy, or --beam K).");
  args.option("model", "FILE", "a checkpoint written by translate train")
      .option("data", "FILE", "test pairs, source<TAB>target per line")
      .option("batch-size", "N", "sentences per batch", "64")
      .flag("bleu", "also decode every source and report BLEU")
      .option("beam", "K", "beam width for --bleu (1: greedy)", "1")
      .option("max-len", "N", "most tokens generated per sentence for --bleu (0: source length + 50)", "0")
      .option("length-penalty", "A", "beam score = sum log p / length^A (0: raw sum)", "1.0")
      .flag("skip-bad-lines", "skip malformed lines (reported) instead of stopping")
      .flag("json", "print the results as one JSON object");
  add_threads_option(args);
  if (!args.parse(argv)) {
    fmt::print("{}", args.help());
    return 0;
  }
  const int64_t batch_size = args.integer("batch-size", 1);
  apply_threads_option(args);
  const std::string model_path = args.str("model"), data_path = args.str("data");
  LoadedModel m = load_model(model_path);
  const DecodeOptions dopt = decode_options(args, m);
  const ParallelText text = read_data(data_path, args.flag_set("skip-bad-lines"));
  std::vector<EncodedPair> pairs = encode_pairs(text, m.info.tokenizer, m.info.src_vocab, m.info.tgt_vocab);
  if (const int64_t dropped = drop_too_long(pairs, m.model->config().max_len))
    fmt::print(stderr, "warning: {}: left out {} pairs longer than the model's limit\n", data_path, dropped);
  if (pairs.empty()) throw DataError(fmt::format("{}: no pairs to evaluate", data_path));

  const auto t0 = std::chrono::steady_clock::now();
  const Metrics r = evaluate(*m.model, pairs, batch_size);
  json::Value obj = json::Value::object({{"model", json::Value::string(model_path)},
                                         {"data", json::Value::string(data_path)},
                                         {"sentences", json::Value::integer(r.sentences)},
                                         {"tokens", json::Value::integer(r.tokens)},
                                         {"loss", json::Value::number(r.loss)},
                                         {"token_accuracy", json::Value::number(100 * r.token_accuracy)},
                                         {"exact_match", json::Value::number(100 * r.exact_match)}});
  std::string text_out = fmt::format(
      "{} on {}: {} sentences, {} tokens\n  loss           {:.4f}\n  token accuracy {:.2f}%\n"
      "  exact match    {:.2f}%",
      model_path, data_path, r.sentences, r.tokens, r.loss, 100 * r.token_accuracy, 100 * r.exact_match);
  if (args.flag_set("bleu")) {
    std::vector<std::vector<int32_t>> sources;
    std::vector<std::vector<std::string>> refs, hyps;
    for (size_t i = 0; i < text.size(); ++i) {
      sources.push_back(encode_source(m, text.src[i], text.line[i]));
      refs.push_back(tokenize(text.tgt[i], m.info.tokenizer));
    }
    for (const auto& ids : decode_all(*m.model, sources, batch_size, dopt))
      hyps.push_back(m.info.tgt_vocab.decode(ids));
    const double bleu = corpus_bleu(hyps, refs);
    obj.set("bleu", json::Value::number(100 * bleu));
    obj.set("beam", json::Value::integer(dopt.beam));
    text_out += fmt::format("\n  BLEU-4         {:.2f} ({})", 100 * bleu,
                            dopt.beam == 1 ? "greedy" : fmt::format("beam {}", dopt.beam));
  }
  obj.set("elapsed_s", json::Value::number(std::round(seconds_since(t0) * 10) / 10));
  if (args.flag_set("json"))
    fmt::print("{}\n", obj.dump());
  else
    fmt::print("{}\n", text_out);
  return 0;
}

int run_decode(const std::vector<std::string>& argv) {
  Args args("decode", "--model MODEL.safetensors [--beam K] < sources.txt",
            "Reads one source sentence per line on stdin and writes one translation per line on stdout\n"
            "(an empty line for an empty input line), greedy or with beam search.");
  args.option("model", "FILE", "a checkpoint written by translate train")
      .option("beam", "K", "beam width (1: greedy)", "1")
      .option("max-len", "N", "most tokens generated per sentence (0: source length + 50)", "0")
      .option("length-penalty", "A", "beam score = sum log p / length^A (0: raw sum)", "1.0")
      .option("batch-size", "N", "sentences decoded together", "32")
      .flag("json", "one JSON object per line: {\"source\": .., \"translation\": ..}");
  add_threads_option(args);
  if (!args.parse(argv)) {
    fmt::print("{}", args.help());
    return 0;
  }
  const int64_t batch_size = args.integer("batch-size", 1);
  apply_threads_option(args);
  LoadedModel m = load_model(args.str("model"));
  const DecodeOptions opt = decode_options(args, m);
  const bool as_json = args.flag_set("json");

  // Read a batch of lines, translate, print: output streams while input is still coming.
  std::string line;
  int64_t lineno = 0;
  bool more = true;
  while (more) {
    std::vector<std::string> lines;
    std::vector<std::vector<int32_t>> sources;
    std::vector<size_t> rows;  // which lines are non-empty
    while (static_cast<int64_t>(sources.size()) < batch_size &&
           (more = static_cast<bool>(std::getline(std::cin, line)))) {
      ++lineno;
      if (line.ends_with('\r')) line.pop_back();
      if (!io::is_valid_utf8(line)) throw DataError(fmt::format("stdin:{}: invalid UTF-8", lineno));
      lines.push_back(line);
      std::vector<int32_t> ids = encode_source(m, line, lineno);
      if (!ids.empty()) {
        rows.push_back(lines.size() - 1);
        sources.push_back(std::move(ids));
      }
    }
    std::vector<std::string> outs(lines.size());
    if (!sources.empty()) {
      const auto hyps = decode_all(*m.model, sources, batch_size, opt);
      for (size_t i = 0; i < rows.size(); ++i)
        outs[rows[i]] = detokenize(m.info.tgt_vocab.decode(hyps[i]), m.info.tokenizer);
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      if (as_json)
        fmt::print("{}\n", json::Value::object({{"source", json::Value::string(lines[i])},
                                                {"translation", json::Value::string(outs[i])}})
                               .dump());
      else
        fmt::print("{}\n", outs[i]);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace translate
