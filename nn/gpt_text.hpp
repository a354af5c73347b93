// Text for a language model: reading a training or evaluation file, the random windows training
// draws and the consecutive chunks evaluation reads, and the summed loss of a GPT over a token
// sequence (lm's tokenizers: nn/tokenizers/byte_char.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/random.hpp"
#include "io/text.hpp"
#include "nn/gpt.hpp"
#include "nn/tokenizers/tokenizer.hpp"

namespace tg::nn {

// ---- files ------------------------------------------------------------------------------------

// The bytes of a text file, checked: io::DataError naming the file when it cannot be read, is
// empty, or is not text (a NUL byte, or invalid UTF-8), with the line and byte offset at fault.
std::string read_text_file(const std::string& path);
// The same checks on text in memory; `name` stands for the file in messages.
void check_text(std::string_view text, const std::string& name);

// ---- streamed text -----------------------------------------------------------------------------

// Generated tokens as text, one token at a time (lm sample's streamed output): next(id) is id's
// share of the decoded text, decode(last W tokens + id) past decode(last W tokens). Both decodes start
// at the same token, so a tokenizer that decodes a piece differently at the start of a text (the
// translate layout of SentencePiece drops a first word's space) or a character spread over several
// byte-level tokens come out as decoding the whole at once would have them; the concatenation of
// every next() is tok.decode(all ids). Constant work per token (decoding everything so far for each
// token was quadratic in the length).
class TextStream {
 public:
  static constexpr size_t kWindow = 16;
  explicit TextStream(const Tokenizer& tok) : tok_(tok) {}
  std::string next(int32_t id);

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> recent_;  // at most kWindow + 1 ids, the newest last
};

// ---- windows ----------------------------------------------------------------------------------

// `batch` training windows of `len` inputs: row r starts at a uniform offset o_r in
// [0, n - len - 1]; x[r] = ids[o_r, o_r + len), y[r] = ids[o_r + 1, o_r + len + 1). Draws `batch`
// numbers from gen. Needs n >= len + 1.
struct Windows {
  std::vector<int32_t> x, y;
  int64_t batch = 0, len = 0;
};
Windows random_windows(std::span<const int32_t> ids, int64_t batch, int64_t len, Generator& gen);

// Evaluation reads ids as consecutive chunks of `len` inputs: chunk k has inputs
// ids[k len, k len + l_k) and targets one further, l_k = min(len, n - 1 - k len), so every token but
// the first is predicted exactly once, with up to len - 1 tokens of context.
int64_t eval_chunk_count(int64_t n, int64_t len);

// The summed cross-entropy (nats) of `model` over chunks [first, last) of ids, batch_size chunks
// per forward pass, in eval mode without a tape (the training flag is restored); `count` gets the
// number of predicted tokens and `bytes` the bytes of text they stand for.
struct LossSum {
  double nats = 0;
  int64_t count = 0, bytes = 0;
};
LossSum lm_loss_sum(GPT& model, const Tokenizer& tok, std::span<const int32_t> ids, int64_t len,
                    int64_t batch_size, int64_t first, int64_t last);

}  // namespace tg::nn
