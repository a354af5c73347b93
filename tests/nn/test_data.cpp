#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

#include "nn/data.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::nn;
using namespace tg::io;

namespace {

// The DataError message for reading this text as data.tsv ("" if it reads).
std::string read_error(const std::string& text, bool skip = false) {
  try {
    read_tsv(testing::write_bytes("data.tsv", text), skip);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

#define CHECK_DATA_ERROR(text, where, problem)                              \
  do {                                                                      \
    const std::string msg_ = read_error(text);                              \
    INFO("message: ", msg_);                                                \
    CHECK(msg_.find(std::string("data.tsv") + where) != std::string::npos); \
    CHECK(msg_.find(problem) != std::string::npos);                         \
  } while (0)

}  // namespace

TEST_CASE("data.tsv.reads_pairs_with_bom_crlf_and_blank_lines") {
  const std::string path = testing::write_bytes("ok.tsv",
                                                "\xEF\xBB\xBF"
                                                "a b\tx y\r\n\r\n   \n c \t z \r\nd\te");  // no final newline
  const ParallelText t = read_tsv(path);
  REQUIRE(t.size() == 3);
  CHECK(t.src == std::vector<std::string>{"a b", "c", "d"});
  CHECK(t.tgt == std::vector<std::string>{"x y", "z", "e"});
  CHECK(t.line == std::vector<int64_t>{1, 4, 5});
  CHECK(t.skipped == 0);
}

TEST_CASE("data.tsv.bad_lines_name_file_and_line") {
  CHECK_DATA_ERROR("a\tb\nno tab here\n", ":2:", "no tab");
  CHECK_DATA_ERROR("a\tb\n\n\t x\n", ":3:", "empty source");
  CHECK_DATA_ERROR("a\t  \r\n", ":1:", "empty target");
  CHECK_DATA_ERROR("a\tb\tc\n", ":1:", "more than one tab");
  CHECK_DATA_ERROR("ok\tok\nbad \xC3\x28\tx\n", ":2:", "invalid UTF-8 at byte 5");
  CHECK_DATA_ERROR("ok\tok\n\xED\xA0\x80\tx\n", ":2:", "invalid UTF-8");  // a surrogate
  CHECK_DATA_ERROR("", ":", "no sentence pairs");
  CHECK_DATA_ERROR("\n\r\n  \n", ":", "no sentence pairs");
  CHECK_DATA_ERROR("\xEF\xBB\xBF", ":", "no sentence pairs");
}

TEST_CASE("data.tsv.skip_bad_lines_counts_them") {
  const ParallelText t = read_tsv(testing::write_bytes("skip.tsv", "a\tb\nbad\n\tx\nc\td\n\xff\tq\n"), true);
  CHECK(t.size() == 2);
  CHECK(t.skipped == 3);
  REQUIRE(t.problems.size() == 3);
  CHECK(t.problems[0].find("skip.tsv:2: no tab") != std::string::npos);
  CHECK(t.problems[1].find("skip.tsv:3: empty source") != std::string::npos);
  CHECK(t.problems[2].find("skip.tsv:5: invalid UTF-8") != std::string::npos);
  CHECK(t.line == std::vector<int64_t>{1, 4});
  // Only bad lines: still an error, which says how many were skipped.
  CHECK(read_error("x\ny\n", true).find("no valid sentence pairs (2 bad lines skipped") != std::string::npos);
}

TEST_CASE("data.tsv.very_long_lines") {
  std::string src, tgt;
  for (int i = 0; i < 200000; ++i) src.append("w").append(std::to_string(i % 97)).append(" ");
  tgt.assign(1 << 20, 'z');
  const ParallelText t = read_tsv(testing::write_bytes("long.tsv", "a\tb\n" + src + "\t" + tgt + "\n"));
  REQUIRE(t.size() == 2);
  CHECK(tokenize(t.src[1], TokenizerKind::word).size() == 200000);
  CHECK(t.tgt[1].size() == size_t{1} << 20);
}

TEST_CASE("data.tsv.missing_file_and_directory") {
  CHECK_THROWS_WITH_AS(read_tsv(testing::scratch("nope.tsv")), doctest::Contains("nope.tsv: cannot open"),
                       DataError);
  CHECK_THROWS_WITH_AS(read_tsv(testing::scratch_dir().string()), doctest::Contains("is a directory"),
                       DataError);
}

TEST_CASE("data.tokenize.word_and_char") {
  using V = std::vector<std::string>;
  CHECK(tokenize("  the  cat\tsat ", TokenizerKind::word) == V{"the", "cat", "sat"});
  CHECK(tokenize("é a  b", TokenizerKind::character) == V{"\xc3\xa9", " ", "a", " ", "b"});
  CHECK(tokenize("😀x", TokenizerKind::character) == V{"\xf0\x9f\x98\x80", "x"});
  CHECK(detokenize(tokenize(" a  bc ", TokenizerKind::character), TokenizerKind::character) == "a bc");
  CHECK(detokenize({"a", "bc"}, TokenizerKind::word) == "a bc");
  CHECK(parse_tokenizer("char") == TokenizerKind::character);
  CHECK_THROWS_WITH(parse_tokenizer("bpe"), doctest::Contains("unknown tokenizer 'bpe'"));
}

TEST_CASE("data.vocab.build_min_freq_max_size") {
  const std::vector<std::vector<std::string>> s = {{"b", "a", "c"}, {"a", "b", "a"}, {"d", "<pad>"}};
  const Vocab all = Vocab::build(s);
  // specials, then a(3), b(2), then c, d (1 each, byte order); "<pad>" in the text is the special.
  CHECK(all.tokens() == std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d"});
  CHECK(Vocab::build(s, 2).tokens().size() == 6);
  CHECK(Vocab::build(s, 1, 5).tokens().back() == "a");
  CHECK(all.id("zzz") == kUnk);
  CHECK(all.id("c") == 6);
  CHECK(all.encode({"a", "q"}) == std::vector<int32_t>{4, kUnk});
  const std::vector<int32_t> ids = {kBos, 4, 5, kEos, 6};
  CHECK(all.decode(ids) == std::vector<std::string>{"a", "b"});
  CHECK_THROWS_WITH(all.token(99), doctest::Contains("id 99 out of range"));
  CHECK_THROWS(Vocab::build(s, 0));
  CHECK_THROWS(Vocab::build(s, 1, 3));
}

TEST_CASE("data.vocab.from_tokens_validates") {
  const Vocab v = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "x"});
  CHECK(v.id("x") == 4);
  CHECK_THROWS_WITH_AS(Vocab::from_tokens({"<pad>", "<eos>"}), doctest::Contains("entry 1 must be <bos>"),
                       DataError);
  CHECK_THROWS_WITH_AS(Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "x", "x"}),
                       doctest::Contains("duplicate token \"x\""), DataError);
}

TEST_CASE("data.batch.shapes_and_padding") {
  const std::vector<EncodedPair> pairs = {{{5, 6, 7}, {8}}, {{9}, {10, 11, 12, 13}}};
  const std::vector<int64_t> idx = {0, 1};
  const Batch b = make_batch(pairs, idx);
  b.validate();
  CHECK(b.batch == 2);
  CHECK(b.src_len == 4);  // 3 tokens + <eos>
  CHECK(b.tgt_len == 5);  // 4 tokens + <eos> / <bos> + 4 tokens
  CHECK(b.src == std::vector<int32_t>{5, 6, 7, kEos, 9, kEos, kPad, kPad});
  CHECK(b.tgt_in == std::vector<int32_t>{kBos, 8, kPad, kPad, kPad, kBos, 10, 11, 12, 13});
  CHECK(b.labels == std::vector<int32_t>{8, kEos, kPad, kPad, kPad, 10, 11, 12, 13, kEos});
  CHECK(b.num_label_tokens() == 7);
  const KeyPadding m = padding_mask(b.src, b.batch, b.src_len);
  CHECK(m.mask == std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1, 1});
  int64_t len = 0;
  CHECK(pad_sources({{5, 6}, {7}}, len) == std::vector<int32_t>{5, 6, kEos, 7, kEos, kPad});
  CHECK(len == 3);
}

TEST_CASE("data.batch.bucketing_and_seeded_shuffle") {
  std::vector<EncodedPair> pairs;
  Generator lengths(5);
  for (int i = 0; i < 1000; ++i)
    pairs.push_back(
        {std::vector<int32_t>(1 + lengths.below(30), 4), std::vector<int32_t>(1 + lengths.below(30), 4)});

  Generator g1(42), g2(42), g3(43);
  const auto b1 = make_batches(pairs, 16, &g1), b2 = make_batches(pairs, 16, &g2),
             b3 = make_batches(pairs, 16, &g3);
  CHECK(b1 == b2);  // same seed, same batches
  CHECK(b1 != b3);
  CHECK(b1.size() == 63);
  std::multiset<int64_t> seen;
  int64_t padded = 0, tokens = 0;
  for (const auto& b : b1) {
    CHECK(b.size() <= 16);
    seen.insert(b.begin(), b.end());
    const Batch batch = make_batch(pairs, b);
    padded += batch.batch * batch.src_len;
    for (int64_t i : b) tokens += static_cast<int64_t>(pairs[static_cast<size_t>(i)].src.size()) + 1;
  }
  CHECK(seen.size() == 1000);
  CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 1000);  // every pair exactly once
  // Bucketing keeps padding low: random batches of lengths 1..30 would waste about half.
  CHECK(static_cast<double>(tokens) / static_cast<double>(padded) > 0.75);

  // No shuffle: file order; by length without rng: sorted.
  const auto in_order = make_batches(pairs, 100, nullptr, false);
  CHECK(in_order[0].front() == 0);
  CHECK(in_order[9].back() == 999);
  const auto sorted = make_batches(pairs, 1000, nullptr, true);
  for (size_t i = 1; i < 1000; ++i) {
    const auto& a = pairs[static_cast<size_t>(sorted[0][i - 1])];
    const auto& b = pairs[static_cast<size_t>(sorted[0][i])];
    CHECK(std::max(a.src.size(), a.tgt.size()) <= std::max(b.src.size(), b.tgt.size()));
  }
  CHECK_THROWS(make_batches(pairs, 0, nullptr));
}

TEST_CASE("data.encode_pairs.uses_vocab_and_unk") {
  const ParallelText t = parse_tsv("a b\tx\nb c\ty y\n", "mem.tsv");
  std::vector<std::vector<std::string>> s, g;
  s.push_back(tokenize(t.src[0], TokenizerKind::word));
  g.push_back(tokenize(t.tgt[1], TokenizerKind::word));
  const Vocab sv = Vocab::build(s), tv = Vocab::build(g);
  UnknownTokens unknown;
  const auto pairs = encode_pairs(t, VocabTokenizer(TokenizerKind::word, sv),
                                  VocabTokenizer(TokenizerKind::word, tv), &unknown);
  CHECK(pairs[1].src == std::vector<int32_t>{sv.id("b"), kUnk});
  CHECK(pairs[0].tgt == std::vector<int32_t>{kUnk});
  CHECK(pairs[1].tgt == std::vector<int32_t>{4, 4});
  // What became <unk>: "c" of the second source, "x" of the first target (sources first), once each.
  CHECK(unknown.count == 2);
  CHECK(unknown.first == std::vector<std::string>{"c", "x"});
}

#undef CHECK_DATA_ERROR  // unity builds: the next file of the chunk must not see it
