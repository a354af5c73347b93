// The SentencePiece tokenizer (nn/tokenizers/spm.*): models trained here on the licence texts of
// /usr/share/common-licenses (every Debian system has them), both types (BPE, unigram) and both
// layouts (translate, lm); round trips on text with unseen words, capitals, punctuation, digits,
// accents, CJK, emoji and whitespace runs; the cut-and-share encoder against the library called on
// each line; ids against the Python package `sentencepiece` on the same model bytes (its own meson
// test, nn-spm-python: SKIPPED without python3-sentencepiece); metadata round trip; errors, and
// mutated model bytes.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <omp.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/base64.hpp"
#include "io/safetensors.hpp"
#include "io/text.hpp"
#include "nn/gpt_text.hpp"
#include "nn/tokenizers/spm.hpp"
#include "tests/fuzz/fuzz_inputs.hpp"
#include "tests/python.hpp"
#include "tests/skip.hpp"
#include "tests/test_util.hpp"

namespace {

namespace fs = std::filesystem;
using tg::io::DataError;
using tg::nn::SpmLayout;
using tg::nn::SpmOptions;
using tg::nn::SpmTokenizer;
using tg::nn::SpmType;
using tg::nn::UnknownTokens;
using tg::testing::error_of;

// The README's licence text: every file under /usr/share/common-licenses, in path order.
const std::string& licences() {
  static const std::string text = [] {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator("/usr/share/common-licenses"))
      if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());  // as `find -type f`
    std::sort(files.begin(), files.end());
    std::string all;
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      all += std::string(std::istreambuf_iterator<char>(in), {});
    }
    return all;
  }();
  return text;
}

// Lines the models never saw: unseen words, capitals, punctuation, digits, accents, CJK, emoji,
// whitespace runs, tabs; words whose pieces tie ("www", "....", "aaaa"), at the start of a line and
// after other words.
const std::vector<std::string> kCorpus = {
    "The QUICK brown fox jumps over the lazy dog.",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich; naïve café, résumé, São Paulo.",
    "数字 12345 和 67890：東京は日本の首都です。中文测试，全角标点！",
    "Emoji: 😀👍🏽 🇫🇷 ❤️‍🔥 and math ∑∫√ ≠ ≤ ≥ ∞",
    "   leading spaces, trailing spaces   ",
    "tabs\there\t\tand  double  spaces     five      six",
    "unseen-wörds: xylophonequux, Qwertzuiop, ZZZZ 3.14159e-10 0x1F $100 (a) [b] {c} <d> \"q\" 'single'",
    "Ελληνικά κείμενο, русский текст, עברית, العربية, हिन्दी, ภาษาไทย",
    "www.gnu.org/licenses/ www www. wwww ........ .... ---- ==== ____ aaaa aaaaaaa eeeeee ssss",
    "see https://www.gnu.org/licenses/ and http://www.apache.org/licenses/LICENSE-2.0 .......... ",
    "ALL CAPS LICENSE TEXT, THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND",
    "\u3000ideographic space, no-break\u00a0space, zero\u200bwidth, U+2585 \u2585 block",
    "x",
    "",
};

// Bytes only the lm layout keeps exactly: NUL, invalid UTF-8, SentencePiece's own space mark U+2581,
// CR LF, blank lines.
const std::vector<std::string> kRaw = {
    std::string("a\0b \0 \0", 7),
    "bad \xFF\xFE utf-8 \xC3 \xE2\x82 \xF0\x9F\x98 overlong \xC0\xAF surrogate \xED\xA0\x80 end",
    "the mark \u2581 itself, \u2581\u2581 twice, a\u2581b",
    "windows\r\nline\r\n\n\n\nafter blank lines\n",
    "\n",
    "   \n\t\n",
};

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < s.size();) {
    const size_t end = std::min(s.find('\n', start), s.size());
    lines.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

const char* name(SpmType t) {
  return t == SpmType::bpe ? "bpe" : "unigram";
}
const char* name(SpmLayout l) {
  return l == SpmLayout::lm ? "lm" : "translate";
}

// One model per type and layout, vocabulary 1000, trained once per process on the licences (lm: the
// whole text; translate: its non-empty lines as sentences).
const SpmTokenizer& trained(SpmType type, SpmLayout layout) {
  static std::map<std::pair<SpmType, SpmLayout>, SpmTokenizer> cache;
  const auto key = std::make_pair(type, layout);
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::vector<std::string_view> texts;
    if (layout == SpmLayout::lm) {
      texts.push_back(licences());
    } else {
      for (const auto l : split_lines(licences()))
        if (!tg::io::trim(l).empty()) texts.push_back(l);
    }
    it = cache.try_emplace(key, SpmTokenizer::train(texts, {type, 1000, layout, 0})).first;
  }
  return it->second;
}

constexpr SpmType kTypes[] = {SpmType::bpe, SpmType::unigram};

// The library itself on the same bytes.
std::unique_ptr<sentencepiece::SentencePieceProcessor> library(const SpmTokenizer& tok) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  REQUIRE(sp->LoadFromSerializedProto(tok.model_bytes()).ok());
  return sp;
}

// protobuf wire format, to build model bytes the tests need.
std::string varint(uint64_t v) {
  std::string s;
  for (; v >= 0x80; v >>= 7) s += static_cast<char>((v & 0x7F) | 0x80);
  return s + static_cast<char>(v);
}
std::string field(uint32_t number, std::string_view bytes) {
  return varint(uint64_t{number} << 3 | 2) + varint(bytes.size()) + std::string(bytes);
}
std::string field_varint(uint32_t number, uint64_t v) {
  return varint(uint64_t{number} << 3) + varint(v);
}

}  // namespace

TEST_CASE("spm.lm.round_trip_is_exact") {
  for (const SpmType type : kTypes) {
    const SpmTokenizer& tok = trained(type, SpmLayout::lm);
    INFO(name(type));
    CHECK(tok.kind() == "spm");
    CHECK(tok.vocab_size() == 1000);
    CHECK(tok.type() == type);
    CHECK(tok.layout() == SpmLayout::lm);
    const auto sp = tok.specials();
    CHECK(sp.unk == 0);
    CHECK(sp.pad == -1);
    CHECK(sp.bos == -1);
    CHECK(sp.eos == -1);
    std::vector<std::string> all = kCorpus;
    all.insert(all.end(), kRaw.begin(), kRaw.end());
    for (const std::string& s : all) {
      INFO(s);
      UnknownTokens unknown;
      const auto ids = tok.encode(s, &unknown);
      CHECK(tok.decode(ids) == s);
      CHECK(tok.byte_count(ids) == static_cast<int64_t>(s.size()));
      CHECK(unknown.count == 0);
      CHECK(std::count(ids.begin(), ids.end(), 0) == 0);
    }
    const std::string text = joined(all) + licences();
    UnknownTokens unknown;
    const auto ids = tok.encode(text, &unknown);
    CHECK(tok.decode(ids) == text);
    CHECK(unknown.count == 0);
    // Subwords: the licences in far fewer tokens than bytes.
    const auto lic = tok.encode(licences());
    MESSAGE(fmt::format("{} lm, vocab 1000: the licences ({} bytes) in {} tokens ({:.2f} bytes per token)",
                        name(type), licences().size(), lic.size(),
                        static_cast<double>(licences().size()) / static_cast<double>(lic.size())));
    CHECK(lic.size() * 5 < licences().size() * 2);  // more than 2.5 bytes per token
  }
}

// Streamed one token at a time (lm sample), the text is the decode of all of them: in the translate
// layout a first word's space is dropped (decoding each piece alone would drop every word's), and
// characters the pieces do not cover come as several byte pieces.
TEST_CASE("spm.text_stream_is_the_decoded_text") {
  for (const SpmType type : kTypes)
    for (const SpmLayout layout : {SpmLayout::lm, SpmLayout::translate}) {
      const SpmTokenizer& tok = trained(type, layout);
      INFO(name(type), layout == SpmLayout::lm ? " lm" : " translate");
      const std::string text = joined(kCorpus) + " \u00e9t\u00e9 \u4e2d\u6587 " + licences().substr(0, 2000);
      const auto ids = tok.encode(text);
      REQUIRE(ids.size() > 3 * tg::nn::TextStream::kWindow);
      tg::nn::TextStream stream(tok);
      std::string streamed;
      for (const int32_t id : ids) streamed += stream.next(id);
      CHECK(streamed == tok.decode(ids));
    }
}

TEST_CASE("spm.lm.unseen_characters_become_bytes") {
  for (const SpmType type : kTypes) {
    const SpmTokenizer& tok = trained(type, SpmLayout::lm);
    INFO(name(type));
    const auto ids = tok.encode("😀");
    REQUIRE(ids.size() == 4);
    CHECK(tok.label(ids[0]) == "\\xF0");
    CHECK(tok.label(ids[3]) == "\\x80");
    // A newline is a piece of its own or ends one; runs of spaces are pieces of spaces.
    const auto nl = tok.encode("\n");
    REQUIRE(nl.size() == 1);
    CHECK(tok.label(nl[0]) == "\\n");
    const auto spaces = tok.encode("    ");
    REQUIRE(spaces.size() == 1);
    CHECK(tok.label(spaces[0]) == "\u2423\u2423\u2423\u2423");
    CHECK(tok.decode(spaces) == "    ");
    CHECK_THROWS_AS(tok.label(1000), std::out_of_range);
    CHECK_THROWS_AS(tok.decode(std::vector<int32_t>{-1}), std::out_of_range);
  }
}

TEST_CASE("spm.translate.layout") {
  for (const SpmType type : kTypes) {
    const SpmTokenizer& tok = trained(type, SpmLayout::translate);
    INFO(name(type));
    CHECK(tok.layout() == SpmLayout::translate);
    const auto sp = tok.specials();
    CHECK(sp.pad == 0);
    CHECK(sp.bos == 1);
    CHECK(sp.eos == 2);
    CHECK(sp.unk == 3);
    CHECK(tok.label(0) == "<pad>");
    CHECK(tok.label(1) == "<bos>");
    CHECK(tok.label(2) == "<eos>");
    CHECK(tok.label(3) == "<unk>");
    // Whitespace as the word tokenizer sees it: runs of spaces as one, the ends trimmed; a tab is
    // a character.
    CHECK(tok.decode(tok.encode("  The   big dog\tsees  ")) == "The big dog\tsees");
    CHECK(tok.encode("   ").empty());
    CHECK(tok.decode(tok.encode("the")) == "the");
    CHECK(tok.label(tok.encode("the")[0]).rfind("\u2423", 0) == 0);  // "␣the" or "␣" first
    // Specials never come out of encode, and every character of the corpus has a piece or bytes.
    const auto lib = library(tok);
    for (const std::string& s : kCorpus) {
      INFO(s);
      UnknownTokens unknown;
      const auto ids = tok.encode(s, &unknown);
      CHECK(unknown.count == 0);
      CHECK(std::all_of(ids.begin(), ids.end(), [](int32_t id) { return id >= 4; }));
      std::string normalised;  // words joined by one space
      std::istringstream words(s);
      for (std::string w; std::getline(words, w, ' ');)
        if (!w.empty()) normalised += (normalised.empty() ? "" : " ") + w;
      CHECK(tok.decode(ids) == normalised);
      // decode is the library's (for ids whose bytes are valid UTF-8), and so are bos and eos.
      std::vector<int> with = {1};
      with.insert(with.end(), ids.begin(), ids.end());
      with.push_back(2);
      CHECK(tok.decode(std::vector<int32_t>(with.begin(), with.end())) == lib->DecodeIds(with));
    }
    std::vector<int32_t> unk = {3};
    CHECK(tok.decode(unk) == "<unk>");
  }
}

TEST_CASE("spm.decode.matches_the_library") {
  for (const SpmType type : kTypes)
    for (const SpmLayout layout : {SpmLayout::lm, SpmLayout::translate}) {
      const SpmTokenizer& tok = trained(type, layout);
      INFO(name(type), " ", name(layout));
      const auto lib = library(tok);
      const std::string text = licences() + joined(kCorpus);
      const auto lines = split_lines(text);
      const auto batch = tok.encode_batch(lines);
      int64_t differ = 0;
      for (const auto& ids : batch)
        if (tok.decode(ids) != lib->DecodeIds(std::vector<int>(ids.begin(), ids.end()))) {
          if (differ++ == 0) MESSAGE("first line decoded differently: ", tok.decode(ids));
        }
      CHECK(differ == 0);
      CHECK(batch.size() == lines.size());
    }
}

TEST_CASE("spm.encode.cuts_match_the_library") {
  // encode() cuts the text and encodes each distinct cut once; encode_by_library() calls the library
  // on each line (lm) or text (translate). They must agree everywhere: for BPE by construction, for
  // unigram thanks to the check that sends lines with near-tied words to the library whole. The
  // check has work to do here: the library's own ids for a line differ from its ids for the line's
  // words put together on some lines (counted below).
  for (const SpmType type : kTypes) {
    const SpmTokenizer& tok = trained(type, SpmLayout::lm);
    INFO(name(type), " lm");
    std::string text = licences() + joined(kCorpus);
    for (const auto& s : kRaw) text += s;
    const auto reference = tok.encode_by_library(text);
    CHECK(tok.encode(text) == reference);
    const int threads = omp_get_max_threads();  // 1 in this suite; the segments in parallel too
    omp_set_num_threads(2);
    CHECK(tok.encode(text) == reference);
    omp_set_num_threads(threads);
    const auto lib = library(tok);
    int64_t lines = 0, differ = 0;
    for (const auto line : split_lines(text)) {
      std::vector<int> whole, words, w;
      if (!lib->Encode(absl::string_view(line.data(), line.size()), &whole).ok()) continue;
      size_t start = 0;
      for (size_t i = 1; i <= line.size(); ++i)
        if (i == line.size() || (line[i] == ' ' && line[i - 1] != ' ')) {
          REQUIRE(lib->Encode(absl::string_view(line.data() + start, i - start), &w).ok());
          words.insert(words.end(), w.begin(), w.end());
          start = i;
        }
      ++lines;
      differ += whole != words;
    }
    MESSAGE(
        fmt::format("{} lm: the library's ids for a line differ from its ids for the line's words put "
                    "together on {} of {} lines",
                    name(type), differ, lines));
    if (type == SpmType::bpe) CHECK(differ == 0);
    if (type == SpmType::unigram) CHECK(differ > 0);
  }
  for (const SpmType type : kTypes) {
    const SpmTokenizer& tok = trained(type, SpmLayout::translate);
    INFO(name(type), " translate");
    std::vector<std::string_view> lines = split_lines(licences());
    for (const auto& s : kCorpus) lines.push_back(s);
    const auto batch = tok.encode_batch(lines);
    REQUIRE(batch.size() == lines.size());
    int64_t same = 0;
    for (size_t i = 0; i < lines.size(); ++i) same += batch[i] == tok.encode_by_library(lines[i]);
    CHECK(same == static_cast<int64_t>(lines.size()));
    for (const auto& s : kCorpus) CHECK(tok.encode(s) == tok.encode_by_library(s));
  }
}

TEST_CASE("spm.encode.matches_python") {
  if (!tg::testing::python_can_import("sentencepiece"))
    TG_SKIP(tg::testing::python_lacks("sentencepiece", "python3-sentencepiece"));
  const fs::path dir = fs::temp_directory_path() / fmt::format("tapegrad_spm_parity_{}", ::getpid());
  fs::create_directories(dir);
  // The licences and the corpus (not kRaw: text the library alters, which the lm layout keeps
  // out of its reach on purpose).
  const std::string text = licences() + joined(kCorpus);
  { std::ofstream(dir / "text.txt", std::ios::binary) << text; }
  for (const SpmType type : kTypes)
    for (const SpmLayout layout : {SpmLayout::lm, SpmLayout::translate}) {
      const SpmTokenizer& tok = trained(type, layout);
      INFO(name(type), " ", name(layout));
      { std::ofstream(dir / "model", std::ios::binary) << tok.model_bytes(); }
      const std::string cmd = fmt::format(
          "{} {}/tests/nn/spm_parity.py {} {} {} {}", tg::testing::python(), TG_SOURCE_DIR,
          (dir / "model").string(), (dir / "text.txt").string(), name(layout), (dir / "ids.txt").string());
      REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "failed: " << cmd);
      std::ifstream in(dir / "ids.txt");
      std::string version;
      std::getline(in, version);
      std::vector<std::vector<int32_t>> python;
      for (std::string l; std::getline(in, l);) {
        std::istringstream is(l);
        python.emplace_back(std::istream_iterator<int32_t>(is), std::istream_iterator<int32_t>());
      }
      std::vector<std::string_view> pieces;  // what Python encoded, one by one
      if (layout == SpmLayout::lm) {
        for (size_t start = 0; start < text.size();) {
          const size_t end = std::min(text.find('\n', start), text.size() - 1) + 1;
          pieces.emplace_back(std::string_view(text).substr(start, end - start));
          start = end;
        }
      } else {
        pieces = split_lines(text);
      }
      REQUIRE(python.size() == pieces.size());
      const auto batch = tok.encode_batch(pieces);
      int64_t same = 0;
      std::vector<int32_t> all;
      for (size_t i = 0; i < pieces.size(); ++i) {
        const bool ok = tok.encode(pieces[i]) == python[i] && batch[i] == python[i];
        if (!ok) MESSAGE("differs: ", std::string(pieces[i]));
        same += ok;
        all.insert(all.end(), python[i].begin(), python[i].end());
      }
      MESSAGE(fmt::format("{} {}: sentencepiece {} (Python): the same ids on {} of {} lines", name(type),
                          name(layout), version, same, pieces.size()));
      CHECK(same == static_cast<int64_t>(pieces.size()));
      if (layout == SpmLayout::lm) CHECK(tok.encode(text) == all);  // the whole text at once
    }
  fs::remove_all(dir);
}

TEST_CASE("spm.save_load.metadata") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("tapegrad_spm_save_{}", ::getpid());
  fs::create_directories(dir);
  const std::string path = (dir / "ck.safetensors").string();
  const SpmTokenizer& src = trained(SpmType::unigram, SpmLayout::translate);
  const SpmTokenizer& tgt = trained(SpmType::bpe, SpmLayout::translate);
  const SpmTokenizer& lm = trained(SpmType::bpe, SpmLayout::lm);
  tg::io::Metadata md;
  src.save(md, "src_");
  tgt.save(md, "tgt_");
  lm.save(md, "");
  CHECK(md.size() == 3);
  CHECK(tg::io::base64_decode(md.at("src_spm")) == src.model_bytes());
  tg::io::write_safetensors(path, {}, md);
  const tg::io::Metadata back = tg::io::read_safetensors(path).metadata;
  const std::string text = joined(kCorpus) + licences().substr(0, 20000);
  for (const auto& [prefix, tok] :
       std::vector<std::pair<std::string, const SpmTokenizer*>>{{"src_", &src}, {"tgt_", &tgt}, {"", &lm}}) {
    INFO(prefix);
    const SpmTokenizer loaded = SpmTokenizer::load(back, prefix, path);
    CHECK(loaded.model_bytes() == tok->model_bytes());
    CHECK(loaded.encode(text) == tok->encode(text));
    CHECK(loaded.layout() == tok->layout());
    CHECK(loaded.type() == tok->type());
  }
  fs::remove_all(dir);
}

TEST_CASE("spm.errors.bad_model_bytes") {
  const std::string where = "ck.safetensors: metadata \"src_spm\"";
  const auto refused = [&](const std::string& bytes) {
    std::string what;
    try {
      SpmTokenizer::from_model(bytes, where);
    } catch (const DataError& e) {
      what = e.what();
    }
    INFO(what);
    CHECK(what.rfind(where + ": not a usable SentencePiece model: ", 0) == 0);
    return what;
  };
  refused("this is not a model");
  refused("");
  refused(std::string("\x0a\xff\xff\xff\xff\x0f", 6));  // a length past the end
  const std::string good = trained(SpmType::unigram, SpmLayout::translate).model_bytes();
  refused(good.substr(0, good.size() / 2));
  // What tapegrad's models never have, and the library cannot be trusted with.
  CHECK(refused(good + field(3, field(2, "\x10\0\0\0 garbage trie"))).find("precompiled_charsmap") !=
        std::string::npos);
  CHECK(refused(good + field(5, field(2, "xyz"))).find("precompiled_charsmap") != std::string::npos);
  CHECK(refused(good + field(2, field_varint(3, 3))).find("model type 3") != std::string::npos);
  CHECK(refused(good + field(1, field(1, std::string("a\0b", 3)))).find("NUL") != std::string::npos);
  CHECK(refused(good + field(1, field(1, "\xC3"))).find("invalid UTF-8") != std::string::npos);
  CHECK(refused(good + field(3, field_varint(4, 0))).find("whitespace settings") != std::string::npos);
  CHECK(refused(good + field(1, field(1, "e"))).find("e is already defined") !=
        std::string::npos);  // the library
  // The same model loads; an unknown enum value leaves the field as it was, as protobuf does.
  CHECK_NOTHROW(SpmTokenizer::from_model(good, where));
  CHECK(SpmTokenizer::from_model(good + field(2, field_varint(3, 9)), where).type() == SpmType::unigram);

  // Through metadata: a missing key, bad base64, a damaged model; a checkpoint error
  // (SafetensorsError, as for every tokenizer's load) naming the file and the key.
  tg::io::Metadata md{{"src_spm", "not base64!"}};
  CHECK(
      error_of([&] { SpmTokenizer::load(md, "tgt_", "ck.safetensors"); }) ==
      "checkpoint ck.safetensors: __metadata__ has no \"tgt_spm\" (an spm tokenizer keeps its SentencePiece "
      "model there)");
  CHECK(error_of([&] {
          SpmTokenizer::load(md, "src_", "ck.safetensors");
        }).rfind("checkpoint ck.safetensors: __metadata__ \"src_spm\": base64: length 11", 0) == 0);
  md["src_spm"] = tg::io::base64_encode("garbage");
  CHECK(error_of([&] { SpmTokenizer::load(md, "src_", "ck.safetensors"); })
            .rfind("checkpoint ck.safetensors: __metadata__ \"src_spm\": the model: not a usable "
                   "SentencePiece model",
                   0) == 0);
  CHECK_THROWS_AS(SpmTokenizer::load(md, "src_", "ck.safetensors"), tg::io::SafetensorsError);
}

TEST_CASE("spm.from_model.mutated_bytes_never_crash") {
  // A small model's bytes, mutated: each either loads, encodes and decodes (in the lm layout back
  // to the text), or is refused with DataError: tg::fuzz::spm_input, what the libFuzzer target
  // tests/fuzz/fuzz_spm.cpp runs. Anything else fails the test; under ASan a memory error stops it.
  const std::string text = licences().substr(0, 12000);
  const std::string_view texts[] = {text};
  const std::string good =
      SpmTokenizer::train(texts, {SpmType::unigram, 400, SpmLayout::lm, 1}).model_bytes();
  const std::string good_bpe =
      SpmTokenizer::train(texts, {SpmType::bpe, 400, SpmLayout::translate, 1}).model_bytes();
  std::mt19937_64 rng(12345);
  const auto below = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  int loaded = 0, refused = 0;
  const int runs = 3000;
  for (int run = 0; run < runs; ++run) {
    std::string m = run % 2 ? good : good_bpe;
    const int edits = 1 + static_cast<int>(below(4));
    for (int e = 0; e < edits; ++e) {
      switch (below(6)) {
        case 0:
          m[below(m.size())] ^= static_cast<char>(1 << below(8));
          break;
        case 1:
          m[below(m.size())] = static_cast<char>(rng());
          break;
        case 2:
          m.resize(below(m.size()));
          break;
        case 3:
          m.insert(below(m.size() + 1), std::string(1 + below(8), static_cast<char>(rng())));
          break;
        case 4: {  // a copy of a stretch elsewhere (a piece or a spec twice)
          const size_t at = below(m.size()), n = below(std::min<size_t>(64, m.size() - at));
          m.insert(below(m.size() + 1), m.substr(at, n));
          break;
        }
        default:
          m += field(1 + static_cast<uint32_t>(below(5)), m.substr(below(m.size()), below(40)));
          break;
      }
      if (m.empty()) break;
    }
    if (tg::fuzz::spm_input(m))
      ++loaded;
    else
      ++refused;
  }
  MESSAGE(fmt::format("{} mutated models: {} loaded, {} refused", runs, loaded, refused));
  CHECK(loaded + refused == runs);
  CHECK(refused > 0);
}

TEST_CASE("spm.errors.training") {
  const auto fails = [](std::vector<std::string_view> texts, SpmOptions o) {
    std::string what;
    try {
      SpmTokenizer::train(texts, o);
    } catch (const DataError& e) {
      what = e.what();
    }
    INFO(what);
    CHECK(what.rfind("spm training", 0) == 0);
    return what;
  };
  for (const SpmType type : kTypes)
    for (const SpmLayout layout : {SpmLayout::lm, SpmLayout::translate}) {
      INFO(name(type), " ", name(layout));
      // Nothing to learn from. (A unigram model on text of spaces alone aborts in the library.)
      for (const auto& empty :
           std::vector<std::vector<std::string_view>>{{}, {""}, {"   \n  \n"}, {"\t \t\n\n"}})
        CHECK(fails(empty, {type, 1000, layout, 1}).find("no text to learn from") != std::string::npos);
      // More than the text can fill: the library's message says how much it can.
      CHECK(fails({"hello world\n"}, {type, 2000, layout, 1}).find("Vocabulary size too high (2000)") !=
            std::string::npos);
      // Fewer than its characters, the byte pieces and the specials need.
      CHECK(fails({"hello world\n"}, {type, 100, layout, 1}).find("--vocab-size 100 is too small") !=
            std::string::npos);
    }
  // The smallest vocabulary the check allows trains (8 characters + the space mark + specials + bytes).
  const std::string_view hello[] = {"hello world\n"};
  CHECK_NOTHROW(SpmTokenizer::train(hello, {SpmType::unigram, 8 + 1 + 1 + 256, SpmLayout::lm, 1}));
  CHECK_NOTHROW(SpmTokenizer::train(hello, {SpmType::bpe, 7 + 1 + 4 + 256, SpmLayout::translate, 1}));
  // Training text is cut into sentences of at most 4 KB: the library skips longer ones (here the
  // only line with an "\u03a9"), and its unigram trainer aborted on a NaN likelihood after 45 s on a
  // 500 KB word (the licences without spaces and line ends; measured with the library directly, too
  // slow for this suite).
  std::string line = licences().substr(0, 20000);
  std::replace(line.begin(), line.end(), '\n', ' ');
  for (int i = 0; i < 500; ++i) line += i % 3 ? "\u03a9mega " : "abc\u03a9\u03a9 ";
  line = "a short line\n" + line + "\n";
  std::string word = licences().substr(0, 30000);
  std::erase_if(word, [](char c) { return c == ' ' || c == '\n'; });
  for (const std::string& t : {line, word})
    for (const SpmType type : kTypes) {
      const std::string_view texts[] = {t};
      const SpmTokenizer tok = SpmTokenizer::train(texts, {type, 400, SpmLayout::lm, 0});
      CHECK(tok.decode(tok.encode(t)) == t);
      if (t == line) CHECK(tok.encode("\u03a9").size() == 1);  // a piece, not two bytes
    }
}

TEST_CASE("spm.unknown.reported_without_byte_fallback") {
  // tapegrad's models have byte fallback and never produce <unk> (above). A model without it (made
  // here with the library directly) does, and encode reports each <unk> with its text.
  struct Lines : sentencepiece::SentenceIterator {
    std::vector<std::string> v;
    size_t i = 0;
    bool done() const override { return i >= v.size(); }
    void Next() override { ++i; }
    const std::string& value() const override { return v[i]; }
    sentencepiece::util::Status status() const override { return {}; }
  } lines;
  const std::string text = licences().substr(0, 30000);
  for (const auto l : split_lines(text)) lines.v.emplace_back(std::string(l) + "\n");
  for (const char* type : {"bpe", "unigram"}) {
    INFO(type);
    lines.i = 0;
    std::string model;
    REQUIRE(sentencepiece::SentencePieceTrainer::Train({{"model_type", type},
                                                        {"vocab_size", "300"},
                                                        {"normalization_rule_name", "identity"},
                                                        {"add_dummy_prefix", "false"},
                                                        {"remove_extra_whitespaces", "false"},
                                                        {"character_coverage", "1.0"},
                                                        {"minloglevel", "2"}},
                                                       &lines, &model)
                .ok());
    const SpmTokenizer tok = SpmTokenizer::from_model(model, "test");
    UnknownTokens unknown;
    const std::string s = "caf\u00e9 \u6771\u4eac \U0001F600 ok";
    const auto ids = tok.encode(s, &unknown);
    CHECK(unknown.count == std::count(ids.begin(), ids.end(), tok.specials().unk));
    CHECK(unknown.count >= 3);
    REQUIRE(!unknown.first.empty());
    CHECK(unknown.first.front() == "\u00e9");
    CHECK(tok.decode(ids).find("<unk>") != std::string::npos);
    CHECK(tok.encode(s) == tok.encode_by_library(s));
  }
}
