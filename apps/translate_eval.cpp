// translate eval (metrics on a test set) and translate decode (stdin -> translations).
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "apps/cli_errors.hpp"
#include "io/terminal.hpp"
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

// BLEU's tokens: the tokenizer's own pieces for word and char; for subword tokenizers the words of
// the detokenized text (whitespace-separated), so that BLEU does not depend on the subword model.
std::vector<std::string> bleu_tokens(const Tokenizer& tok, const std::string& text) {
  return tokenize(text, tok.kind() == "char" ? TokenizerKind::character : TokenizerKind::word);
}

// Source ids of a line, cut to what the positional table holds (with a warning); what became <unk>
// is counted in `unknown`.
std::vector<int32_t> encode_source(const LoadedModel& m, const std::string& line, int64_t lineno,
                                   UnknownTokens& unknown) {
  std::vector<int32_t> ids = m.info.src->encode(line, &unknown);
  const auto limit = static_cast<size_t>(m.model->config().max_len - 1);
  if (ids.size() > limit) {
    fmt::print(stderr, "warning: input line {}: {} tokens, cut to the model's limit of {}\n", lineno,
               ids.size(), limit);
    ids.resize(limit);
  }
  return ids;
}

DecodeOptions decode_options(int64_t beam, int64_t max_len, double length_penalty, const LoadedModel& m) {
  if (beam > m.info.config.tgt_vocab)
    throw tg::cli::UsageError(fmt::format("--beam {} is larger than the target vocabulary ({} tokens)", beam,
                                          m.info.config.tgt_vocab));
  return {.beam = beam, .max_len = max_len, .length_penalty = static_cast<float>(length_penalty)};
}

}  // namespace

int run_eval(const EvalArgs& args) {
  const std::string &model_path = args.model, &data_path = args.data;
  LoadedModel m = load_model(model_path);
  const DecodeOptions dopt = decode_options(args.beam, args.max_len, args.length_penalty, m);
  const ParallelText text = read_data(data_path, args.skip_bad_lines);
  UnknownTokens unknown;
  std::vector<EncodedPair> pairs = encode_pairs(text, *m.info.src, *m.info.tgt, &unknown);
  report_unknown(unknown, data_path, args.strict);
  if (const int64_t dropped = drop_too_long(pairs, m.model->config().max_len))
    fmt::print(stderr, "warning: {}: left out {} longer than the model's limit\n", data_path,
               tg::train::plural(dropped, "pair"));
  if (pairs.empty()) throw DataError(fmt::format("{}: no pairs to evaluate", data_path));

  const tg::PrecisionScope precision(args.precision);
  const auto t0 = std::chrono::steady_clock::now();
  const Metrics r = evaluate(*m.model, pairs, args.batch_size);
  nlohmann::ordered_json obj = {{"model", model_path},
                                {"data", data_path},
                                {"sentences", r.sentences},
                                {"tokens", r.tokens},
                                {"loss", r.loss},
                                {"token_accuracy", 100 * r.token_accuracy},
                                {"exact_match", 100 * r.exact_match},
                                {"precision", tg::precision_name(args.precision)}};
  std::string text_out = fmt::format(
      "{} on {}: {} sentences, {} tokens\n  loss           {:.4f}\n  token accuracy {:.2f}%\n"
      "  exact match    {:.2f}%\n  precision      {}",
      model_path, data_path, r.sentences, r.tokens, r.loss, 100 * r.token_accuracy, 100 * r.exact_match,
      tg::precision_name(args.precision));
  if (args.bleu) {
    std::vector<std::vector<int32_t>> sources;
    std::vector<std::vector<std::string>> refs, hyps;
    UnknownTokens counted_above;
    for (size_t i = 0; i < text.size(); ++i) {
      sources.push_back(encode_source(m, text.src[i], text.line[i], counted_above));
      refs.push_back(bleu_tokens(*m.info.tgt, text.tgt[i]));
    }
    for (const auto& ids : decode_all(*m.model, sources, args.batch_size, dopt))
      hyps.push_back(bleu_tokens(*m.info.tgt, m.info.tgt->decode(ids)));
    const double bleu = corpus_bleu(hyps, refs);
    obj["bleu"] = 100 * bleu;
    obj["beam"] = dopt.beam;
    text_out += fmt::format("\n  BLEU-4         {:.2f} ({})", 100 * bleu,
                            dopt.beam == 1 ? "greedy" : fmt::format("beam {}", dopt.beam));
  }
  obj["elapsed_s"] = std::round(tg::train::seconds_since(t0) * 10) / 10;
  if (args.json)
    fmt::print("{}\n", obj.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  else
    fmt::print("{}\n", text_out);
  return 0;
}

int run_decode(const DecodeArgs& args) {
  LoadedModel m = load_model(args.model);
  const DecodeOptions opt = decode_options(args.beam, args.max_len, args.length_penalty, m);
  const tg::PrecisionScope precision(args.precision);

  // Read a batch of lines, translate, print: output streams while input is still coming.
  std::string line;
  int64_t lineno = 0;
  bool more = true;
  UnknownTokens unknown;
  // On a terminal a translation's control bytes (spm byte pieces can make any) show as \x1b.
  io::TerminalText screen(::isatty(1));
  while (more) {
    std::vector<std::string> lines;
    std::vector<std::vector<int32_t>> sources;
    std::vector<size_t> rows;  // which lines are non-empty
    while (static_cast<int64_t>(sources.size()) < args.batch_size &&
           (more = static_cast<bool>(std::getline(std::cin, line)))) {
      ++lineno;
      if (line.ends_with('\r')) line.pop_back();
      if (const size_t bad = io::find_invalid_utf8(line); bad != std::string::npos)
        throw DataError(fmt::format("stdin:{}: invalid UTF-8 at byte offset {} of the line", lineno, bad));
      lines.push_back(line);
      std::vector<int32_t> ids = encode_source(m, line, lineno, unknown);
      // --strict: stop at the first line with an unknown token, before translating it.
      if (args.strict) report_unknown(unknown, fmt::format("stdin:{}", lineno), true);
      if (!ids.empty()) {
        rows.push_back(lines.size() - 1);
        sources.push_back(std::move(ids));
      }
    }
    std::vector<std::string> outs(lines.size());
    if (!sources.empty()) {
      const auto hyps = decode_all(*m.model, sources, args.batch_size, opt);
      for (size_t i = 0; i < rows.size(); ++i) outs[rows[i]] = m.info.tgt->decode(hyps[i]);
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      if (args.json)  // byte pieces (spm) can decode to bytes that are not UTF-8: those become U+FFFD
        fmt::print("{}\n", nlohmann::ordered_json{{"source", lines[i]}, {"translation", outs[i]}}.dump(
                               -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
      else {
        std::string shown = screen.feed(outs[i]);  // then what feed held back: an unfinished character
        shown += screen.finish();
        fmt::print("{}\n", shown);
      }
    }
    std::fflush(stdout);
  }
  report_unknown(unknown, "stdin", false);
  return 0;
}

}  // namespace translate
