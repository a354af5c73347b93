// What the fuzzers do with one input, shared by the libFuzzer targets (fuzz_*.cpp, built by
// tools/fuzz.sh) and the doctest suite (tests/io/test_fuzz_corpus.cpp runs every seed and every
// regression input through the same functions in the normal and the ASan builds).
//
// Contract checked: an input either loads or throws the loader's own error type (SafetensorsError,
// DataError); any other exception escapes (libFuzzer reports it as a crash), and the sanitizers
// catch memory errors, leaks and undefined behaviour. Violated invariants trap.
//
// gpt2_bpe inputs are three parts split at the first two NUL bytes: A, B, text. A + B go to
// Gpt2BpeTokenizer::from_strings as vocab.json + merges.txt, A alone to from_tokenizer_json_string;
// whatever loads encodes the text.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.hpp"
#include "nn/data.hpp"
#include "nn/family/gpt_family.hpp"
#include "nn/family/hf_gpt2.hpp"
#include "nn/family/transformer_family.hpp"
#include "nn/optim.hpp"
#include "nn/tokenizers/byte_char.hpp"
#include "nn/tokenizers/gpt2_bpe.hpp"
#include "nn/tokenizers/spm.hpp"

namespace tg::fuzz {

// The safetensors loader from bytes in memory, then what `translate decode/eval/--init/--resume`
// (or, for a file whose format is the GPT's, the same commands of `lm`) does with a file: the
// checkpoint metadata with its tokenizers (word, char, spm, byte, gpt2), a model built from its
// config, the weights and the optimizer state. Returns true when the input loaded as a checkpoint.
inline bool safetensors_input(std::span<const unsigned char> bytes) {
  using namespace tg::nn;
  using namespace tg::io;
  try {
    TensorFile f = parse_safetensors(bytes, "fuzz.safetensors");
    for (const auto& [name, t] : f.tensors)
      if (name.empty() || t.numel() < 0) __builtin_trap();
    const auto format = f.metadata.find("format");
    if (format != f.metadata.end() && format->second == "tapegrad.gpt.v1") {
      const GptCheckpoint ck = parse_gpt_checkpoint(std::move(f), "fuzz.safetensors");
      // parse_gpt_checkpoint has checked that the config's model is no larger than the file.
      const std::unique_ptr<GPT> model = load_gpt(ck, "fuzz.safetensors");
      if (ck.has_optimizer_state()) {
        AdamW opt(model->named_parameters());
        load_optimizer_state(opt, ck.file, "fuzz.safetensors");
      }
      return true;
    }
    const Checkpoint ck = parse_checkpoint(std::move(f), "fuzz.safetensors");
    // parse_checkpoint has checked that the config's model is no larger than the file.
    Transformer model(ck.info.config, 0);
    load_weights(model, ck.file, "fuzz.safetensors");
    if (ck.has_optimizer_state()) {
      Adam opt(model.named_parameters(), {});
      load_optimizer_state(opt, ck.file, "fuzz.safetensors");
    }
    return true;
  } catch (const SafetensorsError&) {
    return false;
  }
}

// The TSV reader and everything downstream of it that sees raw text: tokenizers (word and
// char), vocabularies, encoding, batching. Returns the number of pairs read (0: rejected).
inline size_t tsv_input(std::string_view text) {
  using namespace tg::nn;
  using namespace tg::io;
  size_t pairs_read = 0;
  for (const bool skip : {false, true}) {
    try {
      const ParallelText t = parse_tsv(text, "fuzz.tsv", skip);
      if (t.src.size() != t.tgt.size() || t.src.size() != t.line.size() || t.size() == 0) __builtin_trap();
      if (!skip) pairs_read = t.size();
      for (const TokenizerKind kind : {TokenizerKind::word, TokenizerKind::character}) {
        std::vector<std::vector<std::string>> src, tgt;
        for (size_t i = 0; i < t.size(); ++i) {
          src.push_back(tokenize(t.src[i], kind));
          tgt.push_back(tokenize(t.tgt[i], kind));
          // Every pair that was accepted has something on both sides.
          if (src.back().empty() || tgt.back().empty()) __builtin_trap();
          (void)detokenize(src.back(), kind);
        }
        const Vocab sv = Vocab::build(src), tv = Vocab::build(tgt, 1, 16);
        const std::vector<EncodedPair> pairs =
            encode_pairs(t, VocabTokenizer(kind, sv), VocabTokenizer(kind, tv));
        for (const auto& idx : make_batches(pairs, 3, nullptr, true)) (void)make_batch(pairs, idx);
        (void)Vocab::from_tokens(sv.tokens());
      }
    } catch (const DataError&) {
    }
  }
  return pairs_read;
}

// SentencePiece model bytes, as a checkpoint's "spm" metadata holds them (base64-decoded):
// SpmTokenizer::from_model, then an encode and decode of text with every kind of character and the
// labels of the ids. In the lm layout a text encoded without <unk> decodes to itself. Returns true
// when the bytes loaded as a model.
inline bool spm_input(std::string_view bytes) {
  using namespace tg::nn;
  try {
    const SpmTokenizer tok = SpmTokenizer::from_model(std::string(bytes), "fuzz.model");
    static const std::string text =
        std::string("The caf\u00e9 \u6771\u4eac \U0001F600  x\n\ty \xFF\xC3 z \u2581 ") +
        std::string(1, '\0') + " end";
    UnknownTokens unknown;
    const std::vector<int32_t> ids = tok.encode(text, &unknown);
    if (tok.layout() == SpmLayout::lm && unknown.count == 0 && tok.decode(ids) != text) __builtin_trap();
    (void)tok.decode(ids);
    for (const int32_t id : ids) (void)tok.label(id);
    for (int32_t id = 0; id < tok.vocab_size() && id < 2000; ++id) (void)tok.label(id);
    return true;
  } catch (const io::DataError&) {
    return false;
  }
}

// What a loaded GPT-2 tokenizer must do with any text: pieces that tile it, ids in range, labels,
// decode giving the text back (where no byte lacks a token, no added token's text occurs and no
// prefix space is added), and the same ids after its files' text and its metadata are read back.
inline void gpt2_bpe_check(const tg::nn::Gpt2BpeTokenizer& tok, std::string_view text) {
  using namespace tg::nn;
  std::string tiled;
  for (const std::string_view p : gpt2_pretokenize(text)) {
    if (p.empty()) __builtin_trap();
    tiled += p;
  }
  if (tiled != text) __builtin_trap();
  UnknownTokens unknown;
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, &unknown);
  } catch (const tg::io::DataError&) {
    // Only for a byte without a token, in a vocabulary without unk_token.
    if (!tok.options().unk_token.empty()) __builtin_trap();
    for (const char c : text)
      if (tok.token_id(gpt2_bytes_to_unicode(std::string_view(&c, 1))) < 0) return;
    __builtin_trap();
  }
  for (const int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    (void)tok.label(id);
  }
  bool literal = false;
  for (const auto& a : tok.added_tokens()) literal |= text.find(a.content) != std::string_view::npos;
  if (unknown.count == 0 && !literal && !tok.options().add_prefix_space && tok.options().unk_token.empty() &&
      tok.decode(ids) != text)
    __builtin_trap();
  if (Gpt2BpeTokenizer::from_strings(tok.vocab_json(), tok.merges_txt()).vocab_size() != tok.vocab_size())
    __builtin_trap();
  tg::io::Metadata md;
  tok.save(md, "p_");
  if (Gpt2BpeTokenizer::load(md, "p_", "fuzz.safetensors").encode(text) != ids) __builtin_trap();
}

// Returns 1 when A + B loaded as vocab.json + merges.txt, 2 when A loaded as tokenizer.json (or 3).
inline int gpt2_bpe_input(std::string_view input) {
  using namespace tg::nn;
  const size_t a_end = std::min(input.find('\0'), input.size());
  const size_t b_end =
      a_end < input.size() ? std::min(input.find('\0', a_end + 1), input.size()) : input.size();
  const std::string_view a = input.substr(0, a_end);
  const std::string_view b =
      a_end < input.size() ? input.substr(a_end + 1, b_end - a_end - 1) : std::string_view();
  const std::string_view text = b_end < input.size() ? input.substr(b_end + 1) : std::string_view();
  // Only loading may throw DataError: the checks after it must pass on whatever loaded.
  std::optional<Gpt2BpeTokenizer> files, spec;
  try {
    files.emplace(Gpt2BpeTokenizer::from_strings(a, b, "fuzz/vocab.json", "fuzz/merges.txt"));
  } catch (const tg::io::DataError&) {
  }
  try {
    spec.emplace(Gpt2BpeTokenizer::from_tokenizer_json_string(a, "fuzz/tokenizer.json"));
  } catch (const tg::io::DataError&) {
  }
  // tokenizer.json as an exported char model's (nn/family/hf_gpt2.hpp): every id decodes to one
  // character that encodes back to it.
  std::optional<CharTokenizer> chars;
  try {
    chars = char_tokenizer_from_json(a, "fuzz/tokenizer.json");
  } catch (const tg::io::DataError&) {
  }
  if (chars)
    for (int32_t id = 0; id < chars->vocab_size(); ++id) {
      const std::string c = chars->decode(std::span<const int32_t>(&id, 1));
      if (chars->encode(c) != std::vector<int32_t>{id}) std::abort();
    }
  if (files) gpt2_bpe_check(*files, text);
  if (spec) gpt2_bpe_check(*spec, text);
  return (files ? 1 : 0) | (spec ? 2 : 0) | (chars ? 4 : 0);
}

}  // namespace tg::fuzz
