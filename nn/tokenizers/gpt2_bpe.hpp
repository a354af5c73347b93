// GPT-2's byte-level BPE tokenizer (kind "gpt2"), id for id what Hugging Face's `tokenizers` library
// (ByteLevel pre-tokenizer + BPE model) and transformers' GPT2Tokenizer(Fast) give.
//
// Files it reads (a Hugging Face GPT-2 folder, or `tokenizers.ByteLevelBPETokenizer.save_model`):
//   vocab.json    {"token": id, ...}; tokens in the byte-to-unicode form below; the ids must be
//                 exactly 0..N-1, each once
//   merges.txt    one merge "a b" per line, in rank order (first line = rank 0); lines that start
//                 with "#version" are skipped (as `tokenizers` does); CRLF accepted
//   tokenizer.json  where a folder has only that: model.type "BPE", model.vocab, model.merges ("a b"
//                 strings or ["a", "b"] pairs), added_tokens; normalizer null; pre_tokenizer
//                 ByteLevel (add_prefix_space and use_regex honoured); model options unk_token,
//                 fuse_unk and ignore_merges honoured; other normalizers and pre-tokenizers,
//                 dropout, byte_fallback, continuing_subword_prefix / end_of_word_suffix, added
//                 tokens with lstrip, rstrip or single_word, and a merge whose first symbol starts
//                 with "#version" (merges.txt could not hold it) are refused (GPT-2 has none of them)
// Any problem is an io::DataError naming the file and the line (merges.txt), the key (vocab.json,
// tokenizer.json: "model.merges[12]") or the byte offset, line and column (invalid JSON).
//
// Encoding, as `tokenizers` does it:
//  1. Added tokens are cut out first, matched literally in the raw text (leftmost, then longest):
//     each becomes its id. From vocab.json + merges.txt the one added token is "<|endoftext|>"
//     (special) when the vocabulary has it, as transformers' GPT2Tokenizer(Fast) sets it up; from
//     tokenizer.json, its added_tokens.
//  2. Each stretch between them is cut by GPT-2's regular expression
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     (PCRE2, UTF + UCP, compiled once per process, JIT-compiled where PCRE2 has a JIT). \s is
//     written out as the 25 code points of Unicode's White_Space: Oniguruma, the engine `tokenizers`
//     uses, has exactly those, while PCRE2's \s also takes U+180E. With that, every one of the
//     1,112,064 Unicode scalar values was measured to fall in the same class (letter, number, space,
//     other) in both engines (PCRE2 10.42, tokenizers 0.20.3).
//  3. Each piece's bytes become one symbol each (the byte's token in the vocabulary), and merges
//     are applied lowest rank first (the leftmost among equal ranks) until none applies: the
//     algorithm of `tokenizers`' BPE (word.rs), including its handling of a merge listed twice
//     (the later rank wins). A byte without a token (never so in GPT-2's vocabulary) becomes the
//     `unk_token` a tokenizer.json may name, counted in UnknownTokens; without one, encode() throws
//     io::DataError naming the line and the byte, as Tokenizer asks of a tokenizer without <unk>
//     (where `tokenizers` drops the byte silently).
//
// Invalid UTF-8. `tokenizers` cannot be given it (it works on Rust strings: Python must decode the
// bytes first, and errors="replace" loses them). Here any bytes encode, and decode gives them back:
// an invalid byte (one that does not begin a complete, shortest-form UTF-8 sequence of a code point
// other than a surrogate) is one character of the class "other" (neither letter, number nor space),
// the class of U+FFFD. The regular expression runs on a copy in which each such byte is U+FFFD,
// and the pieces are cut from the original bytes at the same places; the BPE then merges the
// original bytes. So a text with invalid bytes is tokenized as the library tokenizes the same text
// with each invalid byte replaced by U+FFFD, except that the pieces keep their own bytes (the test
// compares exactly that: tests/nn/gpt2_bpe_parity.py).
//
// The cache: the ids of each merged piece of at most 256 bytes, in an unordered_map from its bytes,
// cleared when it reaches 65,536 pieces or about 16 MB (estimated from the pieces' and ids' sizes).
// A mutex guards it, so one tokenizer may be used from several threads at once (the CLIs use one;
// the lock is uncontended there).
//
// Decoding concatenates the tokens' bytes (through the inverse byte table; a token with a character
// outside the table gives its own UTF-8, as the ByteLevel decoder has it), leaving special tokens
// out: decode(encode(b)) == b for any bytes b that do not contain an added token's text.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nn/tokenizers/tokenizer.hpp"

namespace tg::nn {

// GPT-2's byte-to-unicode table: byte b stands for code point gpt2_byte_to_unicode()[b] in
// vocab.json and merges.txt ('!'..'~', 0xA1..0xAC and 0xAE..0xFF themselves; the other 68 bytes
// U+0100.. in byte order: ' ' -> 'Ġ' U+0120, '\n' -> 'Ċ' U+010A).
const std::array<char32_t, 256>& gpt2_byte_to_unicode();
// Bytes -> their byte-to-unicode form (UTF-8).
std::string gpt2_bytes_to_unicode(std::string_view bytes);
// The inverse: a token's bytes, or nullopt when a character of it is not in the table.
std::optional<std::string> gpt2_unicode_to_bytes(std::string_view token);

// GPT-2's pre-tokenizer alone (step 2 above): the pieces of `text`, in order; they tile it.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

class Gpt2BpeTokenizer : public Tokenizer {
 public:
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  struct AddedToken {
    std::string content;  // the text matched literally (UTF-8)
    int32_t id = -1;
    bool special = true;  // left out by decode()
    bool operator==(const AddedToken&) const = default;
  };
  // tokenizer.json settings beyond GPT-2's (all false / empty for GPT-2).
  struct Options {
    bool add_prefix_space = false;  // a " " before each stretch of text that does not start with one
    bool use_regex = true;          // false: each stretch is one piece
    bool ignore_merges = false;     // a piece that is a token as a whole is that token
    std::string unk_token;          // a byte without a token becomes this (else it is dropped)
    bool fuse_unk = false;          // consecutive unknown bytes become one unk_token
    bool operator==(const Options&) const = default;
  };

  // vocab.json + merges.txt.
  static Gpt2BpeTokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // tokenizer.json.
  static Gpt2BpeTokenizer from_tokenizer_json(const std::string& path);
  // A folder: vocab.json + merges.txt when it has both, else tokenizer.json; io::DataError naming
  // the folder when it has neither.
  static Gpt2BpeTokenizer from_folder(const std::string& dir);
  // The same from text in memory; the names stand for the files in messages.
  static Gpt2BpeTokenizer from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                       const std::string& vocab_name = "vocab.json",
                                       const std::string& merges_name = "merges.txt");
  static Gpt2BpeTokenizer from_tokenizer_json_string(std::string_view json,
                                                     const std::string& name = "tokenizer.json");
  // From a checkpoint's metadata, as save() wrote it; io::SafetensorsError naming `path` and the key.
  static Gpt2BpeTokenizer load(const io::Metadata& md, const std::string& prefix, const std::string& path);

  Gpt2BpeTokenizer(Gpt2BpeTokenizer&&) noexcept;
  Gpt2BpeTokenizer& operator=(Gpt2BpeTokenizer&&) noexcept;
  ~Gpt2BpeTokenizer() override;

  std::string kind() const override { return "gpt2"; }
  int64_t vocab_size() const override;
  // bos = eos = "<|endoftext|>" when it is a special token; unk = unk_token's id where set.
  SpecialIds specials() const override;
  // Any bytes encode; only a vocabulary that lacks a byte's token and has no unk_token makes it throw
  // io::DataError ("<where>: line L, byte B of the line: byte 0x7A (z) has no token ..."). Bytes
  // that become unk_token are counted in `unknown`.
  std::vector<int32_t> encode(std::string_view text, UnknownTokens* unknown = nullptr,
                              const std::string& where = "input") const override;
  // std::out_of_range for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const override;
  std::string label(int32_t id) const override;
  // Keys prefix + "gpt2_vocab" (vocab.json's text), prefix + "gpt2_merges" (merges.txt's text), and,
  // only where they differ from what vocab.json + merges.txt imply, prefix + "gpt2_added_tokens"
  // (JSON: [{"id", "content", "special"}]) and prefix + "gpt2_options" (JSON of Options).
  void save(io::Metadata& md, const std::string& prefix) const override;
  // A folder AutoTokenizer.from_pretrained(dir) loads (made if missing; files replaced atomically):
  // vocab.json (compact, in id order, as `tokenizers` writes it), merges.txt ("#version: 0.2" then
  // one merge per line), tokenizer.json, tokenizer_config.json (GPT2Tokenizer) and
  // special_tokens_map.json.
  void write_files(const std::string& dir) const;

  // The token of an id as vocab.json spells it (byte-to-unicode form), its bytes, and the id of a
  // token so spelled (-1 when none).
  const std::string& token(int32_t id) const;
  const std::string& token_bytes(int32_t id) const;
  int32_t token_id(std::string_view token) const;
  // The merges as listed ("a", "b"), in rank order.
  const std::vector<std::pair<std::string, std::string>>& merges() const;
  const std::vector<AddedToken>& added_tokens() const;
  const Options& options() const;
  // vocab.json's and merges.txt's text as write_files() writes them.
  std::string vocab_json() const;
  std::string merges_txt() const;
  // Pieces in the cache now (for tests).
  size_t cached_words() const;

 private:
  struct Impl;
  explicit Gpt2BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tg::nn
