// translate eval's metrics against values computed by hand: token accuracy, exact match and
// corpus BLEU-4, on a checkpoint built by hand so that what the model predicts is known exactly.
//
// The model: every attention and feed-forward output projection is zero and every norm is the
// identity LayerNorm, so the decoder's state at a position is LayerNorm(sqrt(d) E[token] + PE[pos]).
// E[token] is 10 times the one-hot vector of the token id (d = 16 >= the 9 target tokens), so that
// state is a one-hot pattern (about 3.9 at the token, -0.3 elsewhere, PE moves it by < 0.1), and
// generator row j is the sum of the one-hot vectors of the tokens i with next(i) = j. Its argmax is
// next(current input token), with a margin of about 3.5: a bigram model that ignores the source.
// Greedy decoding follows next() from <bos>; teacher forcing predicts next(label[t - 1]).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>

#include "nn/family/transformer_family.hpp"
#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::testing::cli;

namespace {

const std::vector<std::string> kTarget = {"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e"};

// Writes the bigram model above with next(token) = successor[token] (others: no prediction).
std::string write_bigram_model(const std::string& name, const std::map<std::string, std::string>& successor) {
  nn::CheckpointInfo info;
  const nn::Vocab tgt = nn::Vocab::from_tokens(kTarget);
  info.src = nn::vocab_tokenizer(nn::TokenizerKind::word,
                                 nn::Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "s", "t"}));
  info.tgt = nn::vocab_tokenizer(nn::TokenizerKind::word, tgt);
  nn::TransformerConfig& c = info.config;
  c.src_vocab = info.src->vocab_size(), c.tgt_vocab = info.tgt->vocab_size();
  c.d_model = 16, c.heads = 2, c.enc_layers = 1, c.dec_layers = 1, c.d_ff = 16, c.dropout = 0, c.max_len = 32;
  nn::Transformer model(c, 1);
  for (const auto& [n, p] : model.named_parameters()) {
    Tensor t = p;
    const bool norm_weight = n.find("norm") != std::string::npos && n.ends_with(".weight");
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = norm_weight ? 1.0f : 0.0f;
  }
  Tensor embed = model.parameter("tgt_embed.weight"), gen = model.parameter("generator.weight");
  for (int64_t tok = 0; tok < c.tgt_vocab; ++tok) embed.data()[tok * c.d_model + tok] = 10.0f;
  for (const auto& [from, to] : successor) gen.data()[tgt.id(to) * c.d_model + tgt.id(from)] = 1.0f;
  const std::string path = testing::scratch(name);
  nn::save_checkpoint(path, model, info);
  return path;
}

double number(const json::Json& v, const char* key) {
  REQUIRE_MESSAGE(v.contains(key), "no \"" << key << "\" in the eval output");
  return v.at(key).get<double>();
}

// BLEU-4 from clipped n-gram matches m[n] of c[n] hypothesis n-grams and the corpus lengths:
// BP * (prod p_n)^(1/4), BP = exp(min(0, 1 - ref_len / hyp_len)) (Papineni et al. 2002).
double bleu4(const double (&m)[4], const double (&c)[4], double hyp_len, double ref_len) {
  double log_p = 0;
  for (int n = 0; n < 4; ++n) log_p += std::log(m[n] / c[n]) / 4;
  return std::exp(std::min(0.0, 1.0 - ref_len / hyp_len) + log_p);
}

}  // namespace

TEST_CASE("cli.metrics.eval_matches_hand_computed_values") {
  if (!have_cli()) return;
  // bos -> a -> b -> c -> d -> <eos>, e -> a: greedy output "a b c d" for every source.
  const std::string model = write_bigram_model(
      "bigram.safetensors", {{"<bos>", "a"}, {"a", "b"}, {"b", "c"}, {"c", "d"}, {"d", "<eos>"}, {"e", "a"}});
  Run r = translate("decode --model " + model, "s\ns t\nt t s\n");
  INFO("decode stderr: ", r.err);
  REQUIRE(r.status == 0);
  REQUIRE(r.out == "a b c d\na b c d\na b c d\n");  // the premise of the numbers below

  // References, with labels (target + <eos>) and teacher-forced predictions next(previous label):
  //   "a b c d"    labels a b c d <eos>      predicted a b c d <eos>      5 of 5, exact
  //   "a b c d e"  labels a b c d e <eos>    predicted a b c d <eos> a    4 of 6
  //   "e a b c"    labels e a b c <eos>      predicted a a b c d          3 of 5
  // token accuracy 12 / 16 = 75%, exact match 1 / 3.
  // BLEU of "a b c d" (x3) against them, n-grams matched / in the hypotheses:
  //   1-grams 4 + 4 + 3 = 11 / 12   (e a b c lacks d)
  //   2-grams 3 + 3 + 2 =  8 / 9    (ab bc, not cd)
  //   3-grams 2 + 2 + 1 =  5 / 6    (abc, not bcd)
  //   4-grams 1 + 1 + 0 =  2 / 3
  // hypothesis length 12, reference length 13: BP = exp(1 - 13 / 12).
  const std::string data =
      testing::write_bytes("metrics.tsv", "s\ta b c d\ns t\ta b c d e\nt t s\te a b c\n");
  r = translate("eval --model " + model + " --data " + data + " --bleu --json");
  INFO("eval stderr: ", r.err);
  REQUIRE(r.status == 0);
  const json::Json e = json::parse(r.out);
  CHECK(number(e, "sentences") == 3);
  CHECK(number(e, "tokens") == 16);
  CHECK(number(e, "token_accuracy") == doctest::Approx(75.0).epsilon(1e-12));
  CHECK(number(e, "exact_match") == doctest::Approx(100.0 / 3).epsilon(1e-12));
  const double want = 100 * bleu4({11, 8, 5, 2}, {12, 9, 6, 3}, 12, 13);
  CHECK(want == doctest::Approx(75.46671).epsilon(1e-6));  // the same formula in python3
  CHECK(number(e, "bleu") == doctest::Approx(want).epsilon(1e-9));
  CHECK(number(e, "loss") > 0);
}

TEST_CASE("cli.metrics.bleu_clips_repeats_and_needs_a_4gram") {
  if (!have_cli()) return;
  // bos -> e -> e -> ...: no <eos>, so --max-len 6 cuts every output to "e e e e e e".
  const std::string model = write_bigram_model("loop.safetensors", {{"<bos>", "e"}, {"e", "e"}, {"a", "e"}});
  Run r = translate("decode --model " + model + " --max-len 6", "s\nt\n");
  INFO("decode stderr: ", r.err);
  REQUIRE(r.status == 0);
  REQUIRE(r.out == "e e e e e e\ne e e e e e\n");

  //   "e e e e e"  labels e e e e e <eos>   predicted e e e e e e   5 of 6
  //   "e a e e"    labels e a e e <eos>     predicted e e e e e     3 of 5
  // token accuracy 8 / 11, exact match 0.
  // BLEU, each hypothesis n-gram count clipped to the reference's:
  //   1-grams min(6, 5) + min(6, 3)   = 8 / 12
  //   2-grams min(5, 4) + min(5, 1)   = 5 / 10
  //   3-grams min(4, 3) + 0           = 3 / 8
  //   4-grams min(3, 2) + 0           = 2 / 6
  // hypothesis length 12 >= reference length 9: BP = 1. BLEU = (1/24)^(1/4).
  const std::string data = testing::write_bytes("loop.tsv", "s\te e e e e\nt\te a e e\n");
  r = translate("eval --model " + model + " --data " + data + " --bleu --max-len 6 --json");
  INFO("eval stderr: ", r.err);
  REQUIRE(r.status == 0);
  json::Json e = json::parse(r.out);
  CHECK(number(e, "token_accuracy") == doctest::Approx(800.0 / 11).epsilon(1e-12));
  CHECK(number(e, "exact_match") == 0);
  CHECK(number(e, "bleu") == doctest::Approx(100 * std::pow(1.0 / 24, 0.25)).epsilon(1e-9));

  // Without the repeated reference no 4-gram matches: BLEU-4 (unsmoothed) is 0.
  const std::string short_refs = testing::write_bytes("loop_short.tsv", "s\te e e\nt\te a e e\n");
  r = translate("eval --model " + model + " --data " + short_refs + " --bleu --max-len 6 --json");
  REQUIRE(r.status == 0);
  e = json::parse(r.out);
  CHECK(number(e, "bleu") == 0);
}
