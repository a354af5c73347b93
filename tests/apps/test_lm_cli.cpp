// The lm CLI end to end on a small generated text: exit codes and messages for bad command lines and
// bad input (nothing written), train -> eval -> sample -> attention, sampling reproducible by seed,
// the char tokenizer, a NaN stop that saves the last good state and a --resume from it that ends
// bit for bit where an uninterrupted run ends, and a failed save.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "nn/family/gpt_family.hpp"
#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::testing::cli;
using Json = nlohmann::json;

namespace {

bool have_lm() {
  if (std::filesystem::exists(kLm)) return true;
  testing::skip_test_case(kLm + " is not built (meson configure -Dapps=true)");
  return false;
}

// ~12 KB of sentences from a small grammar (seeded): enough structure to learn in a few steps.
std::string small_text() {
  static const std::string path = [] {
    const char* subjects[] = {"the cat", "a dog", "my friend", "the old man", "she"};
    const char* verbs[] = {"sees", "likes", "finds", "draws", "keeps"};
    const char* objects[] = {"the ball", "a red hat", "some bread", "the moon", "her book"};
    uint64_t x = 2024;
    auto next = [&](uint64_t n) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      return (x >> 33) % n;
    };
    std::string text;
    while (text.size() < 12000)
      text += std::string(subjects[next(5)]) + " " + verbs[next(5)] + " " + objects[next(5)] + ".\n";
    return testing::write_bytes("lm_text.txt", text);
  }();
  return path;
}

const std::string kTiny =
    "--n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 8 --warmup 2 --lr 1e-2";

std::vector<Json> lines_of(const std::string& out) {
  std::vector<Json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) v.push_back(Json::parse(line));
  return v;
}

// A failed run: its exit status, its message on stderr, and no file written.
#define CHECK_LM_FAILS(args, status_, text)                                   \
  do {                                                                        \
    const Run r_ = lm(args);                                                  \
    INFO("stderr: ", r_.err);                                                 \
    CHECK(r_.status == (status_));                                            \
    CHECK(r_.err.find(text) != std::string::npos);                            \
    if ((status_) == 2) CHECK(r_.err.find("usage: lm") != std::string::npos); \
    CHECK_MESSAGE(r_.written.empty(), "files written: ", join(r_.written));   \
  } while (0)

}  // namespace

TEST_CASE("cli.lm.usage_errors_exit_2") {
  if (!have_lm()) return;
  const std::string d = "--data " + small_text() + " --out " + testing::scratch("u.safetensors");
  CHECK_LM_FAILS("", 2, "no command given");
  CHECK_LM_FAILS("fly", 2, "unknown command 'fly'");
  CHECK_LM_FAILS("train " + d + " --bogus 1", 2, "unknown option '--bogus'");
  CHECK_LM_FAILS("train " + d + " --n-embd 30 --n-head 4", 2, "--n-embd 30 must be divisible by --n-head 4");
  CHECK_LM_FAILS("train " + d + " --tokenizer word", 2,
                 "--tokenizer: must be one of byte|char|spm, got 'word'");
  CHECK_LM_FAILS("train " + d + " --block-size 0", 2, "--block-size: must be in [1, 65536], got 0");
  CHECK_LM_FAILS("train " + d + " --lr 1e-3 --min-lr 1e-2", 2, "--min-lr 0.01 is above --lr 0.001");
  CHECK_LM_FAILS("train " + d + " --resume", 2, "nothing to resume");
  CHECK_LM_FAILS("train --data " + small_text(), 2, "--out is required");
  CHECK_LM_FAILS("sample --tokens 5", 2, "--model is required");
  CHECK_LM_FAILS("sample --model m --top-p 0", 2, "--top-p: must be in (0, 1], got 0");
  for (const char* cmd : {"train", "eval", "sample", "attention"}) {
    const Run r = lm(std::string(cmd) + " --help");
    CHECK(r.status == 0);
    CHECK(r.out.find(std::string("usage: lm ") + cmd) != std::string::npos);
  }
}

TEST_CASE("cli.lm.bad_text_is_refused_before_anything_is_written") {
  if (!have_lm()) return;
  const std::string out = " --out " + testing::scratch("bad.safetensors") + " --steps 2 " + kTiny;
  CHECK_LM_FAILS("train --data " + testing::write_bytes("empty.txt", "") + out, 1,
                 "empty.txt: the file is empty");
  CHECK_LM_FAILS(
      "train --data " + testing::write_bytes("img.bin", std::string("GIF89a\n\0\x01\x02", 10)) + out, 1,
      "img.bin:2: a NUL byte at byte offset 7: this is not a text file");
  CHECK_LM_FAILS("train --data " + testing::write_bytes("latin1.txt", "na\xefve\n") + out, 1,
                 "latin1.txt:1: invalid UTF-8 (byte 0xEF at byte offset 2)");
  CHECK_LM_FAILS("train --data " + testing::scratch("none.txt") + out, 1, "none.txt: cannot open");
  CHECK_LM_FAILS("train --data " + testing::write_bytes("short.txt", "just a few words\n") + out, 1,
                 "fewer than --block-size + 1 = 17");
  CHECK_LM_FAILS("train --data " + small_text() + " --valid " + testing::write_bytes("v.txt", "") + out, 1,
                 "v.txt: the file is empty");
  CHECK_LM_FAILS(
      "train --data " + small_text() + " --out " + testing::scratch("no/dir/m.safetensors") + " " + kTiny, 1,
      "directory " + testing::scratch("no/dir") + " does not exist");
}

TEST_CASE("cli.lm.train_eval_sample_attention") {
  if (!have_lm()) return;
  const std::string model = testing::scratch("lm.safetensors");
  Run r = lm("train --data " + small_text() + " --out " + model + " " + kTiny +
             " --steps 60 --eval-every 30 --log-every 10 --threads 1 --json");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  const std::vector<Json> lines = lines_of(r.out);
  REQUIRE(lines.size() >= 2);
  CHECK(lines.front()["event"] == "start");
  CHECK(lines.front()["tokenizer"] == "byte");
  CHECK(lines.front()["valid_tokens"].get<int64_t>() > 1000);  // the last tenth of the text
  CHECK(lines.back()["event"] == "done");
  const auto l = losses(r.out);
  REQUIRE(l.size() == 6);
  CHECK(std::stod(l.back().second) <
        std::stod(l.front().second) - 1.0);  // from ~5.5 (uniform over 256 bytes)
  double valid_bpb = 0;
  for (const Json& j : lines)
    if (j["event"] == "valid") valid_bpb = j["bits_per_byte"].get<double>();
  CHECK(valid_bpb > 0);
  CHECK(valid_bpb < 5);

  r = lm("eval --model " + model + " --data " + small_text() + " --json");
  INFO("eval stderr: ", r.err);
  REQUIRE(r.status == 0);
  const Json e = Json::parse(r.out);
  CHECK(e["bits_per_byte"].get<double>() == doctest::Approx(e["loss"].get<double>() / std::log(2.0)));
  CHECK(e["tokens"].get<int64_t>() + 1 == static_cast<int64_t>(testing::read_bytes(small_text()).size()));
  CHECK_FALSE(e.contains("bits_per_char"));
  CHECK(e["int8_weights"] == false);
  // --int8: the loss of the model lm sample --int8 runs, close to fp32's but not equal
  r = lm("eval --model " + model + " --data " + small_text() + " --json --int8");
  REQUIRE(r.status == 0);
  const Json e8 = Json::parse(r.out);
  CHECK(e8["int8_weights"] == true);
  CHECK(e8["loss"].get<double>() != e["loss"].get<double>());
  CHECK(e8["loss"].get<double>() == doctest::Approx(e["loss"].get<double>()).epsilon(0.02));
  CHECK_LM_FAILS("eval --model " + model + " --data " + small_text() + " --int8 --precision bf16", 2,
                 "--int8 and --precision bf16");
  CHECK_LM_FAILS("eval --model " + model + " --data " + small_text() + " --block-size 17", 2,
                 "--block-size 17 is above the block size of " + model + " (16)");
  CHECK_LM_FAILS("eval --model " + small_text() + " --data " + small_text(), 1, small_text());

  // The same seed gives the same text; another seed another; the text is streamed after the prompt.
  const std::string s = "sample --model " + model + " --prompt \"the cat\" --tokens 40 --seed 3 --threads 1";
  const Run a = lm(s), b = lm(s), c = lm(s + " --seed 4");
  REQUIRE(a.status == 0);
  CHECK(a.out.starts_with("the cat"));
  CHECK(a.out == b.out);
  CHECK(a.out != c.out);
  CHECK(a.err.find("40 tokens in") != std::string::npos);
  r = lm(s + " --json");
  REQUIRE(r.status == 0);
  const Json j = Json::parse(r.out);
  CHECK("the cat" + j["text"].get<std::string>() + "\n" == a.out);
  CHECK(j["tokens"] == 40);
  // Past the block size (16) the window is cut and re-read: sampling goes on.
  r = lm("sample --model " + model + " --tokens 100 --temperature 0 --threads 1");
  CHECK(r.status == 0);
  CHECK(r.out.size() == 102);  // the default prompt "\n", 100 bytes, a newline
  // bf16 weights for the steps (a byte model's greedy text: the same bytes, or nearly; the numbers
  // are tested in nn.gpt.bf16_weights_for_decoding): it runs, as long, reproducibly.
  const std::string greedy_bf16 =
      "sample --model " + model + " --tokens 100 --temperature 0 --precision bf16";
  const Run h1 = lm(greedy_bf16), h2 = lm(greedy_bf16);
  CHECK(h1.status == 0);
  CHECK(h1.out.size() == 102);
  CHECK(h1.out == h2.out);
  // int8 weights for the steps (the numbers: nn.gpt.int8_weights_for_decoding): the same, and
  // said in the JSON and the timing line; not together with --precision bf16.
  const std::string greedy_int8 = "sample --model " + model + " --tokens 100 --temperature 0 --int8";
  const Run q1 = lm(greedy_int8), q2 = lm(greedy_int8);
  CHECK(q1.status == 0);
  CHECK(q1.out.size() == 102);
  CHECK(q1.out == q2.out);
  CHECK(q1.err.find("; int8 weights)") != std::string::npos);
  r = lm(greedy_int8 + " --json");
  REQUIRE(r.status == 0);
  CHECK(Json::parse(r.out)["weights"] == "int8");
  CHECK_LM_FAILS(greedy_int8 + " --precision bf16", 2, "--int8 and --precision bf16");

  const std::string svg = testing::scratch("attn.svg");
  r = lm("attention --model " + model + " --prompt \"the cat sees\" --out " + svg);
  INFO("attention stderr: ", r.err);
  CHECK(r.status == 0);
  const std::string drawn = testing::read_bytes(svg);
  CHECK(drawn.starts_with("<svg"));
  CHECK(drawn.find("transformer.h.0.attn head 1") != std::string::npos);
  CHECK(drawn.find("\u2423") != std::string::npos);  // the spaces, labelled
  CHECK_LM_FAILS("attention --model " + model + " --prompt \"" + std::string(17, 'a') + "\" --out " +
                     testing::scratch("long.svg"),
                 2, "--prompt has 17 tokens, more than the block size of");
}

TEST_CASE("cli.lm.char_tokenizer") {
  if (!have_lm()) return;
  const std::string model = testing::scratch("lm_char.safetensors");
  Run r = lm("train --data " + small_text() + " --out " + model + " " + kTiny +
             " --tokenizer char --steps 10 --eval-every 10 --log-every 5 --threads 1 --json");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  const nn::GptCheckpoint ck = nn::read_gpt_checkpoint(model);
  CHECK(ck.info.tokenizer->kind() == "char");
  CHECK(ck.info.config.vocab_size == ck.info.tokenizer->vocab_size());
  CHECK(ck.info.config.vocab_size < 40);
  r = lm("eval --model " + model + " --data " + small_text() + " --json");
  REQUIRE(r.status == 0);
  const Json e = Json::parse(r.out);
  CHECK(e["bits_per_char"].get<double>() == doctest::Approx(e["bits_per_byte"].get<double>()));  // ASCII
  // A character the model has never seen: in the prompt a usage error, in a text a data error.
  CHECK_LM_FAILS("sample --model " + model + " --prompt \"the cat Z\"", 2,
                 "--prompt: column 9: character 'Z' (U+005A) is not in the model's vocabulary");
  CHECK_LM_FAILS("eval --model " + model + " --data " + testing::write_bytes("zz.txt", "a cat\nZz\n"), 1,
                 "zz.txt: line 2, column 1: character 'Z'");
}

TEST_CASE("cli.lm.nan_stop_then_resume_ends_where_an_uninterrupted_run_ends") {
  if (!have_lm()) return;
  // No dropout: the step refused on the NaN drew no dropout masks, and its batch is drawn again
  // by the resumed run, so the two runs see the same data.
  const std::string opts = "train --data " + small_text() + " " + kTiny +
                           " --threads 2 --steps 8 --eval-every 2 --log-every 1 --json --out ";
  const std::string full = testing::scratch("nan_full.safetensors"),
                    cut = testing::scratch("nan_cut.safetensors");
  REQUIRE(lm(opts + full).status == 0);
  // The gradient of a parameter inside the model turns NaN at step 5: nothing applied, the state
  // after step 4 saved, exit 3.
  const Run stopped = run_program(kLmWithFaults, opts + cut, "",
                                  "TAPEGRAD_TEST_INJECT_NAN=5:transformer.h.0.mlp.c_fc.weight ");
  INFO("stderr: ", stopped.err);
  CHECK(stopped.status == 3);
  CHECK(stopped.err.find("step 5: the gradient of transformer.h.0.mlp.c_fc.weight (nan at element") !=
        std::string::npos);
  CHECK(losses(stopped.out).back().first == 4);
  const Run resumed = lm(opts + cut + " --resume");
  INFO("resume stderr: ", resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(losses(resumed.out).front().first == 5);
  CHECK(testing::read_bytes(testing::scratch("nan_cut.last.safetensors")) ==
        testing::read_bytes(testing::scratch("nan_full.last.safetensors")));
  // Model options repeated with --resume must agree with the checkpoint.
  CHECK_LM_FAILS(opts + cut + " --resume --n-embd 32", 2, "--n-embd 32 disagrees with");
  // Fewer steps than the run took: refused, its files untouched.
  const std::string saved = testing::read_bytes(testing::scratch("nan_cut.last.safetensors"));
  REQUIRE(!saved.empty());
  CHECK_LM_FAILS(opts + cut + " --resume --steps 6", 2, "is already at step 8, past the 6 steps asked");
  CHECK(testing::read_bytes(testing::scratch("nan_cut.last.safetensors")) == saved);
}

TEST_CASE("cli.lm.interrupt_then_resume_is_bit_identical") {
  if (!have_lm()) return;
  // Dropout on and 2 threads: the comparison covers the dropout generator and the data windows.
  // Ctrl-C (SIGINT, raised during step 3) finishes the step, saves and exits 130; a resumed run
  // takes the saved training options (--lr, --steps, --seed...) without being given them.
  const std::string opts =
      "train --data " + small_text() + " " + kTiny +
      " --dropout 0.1 --seed 9 --threads 2 --steps 8 --eval-every 2 --log-every 1 --json --out ";
  const std::string full = testing::scratch("i_full.safetensors"),
                    cut = testing::scratch("i_cut.safetensors");
  REQUIRE(lm(opts + full).status == 0);
  const Run stopped = run_program(kLmWithFaults, opts + cut, "", "TAPEGRAD_TEST_INTERRUPT=3 ");
  INFO("stderr: ", stopped.err);
  CHECK(stopped.status == 130);
  const std::vector<Json> lines = lines_of(stopped.out);
  REQUIRE(!lines.empty());
  CHECK(lines.back()["interrupted"] == true);
  CHECK(lines.back()["step"] == 3);
  const Run resumed =
      lm("train --data " + small_text() + " --threads 2 --log-every 1 --json --resume --out " + cut);
  INFO("resume stderr: ", resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(losses(resumed.out).front().first == 4);
  CHECK(losses(resumed.out).back().first == 8);
  CHECK(testing::read_bytes(testing::scratch("i_cut.last.safetensors")) ==
        testing::read_bytes(testing::scratch("i_full.last.safetensors")));
}

TEST_CASE("cli.lm.failed_save_keeps_the_previous_checkpoint") {
  if (!have_lm()) return;
  const std::string model = testing::scratch("save.safetensors");
  const std::string common = "train --data " + small_text() + " --out " + model + " " + kTiny +
                             " --threads 1 --steps 4 --eval-every 2 --json";
  REQUIRE(lm(common).status == 0);
  const std::string before = testing::read_bytes(model);
  // A file-size limit of 8-16 KB stands for a full disk: every checkpoint write fails half-way.
  const Run r = lm(common + " --overwrite", "ulimit -f 16; ");
  INFO("stderr: ", r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("error: step 2: saving " + model) != std::string::npos);
  CHECK(r.err.find("this was the final save") != std::string::npos);
  CHECK(testing::read_bytes(model) == before);
}

// --precision as translate has it: bf16 products in training, eval and sampling; the checkpoint
// stays fp32, so a bf16-trained model evaluates in fp32 too, to a loss close to its bf16 one
// (bf16 rounds each product's operands to 8 bits: ~2^-8 relative per product, far below 2%).
TEST_CASE("cli.lm.precision_bf16") {
  if (!have_lm()) return;
  CHECK_LM_FAILS(
      "train --data " + small_text() + " --out " + testing::scratch("p.safetensors") + " --precision fp16", 2,
      "--precision: must be one of fp32|bf16, got 'fp16'");
  const std::string model = testing::scratch("lm_bf16.safetensors");
  Run r = lm("train --data " + small_text() + " --out " + model + " " + kTiny +
             " --steps 40 --eval-every 40 --log-every 10 --threads 1 --json --precision bf16");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  const std::vector<Json> lines = lines_of(r.out);
  REQUIRE_FALSE(lines.empty());
  CHECK(lines.front()["precision"] == "bf16");
  const auto l = losses(r.out);
  REQUIRE(l.size() == 4);
  CHECK(std::stod(l.back().second) < std::stod(l.front().second) - 0.5);
  const std::string eval = "eval --model " + model + " --data " + small_text() + " --json --precision ";
  const Run e32 = lm(eval + "fp32"), e16 = lm(eval + "bf16");
  REQUIRE(e32.status == 0);
  REQUIRE(e16.status == 0);
  CHECK(Json::parse(e16.out)["loss"].get<double>() ==
        doctest::Approx(Json::parse(e32.out)["loss"].get<double>()).epsilon(0.02));
  r = lm("sample --model " + model + " --prompt \"the\" --tokens 20 --seed 1 --precision bf16");
  CHECK(r.status == 0);
  CHECK(r.out.starts_with("the"));
}

// --tokenizer spm: a SentencePiece model (lm layout) learnt from the training text only, stored in
// the checkpoint; eval reports bits per byte of the text; sample prints detokenized text;
// attention labels the pieces; --resume keeps the model.
TEST_CASE("cli.lm.spm_tokenizer") {
  if (!have_lm()) return;
  const std::string model = testing::scratch("lm_spm.safetensors");
  Run r = lm("train --data " + small_text() + " --out " + model + " " + kTiny +
             " --tokenizer spm --vocab-size 290 --steps 6 --eval-every 3 --log-every 3 --threads 1 --json");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  const nn::GptCheckpoint ck = nn::read_gpt_checkpoint(model);
  CHECK(ck.info.tokenizer->kind() == "spm");
  CHECK(ck.info.config.vocab_size == 290);
  r = lm("train --data " + small_text() + " --out " + model + " " + kTiny +
         " --tokenizer spm --steps 8 --eval-every 3 --threads 1 --resume");
  CHECK(r.status == 0);
  r = lm("eval --model " + model + " --data " + small_text() + " --json");
  REQUIRE(r.status == 0);
  const Json e = Json::parse(r.out);
  CHECK(e.at("bytes").get<int64_t>() > e.at("tokens").get<int64_t>());  // pieces longer than a byte
  CHECK(e.at("bits_per_byte").get<double>() > 0);
  r = lm("sample --model " + model + " --prompt \"The Cat \" --tokens 20 --seed 3 --strict");
  INFO("sample stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.starts_with("The Cat "));
  CHECK(r.out.find("\u2581") == std::string::npos);
  // Streamed piece by piece as the whole text decodes, past the stream's 16-token window.
  check_streamed_sample_is_the_text("sample --model " + model + " --prompt \"The Cat \" --tokens 60 --seed 5",
                                    "The Cat ");
  const std::string svg = testing::scratch("lm_spm.svg");
  r = lm("attention --model " + model + " --prompt \"the cat sees\" --out " + svg);
  REQUIRE(r.status == 0);
  CHECK(testing::read_bytes(svg).find("\u2423") != std::string::npos);  // a word-start piece, labelled
  // A vocabulary the text cannot fill: a clear error and no checkpoint.
  const std::string none = testing::scratch("lm_spm_none.safetensors");
  r = lm("train --data " + small_text() + " --out " + none + " --tokenizer spm --vocab-size 50000 --steps 1");
  CHECK(r.status == 1);
  CHECK(r.err.find("Vocabulary size too high") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(none));
}

// Fine-tuning: --init-from starts from a model's weights (its loss, not a new model's), keeps its
// config and tokenizer and trains on windows of --block-size; the window and the source are kept in
// the checkpoint, --resume goes on from them, and options that contradict the model are refused.
TEST_CASE("cli.lm.init_from_fine_tunes_a_model") {
  if (!have_lm()) return;
  const std::string base = testing::scratch("ft_base.safetensors"), ft = testing::scratch("ft.safetensors");
  const std::string data = " --data " + small_text() + " --threads 1 --log-every 1 --json";
  REQUIRE(lm("train" + data + " --out " + base + " " + kTiny + " --steps 40 --eval-every 40").status == 0);
  const Run fresh = lm("train" + data + " --out " + testing::scratch("ft_fresh.safetensors") + " " + kTiny +
                       " --steps 1 --eval-every 1");
  REQUIRE(fresh.status == 0);
  const std::string tune =
      "train" + data + " --init-from " + base + " --block-size 8 --batch-size 8 --lr 1e-3 ";
  Run r = lm(tune + "--steps 3 --eval-every 3 --out " + ft);
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(lines_of(r.out).front()["block_size"] == 8);
  // The first step's loss is the trained model's (about 2 nats here), not a new one's (ln 256 = 5.5).
  const double first = std::stod(losses(r.out).front().second),
               new_model = std::stod(losses(fresh.out).front().second);
  CHECK(first < new_model - 2.0);
  const nn::GptCheckpoint ck = nn::read_gpt_checkpoint(ft);
  CHECK(ck.info.config.block_size == 16);  // the model's positions are kept
  CHECK(ck.info.extra.at("train.window") == "8");
  CHECK(ck.info.extra.at("train.init-from") == base);
  r = lm(tune + "--steps 5 --resume --out " + ft);
  INFO("resume stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(losses(r.out).front().first == 4);
  CHECK_LM_FAILS(tune + "--steps 5 --resume --block-size 4 --out " + ft, 2, "--block-size 4 disagrees with");
  CHECK_LM_FAILS(
      "train" + data + " --init-from " + base + " --block-size 17 --out " + testing::scratch("x.safetensors"),
      2, "--block-size 17 is above the 16 positions of " + base);
  CHECK_LM_FAILS(
      "train" + data + " --init-from " + base + " --n-embd 32 --out " + testing::scratch("x.safetensors"), 2,
      "--n-embd 32 disagrees with " + base + ", which has 16");
  CHECK_LM_FAILS("train" + data + " --init-from " + base + " --tokenizer char --out " +
                     testing::scratch("x.safetensors"),
                 2, "--tokenizer char disagrees with");
  CHECK_LM_FAILS(
      "train" + data + " --init-from " + small_text() + " --out " + testing::scratch("x.safetensors"), 1,
      small_text());

  // lm tokenize: a line of ids per line of stdin (bytes here), empty lines kept.
  r = run_program(kLm, "tokenize --model " + base, "ab\n\nc\xc3\xa9\n", "");
  INFO("tokenize stderr: ", r.err);
  CHECK(r.status == 0);
  CHECK(r.out == "97 98\n\n99 195 169\n");
}

#undef CHECK_LM_FAILS  // unity builds: the next file of the chunk must not see it
