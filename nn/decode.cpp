#include "nn/decode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "autograd/tape.hpp"

namespace tg::nn {

namespace {

// Eval mode and no tape for the duration of a decode; the caller's training flag comes back after.
class DecodeScope {
 public:
  explicit DecodeScope(Transformer& m) : model_(m), was_training_(m.is_training()) { m.eval(); }
  ~DecodeScope() { model_.train(was_training_); }
  DecodeScope(const DecodeScope&) = delete;
  DecodeScope& operator=(const DecodeScope&) = delete;

 private:
  Transformer& model_;
  bool was_training_;
  NoGradGuard no_grad_;
};

// The most tokens each row may generate: max_len, or 0 for the row's source tokens (not <pad>, not
// <eos>) + 50; positions beyond the model's table do not exist.
std::vector<int64_t> row_limits(const Transformer& model, std::span<const int32_t> src, int64_t batch,
                                int64_t src_len, int64_t max_len) {
  if (max_len < 0) throw std::invalid_argument(fmt::format("decode: max_len must be >= 0, got {}", max_len));
  std::vector<int64_t> limits(static_cast<size_t>(batch), max_len);
  for (int64_t r = 0; r < batch; ++r) {
    int64_t& limit = limits[static_cast<size_t>(r)];
    if (max_len == 0) {
      const auto row = src.subspan(static_cast<size_t>(r * src_len), static_cast<size_t>(src_len));
      limit = 50 + std::count_if(row.begin(), row.end(), [](int32_t id) { return id != kPad && id != kEos; });
    }
    limit = std::min(limit, model.config().max_len);
  }
  return limits;
}

void check_src(std::span<const int32_t> src, int64_t batch, int64_t src_len) {
  if (batch <= 0 || src_len <= 0 || static_cast<int64_t>(src.size()) != batch * src_len)
    throw std::invalid_argument(
        fmt::format("decode: {} source ids for batch {} x length {}", src.size(), batch, src_len));
}

int32_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (row[j] > row[best]) best = j;
  return static_cast<int32_t>(best);
}

// log softmax of one row, in double.
void log_softmax_row(std::vector<double>& out, const float* row, int64_t n) {
  const float mx = *std::max_element(row, row + n);
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(row[j] - mx));
  const double lse = static_cast<double>(mx) + std::log(s);
  out.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(j)] = static_cast<double>(row[j]) - lse;
}

}  // namespace

Hypotheses greedy_decode(Transformer& model, std::span<const int32_t> src, int64_t batch, int64_t src_len,
                         int64_t max_len) {
  check_src(src, batch, src_len);
  DecodeScope scope(model);
  const std::vector<int64_t> limits = row_limits(model, src, batch, src_len, max_len);
  const int64_t V = model.config().tgt_vocab;
  DecoderState st =
      model.start_decoding(model.encode(src, batch, src_len), padding_mask(src, batch, src_len));

  Hypotheses out(static_cast<size_t>(batch));
  std::vector<int64_t> active(static_cast<size_t>(batch));  // source index of each state row
  std::iota(active.begin(), active.end(), 0);
  std::vector<int32_t> tokens(static_cast<size_t>(batch), kBos);
  while (!active.empty()) {
    const Tensor logits = model.decode_step(st, tokens);
    std::vector<int64_t> keep, next_active;
    std::vector<int32_t> next_tokens;
    for (size_t r = 0; r < active.size(); ++r) {
      const int32_t tok = argmax(logits.data() + static_cast<int64_t>(r) * V, V);
      if (tok == kEos) continue;  // finished: drop the row from the state
      std::vector<int32_t>& hyp = out[static_cast<size_t>(active[r])];
      hyp.push_back(tok);
      if (static_cast<int64_t>(hyp.size()) >= limits[static_cast<size_t>(active[r])]) continue;  // full
      keep.push_back(static_cast<int64_t>(r));
      next_active.push_back(active[r]);
      next_tokens.push_back(tok);
    }
    if (keep.size() != active.size() && !keep.empty()) st.select_rows(keep);
    active = std::move(next_active);
    tokens = std::move(next_tokens);
  }
  return out;
}

Hypotheses beam_search(Transformer& model, std::span<const int32_t> src, int64_t batch, int64_t src_len,
                       const DecodeOptions& opt) {
  check_src(src, batch, src_len);
  if (opt.beam < 1)
    throw std::invalid_argument(fmt::format("beam_search: beam must be >= 1, got {}", opt.beam));
  DecodeScope scope(model);
  const std::vector<int64_t> limits = row_limits(model, src, batch, src_len, opt.max_len);
  const int64_t V = model.config().tgt_vocab, K = opt.beam;
  const auto normalized = [&](double score, size_t len) {
    return opt.length_penalty == 0.0f ? score
                                      : score / std::pow(static_cast<double>(len), opt.length_penalty);
  };

  struct Beam {
    std::vector<int32_t> tokens;
    double score;  // sum of log-probabilities
  };
  struct Finished {
    std::vector<int32_t> tokens;
    double norm_score;
  };
  // State rows are [active source a, beam k] -> row a * K + k. At the start every beam of a source
  // is the same <bos> prefix: only beam 0 is live (the others score -inf) so no duplicates arise.
  std::vector<int64_t> rows(static_cast<size_t>(batch * K));
  for (int64_t i = 0; i < batch * K; ++i) rows[static_cast<size_t>(i)] = i / K;
  DecoderState st =
      model.start_decoding(model.encode(src, batch, src_len), padding_mask(src, batch, src_len));
  st.select_rows(rows);

  std::vector<int64_t> active(static_cast<size_t>(batch));
  std::iota(active.begin(), active.end(), 0);
  std::vector<std::vector<Beam>> beams(static_cast<size_t>(batch));
  for (auto& b : beams) {
    b.assign(static_cast<size_t>(K), Beam{{}, -std::numeric_limits<double>::infinity()});
    b[0].score = 0.0;
  }
  std::vector<std::vector<Finished>> finished(static_cast<size_t>(batch));
  std::vector<int32_t> tokens(static_cast<size_t>(batch * K), kBos);
  std::vector<double> logp;
  struct Candidate {
    double score;
    int64_t beam;
    int32_t token;
  };
  std::vector<Candidate> cand;
  const auto by_score = [](const Finished& x, const Finished& y) { return x.norm_score < y.norm_score; };

  for (int64_t step = 0; !active.empty(); ++step) {
    const Tensor logits = model.decode_step(st, tokens);
    std::vector<int64_t> parents, next_active;
    std::vector<int32_t> next_tokens;
    for (size_t a = 0; a < active.size(); ++a) {
      const auto s = static_cast<size_t>(active[a]);
      cand.clear();
      for (int64_t k = 0; k < K; ++k) {
        const Beam& bm = beams[s][static_cast<size_t>(k)];
        if (std::isinf(bm.score)) continue;
        log_softmax_row(logp, logits.data() + (static_cast<int64_t>(a) * K + k) * V, V);
        for (int64_t v = 0; v < V; ++v)
          cand.push_back({bm.score + logp[static_cast<size_t>(v)], k, static_cast<int32_t>(v)});
      }
      // The best 2K candidates: even if K of them end in <eos>, K live beams remain. Ties go to the
      // lower (beam, token), which makes beam 1 pick exactly greedy's argmax.
      const size_t top = std::min(cand.size(), static_cast<size_t>(2 * K));
      std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(top), cand.end(),
                        [](const Candidate& x, const Candidate& y) {
                          if (x.score != y.score) return x.score > y.score;
                          return x.beam != y.beam ? x.beam < y.beam : x.token < y.token;
                        });
      std::vector<Beam> next;
      auto& fin = finished[s];
      for (size_t c = 0; c < top && static_cast<int64_t>(next.size()) < K; ++c) {
        const Beam& parent = beams[s][static_cast<size_t>(cand[c].beam)];
        if (cand[c].token == kEos) {  // keep the K best finished hypotheses
          Finished f{parent.tokens, normalized(cand[c].score, parent.tokens.size() + 1)};
          if (static_cast<int64_t>(fin.size()) < K) {
            fin.push_back(std::move(f));
          } else {
            auto worst = std::min_element(fin.begin(), fin.end(), by_score);
            if (f.norm_score > worst->norm_score) *worst = std::move(f);
          }
          continue;
        }
        Beam b{parent.tokens, cand[c].score};
        b.tokens.push_back(cand[c].token);
        next.push_back(std::move(b));
        parents.push_back(static_cast<int64_t>(a) * K + cand[c].beam);
      }
      // Done once K hypotheses are finished and no live beam scores better than the worst of them
      // at its current length. A live candidate never outranks a finished one of the same step,
      // so beam 1 stops exactly where greedy decoding does.
      bool done = next.empty();
      if (!done && static_cast<int64_t>(fin.size()) >= K) {
        double best_live = -std::numeric_limits<double>::infinity();
        for (const Beam& b : next) best_live = std::max(best_live, normalized(b.score, b.tokens.size()));
        done = best_live <= std::min_element(fin.begin(), fin.end(), by_score)->norm_score;
      }
      // At its length limit a source's live beams count as (unfinished) hypotheses.
      if (!done && step + 1 >= limits[s]) {
        for (const Beam& b : next)
          fin.push_back({b.tokens, normalized(b.score, std::max<size_t>(b.tokens.size(), 1))});
        done = true;
      }
      if (done) {  // drop this source's rows again
        parents.resize(parents.size() - next.size());
        continue;
      }
      while (static_cast<int64_t>(next.size()) < K) {  // fewer than K live candidates: pad with dead beams
        next.push_back(Beam{{}, -std::numeric_limits<double>::infinity()});
        parents.push_back(static_cast<int64_t>(a) * K);
      }
      for (const Beam& b : next) next_tokens.push_back(b.tokens.empty() ? kPad : b.tokens.back());
      beams[s] = std::move(next);
      next_active.push_back(active[a]);
    }
    active = std::move(next_active);
    tokens = std::move(next_tokens);
    if (!active.empty()) st.select_rows(parents);
  }
  Hypotheses out(static_cast<size_t>(batch));
  for (size_t s = 0; s < out.size(); ++s) {
    const auto& f = finished[s];
    if (f.empty()) continue;
    const auto best = std::max_element(f.begin(), f.end(), by_score);
    out[s] = best->tokens;
  }
  return out;
}

Hypotheses decode(Transformer& model, std::span<const int32_t> src, int64_t batch, int64_t src_len,
                  const DecodeOptions& opt) {
  if (opt.beam == 1) return greedy_decode(model, src, batch, src_len, opt.max_len);
  return beam_search(model, src, batch, src_len, opt);
}

}  // namespace tg::nn
