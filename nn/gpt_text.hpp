// Text for a language model: reading a training or evaluation file, the two tokenizers of `lm`
// (bytes, or the characters of the training text), the random windows training draws and the
// consecutive chunks evaluation reads, and the summed loss of a GPT over a token sequence.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autograd/random.hpp"
#include "io/text.hpp"
#include "nn/gpt.hpp"

namespace tg::nn {

// ---- files ------------------------------------------------------------------------------------

// The bytes of a text file, checked: io::DataError naming the file when it cannot be read, is
// empty, or is not text (a NUL byte, or invalid UTF-8), with the line and byte offset at fault.
std::string read_text_file(const std::string& path);
// The same checks on text in memory; `name` stands for the file in messages.
void check_text(std::string_view text, const std::string& name);

// ---- tokenizers -------------------------------------------------------------------------------

enum class LmTokenizerKind { byte, character };
LmTokenizerKind parse_lm_tokenizer(const std::string& s);  // "byte" | "char", else invalid_argument

// byte: 256 ids, id = the byte's value; any text encodes, and decoding gives the bytes back.
// char: one id per distinct Unicode code point of the training text, in code-point order (nanoGPT's
// shakespeare_char); a code point outside that set cannot be encoded.
class LmTokenizer {
 public:
  static LmTokenizer bytes();
  // The characters of `texts` (valid UTF-8).
  static LmTokenizer characters(const std::vector<std::string_view>& texts);
  // From a saved list (a checkpoint's "vocab"): each entry one code point, strictly increasing;
  // else io::DataError.
  static LmTokenizer from_symbols(std::vector<std::string> symbols);

  LmTokenizerKind kind() const { return kind_; }
  const char* name() const { return kind_ == LmTokenizerKind::byte ? "byte" : "char"; }
  int64_t vocab_size() const;
  const std::vector<std::string>& symbols() const { return symbols_; }  // char only

  // Text -> ids. char: a code point outside the vocabulary throws io::DataError naming `where`
  // ("--prompt", a file), the line and column, and the character.
  std::vector<int32_t> encode(std::string_view text, const std::string& where) const;
  // The bytes of one token, and of a sequence (byte tokens may split a UTF-8 character).
  std::string piece(int32_t id) const;
  std::string decode(std::span<const int32_t> ids) const;
  // Bytes of text that ids stand for (bits per byte = nats / ln 2 / this).
  int64_t byte_count(std::span<const int32_t> ids) const;
  // A short printable label of a token for heatmaps: the character, "␣" for a space, "\n" and "\t"
  // for newline and tab, hex ("\x07", "\xE2") for other control bytes and for byte tokens >= 0x80
  // (a part of a multi-byte character).
  std::string label(int32_t id) const;

 private:
  LmTokenizerKind kind_ = LmTokenizerKind::byte;
  std::vector<std::string> symbols_;                // char: id -> UTF-8 of the code point
  std::unordered_map<std::string, int32_t> index_;  // char: the reverse
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
LossSum lm_loss_sum(GPT& model, const LmTokenizer& tok, std::span<const int32_t> ids, int64_t len,
                    int64_t batch_size, int64_t first, int64_t last);

}  // namespace tg::nn
