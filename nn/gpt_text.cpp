#include "nn/gpt_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "io/file.hpp"
#include "io/utf8.hpp"

namespace tg::nn {

using io::DataError;

namespace {

// The most logits lm_loss_sum holds at once: 8M (32 MB), as many rows as that allows (e.g. all 4,096
// rows of 16 chunks of 256 bytes, 166 rows of GPT-2's 50,257 tokens).
constexpr int64_t kEvalLogits = int64_t{1} << 23;

}  // namespace

void check_text(std::string_view text, const std::string& name) {
  if (text.empty()) throw DataError(fmt::format("{}: the file is empty (a language model needs text)", name));
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw DataError(fmt::format("{}:{}: a NUL byte at byte offset {}: this is not a text file", name,
                                io::line_column(text, nul).first, nul));
  }
  if (const size_t bad = io::find_invalid_utf8(text); bad != std::string_view::npos) {
    throw DataError(
        fmt::format("{}:{}: invalid UTF-8 (byte 0x{:02X} at byte offset {}): this is not UTF-8 text", name,
                    io::line_column(text, bad).first, static_cast<unsigned char>(text[bad]), bad));
  }
}

std::string read_text_file(const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const std::runtime_error& e) {
    throw DataError(e.what());
  }
  check_text(text, path);
  return text;
}

Windows random_windows(std::span<const int32_t> ids, int64_t batch, int64_t len, Generator& gen) {
  const auto n = static_cast<int64_t>(ids.size());
  if (len <= 0 || batch <= 0 || n < len + 1)
    throw std::invalid_argument(
        fmt::format("random_windows: {} tokens cannot give windows of {} + 1 tokens", n, len));
  Windows w;
  w.batch = batch;
  w.len = len;
  w.x.resize(static_cast<size_t>(batch * len));
  w.y.resize(w.x.size());
  for (int64_t r = 0; r < batch; ++r) {
    const auto o = static_cast<int64_t>(gen.below(static_cast<uint64_t>(n - len)));
    std::copy_n(ids.begin() + o, len, w.x.begin() + r * len);
    std::copy_n(ids.begin() + o + 1, len, w.y.begin() + r * len);
  }
  return w;
}

int64_t eval_chunk_count(int64_t n, int64_t len) {
  return n < 2 ? 0 : (n - 1 + len - 1) / len;
}

LossSum lm_loss_sum(GPT& model, const Tokenizer& tok, std::span<const int32_t> ids, int64_t len,
                    int64_t batch_size, int64_t first, int64_t last) {
  const auto n = static_cast<int64_t>(ids.size());
  last = std::min(last, eval_chunk_count(n, len));
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  LossSum s;
  std::vector<int32_t> x, y;
  for (int64_t k = first; k < last;) {
    // Full chunks batch together; the shorter last chunk of the text runs alone.
    const int64_t l = std::min(len, n - 1 - k * len);
    int64_t rows = 0;
    x.clear();
    y.clear();
    while (k < last && rows < batch_size && std::min(len, n - 1 - k * len) == l) {
      x.insert(x.end(), ids.begin() + k * len, ids.begin() + k * len + l);
      y.insert(y.end(), ids.begin() + k * len + 1, ids.begin() + k * len + l + 1);
      ++rows;
      ++k;
    }
    // The head and the loss over row chunks: never more than kEvalLogits logits at once (a batch of
    // 16 chunks of 256 tokens over GPT-2's 50,257 tokens would hold 823 MB of them).
    const int64_t d = model.config().n_embd, V = model.config().vocab_size, R = rows * l;
    const Tensor h = reshape(model.hidden(x, rows, l), {R, d});
    const int64_t step = std::max<int64_t>(1, kEvalLogits / V);
    for (int64_t r0 = 0; r0 < R; r0 += step) {
      const int64_t r1 = std::min(R, r0 + step);
      const Tensor logits = model.head(r0 == 0 && r1 == R ? h : slice(h, 0, r0, r1));
      s.nats += static_cast<double>(cross_entropy(logits, std::span(y).subspan(r0, r1 - r0)).item()) *
                static_cast<double>(r1 - r0);
    }
    s.count += R;
    s.bytes += tok.byte_count(y);
  }
  model.train(was_training);
  return s;
}

std::string TextStream::next(int32_t id) {
  if (recent_.size() > kWindow) recent_.erase(recent_.begin());
  const std::string before = tok_.decode(recent_);
  recent_.push_back(id);
  const std::string after = tok_.decode(recent_);
  return after.substr(std::min(before.size(), after.size()));
}

}  // namespace tg::nn
