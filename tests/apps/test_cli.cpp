// The translate CLI end to end on a tiny task: exit codes and messages for bad command lines and
// bad data, train -> eval -> decode -> attention, and --resume following the same loss curve.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "io/json.hpp"
#include "io/safetensors.hpp"
#include "nn/family/transformer_family.hpp"
#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"

using namespace tg;

using namespace tg::testing::cli;

TEST_CASE("cli.usage_errors_exit_2") {
  if (!have_cli()) return;
  const std::string d = "--data " + tiny_data() + " --out " + testing::scratch("u.safetensors");
  CHECK_USAGE_ERROR("", "no command given");
  CHECK_USAGE_ERROR("fly", "unknown command 'fly'");
  CHECK_USAGE_ERROR("train " + d + " --bogus 1", "unknown option '--bogus'");
  CHECK_USAGE_ERROR("train " + d + " --lr", "--lr: needs a value");
  CHECK_USAGE_ERROR("train " + d + " --batch-size 0", "--batch-size: must be >= 1, got 0");
  // Given twice, the last value counts (here the bad one).
  CHECK_USAGE_ERROR("train " + d + " --batch-size 4 --batch-size=0", "--batch-size: must be >= 1, got 0");
  CHECK_USAGE_ERROR("train " + d + " --d-model -8", "--d-model: must be in [1, 65536], got -8");
  CHECK_USAGE_ERROR("train " + d + " --d-model 30 --heads 4", "--d-model 30 must be divisible by --heads 4");
  CHECK_USAGE_ERROR("train " + d + " --threads 0", "--threads: must be in [1, 1024], got 0");
  CHECK_USAGE_ERROR("train " + d + " --threads two", "--threads: expects an integer, got 'two'");
  CHECK_USAGE_ERROR("train " + d + " --lr 0", "--lr: must be in (0");
  CHECK_USAGE_ERROR("train " + d + " --dropout 1", "--dropout: must be in [0");
  CHECK_USAGE_ERROR("train " + d + " --optimizer lbfgs", "must be one of adam|adamw|sgd");
  CHECK_USAGE_ERROR("train --data " + tiny_data(), "--out is required");
  CHECK_USAGE_ERROR("train " + d + " --resume", "nothing to resume");
  CHECK_USAGE_ERROR("decode --beam 2", "--model is required");
  for (const char* cmd : {"train", "eval", "decode", "attention"}) {
    const Run r = translate(std::string(cmd) + " --help");
    CHECK(r.status == 0);
    CHECK(r.out.find(std::string("usage: translate ") + cmd) != std::string::npos);
  }
}

TEST_CASE("cli.bad_data_reports_file_line") {
  if (!have_cli()) return;
  const std::string bad = testing::write_bytes("bad.tsv", "a b\tb a\nno tab here\n");
  Run r = translate("train --data " + bad + " --out " + testing::scratch("b.safetensors") + " --steps 1");
  CHECK(r.status == 1);
  CHECK(r.err.find("bad.tsv:2: no tab") != std::string::npos);
  CHECK(r.err.find("--skip-bad-lines") != std::string::npos);
  CHECK_MESSAGE(r.written.empty(), "files written: ", join(r.written));
  r = translate("train --data " + bad + " --out " + testing::scratch("b.safetensors") +
                " --steps 1 --skip-bad-lines " + kTinyModel);
  CHECK(r.status == 0);
  CHECK(r.err.find("skipped 1 bad line") != std::string::npos);
  // A run that succeeds writes its checkpoints, and `written` sees them.
  CHECK(std::count(r.written.begin(), r.written.end(), testing::scratch("b.safetensors")) == 1);
  r = translate("train --data " + testing::scratch("none.tsv") + " --out x --steps 1");
  CHECK(r.status == 1);
  CHECK(r.err.find("none.tsv: cannot open") != std::string::npos);
  CHECK_MESSAGE(r.written.empty(), "files written: ", join(r.written));
  r = translate("eval --model " + bad + " --data " + bad);
  CHECK(r.status == 1);
  CHECK(r.err.find("bad.tsv") != std::string::npos);
  CHECK_MESSAGE(r.written.empty(), "files written: ", join(r.written));
}

TEST_CASE("cli.train_eval_decode_attention") {
  if (!have_cli()) return;
  const std::string model = testing::scratch("tiny.safetensors");
  Run r = translate("train --data " + tiny_data() + " --valid " + tiny_data() + " --out " + model + " " +
                    kTinyModel + " --steps 40 --eval-every 20 --log-every 10 --lr 3e-3 --json");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  const auto lines = json_lines(r.out);
  int valid = 0;
  for (const auto& j : lines) valid += j.at("event").get<std::string>() == "valid";
  CHECK(valid == 2);
  CHECK(lines.back().at("event").get<std::string>() == "done");
  CHECK(losses(r.out).size() == 4);
  CHECK(lines[1].contains("eta_s"));

  r = translate("eval --model " + model + " --data " + tiny_data() + " --json --bleu");
  REQUIRE(r.status == 0);
  const json::Json e = json::parse(r.out);
  CHECK(e.at("sentences").get<int64_t>() == 240);
  CHECK(e.at("tokens").get<int64_t>() == 240 * 4);
  CHECK(e.at("loss").get<double>() > 0);
  CHECK(e.at("token_accuracy").get<double>() > 0);
  CHECK(e.contains("bleu"));
  r = translate("eval --model " + model + " --data " + tiny_data());
  CHECK(r.out.find("exact match") != std::string::npos);

  r = translate("decode --model " + model, "a b c\n\nh g f\r\n");
  REQUIRE(r.status == 0);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 3);
  r = translate("decode --model " + model + " --beam 3 --json", "a b c\nzzz\n");
  REQUIRE(r.status == 0);
  const auto dl = json_lines(r.out);
  REQUIRE(dl.size() == 2);
  CHECK(dl[1].at("source").get<std::string>() == "zzz");
  r = translate("decode --model " + model + " --beam 3 --length-penalty 0", "a b c\n");
  REQUIRE(r.status == 0);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  CHECK_USAGE_ERROR("decode --model " + model + " --length-penalty -1", "--length-penalty");
  CHECK_USAGE_ERROR("decode --model " + model + " --beam 100",
                    "--beam 100 is larger than the target vocabulary");

  // --init: a new run from the trained weights; model options may repeat but must agree.
  const std::string tuned = testing::scratch("tuned.safetensors");
  r = translate("train --data " + tiny_data() + " --out " + tuned + " --init " + model +
                " --steps 3 --d-model 16");
  INFO("init stderr: ", r.err);
  CHECK(r.status == 0);
  CHECK_USAGE_ERROR(
      "train --data " + tiny_data() + " --out " + tuned + " --overwrite --init " + model + " --heads 4",
      "--heads 4 disagrees with");

  const std::string svg = testing::scratch("attn.svg");
  r = translate("attention --model " + model + " --src \"a b c\" --tgt \"c b a\" --out " + svg);
  INFO("attention stderr: ", r.err);
  REQUIRE(r.status == 0);
  const std::string text = testing::read_bytes(svg);
  CHECK(text.starts_with("<svg"));
  CHECK(text.ends_with("</svg>\n"));
  // 3 blocks (encoder self, decoder self, cross) x 2 heads, each 4 x 4 cells (3 tokens + <eos> / <bos>),
  // a tooltip each; the decoder's self-attention hides the 6 above its diagonal: one hatched run
  // (with its own tooltip) per row.
  size_t titles = 0, masked = 0;
  for (size_t at = 0; (at = text.find("<title>", at)) != std::string::npos; ++at) ++titles;
  for (size_t at = 0; (at = text.find(": masked</title>", at)) != std::string::npos; ++at) ++masked;
  CHECK(masked == 2 * 3);
  CHECK(titles - masked == 3 * 2 * 16 - 2 * 6);
  CHECK(text.find("decoder.layers.0.multihead_attn head 1") != std::string::npos);
  CHECK(text.find("&lt;eos&gt;") != std::string::npos);

  // Without --tgt the target is the greedy translation.
  r = translate("attention --model " + model + " --src \"h g f\" --out " + svg);
  INFO("attention stderr: ", r.err);
  CHECK(r.status == 0);
  CHECK(testing::read_bytes(svg).find("decoder.layers.0.self_attn head 0") != std::string::npos);
  CHECK_USAGE_ERROR("attention --model " + model + " --src \" \" --out " + svg, "--src is empty");
}

TEST_CASE("cli.resume_follows_the_same_loss_curve") {
  if (!have_cli()) return;
  // One thread: the same reduction order in both runs, so the curves can be compared exactly.
  const std::string common = "train --data " + tiny_data() + " " + kTinyModel +
                             " --log-every 1 --eval-every 10 --json " +
                             "--threads 1 --dropout 0.2 --seed 7 --steps ";
  const std::string a = testing::scratch("run_a.safetensors"), b = testing::scratch("run_b.safetensors");
  const Run full = translate(common + "30 --out " + a);
  REQUIRE(full.status == 0);
  const Run first = translate(common + "12 --out " + b);
  REQUIRE(first.status == 0);
  const Run rest = translate(common + "30 --out " + b + " --resume");
  INFO("stderr: ", rest.err);
  REQUIRE(rest.status == 0);

  const auto la = losses(full.out), l1 = losses(first.out), l2 = losses(rest.out);
  REQUIRE(la.size() == 30);
  REQUIRE(l1.size() == 12);
  REQUIRE(l2.size() == 18);
  CHECK(l2.front().first == 13);
  for (size_t i = 0; i < 12; ++i) CHECK(l1[i] == la[i]);
  for (size_t i = 0; i < 18; ++i) CHECK(l2[i] == la[12 + i]);
  // The curve is not trivially constant (a restore that missed something would show).
  CHECK(la.front().second != la.back().second);

  // And the final weights are identical.
  const io::TensorFile fa = io::read_safetensors(testing::scratch("run_a.last.safetensors"));
  const io::TensorFile fb = io::read_safetensors(testing::scratch("run_b.last.safetensors"));
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    INFO(fa.tensors[i].first);
    CHECK(fa.tensors[i].second.to_vector() == fb.tensors[i].second.to_vector());
  }
}

TEST_CASE("cli.sigint_saves_and_stops") {
  if (!have_cli()) return;
  // Start a long run, wait for its first progress line, interrupt it: it must finish the step,
  // save a resumable checkpoint and exit with 130.
  const std::string out = testing::scratch("int_stdout.txt"), rc = testing::scratch("int_rc.txt");
  const std::string model = testing::scratch("int.safetensors");
  const std::string script = kTranslate + " train --data " + tiny_data() + " --out " + model + " " +
                             kTinyModel + " --steps 1000000 --log-every 1 --json >" + out +
                             " 2>/dev/null & pid=$!; " + "while ! grep -q '\"event\":\"train\"' " + out +
                             " 2>/dev/null; do sleep 0.05; done; " + "kill -INT $pid; wait $pid; echo $? >" +
                             rc;
  REQUIRE(std::system(("sh " + testing::write_bytes("interrupt.sh", script)).c_str()) == 0);
  CHECK(testing::read_bytes(rc) == "130\n");
  const auto lines = json_lines(testing::read_bytes(out));
  REQUIRE(!lines.empty());
  CHECK(lines.back().at("event").get<std::string>() == "done");
  CHECK(lines.back().at("interrupted").get<bool>());
  const int64_t step = lines.back().at("step").get<int64_t>();
  CHECK(step >= 1);
  const nn::Checkpoint ck = nn::read_checkpoint(testing::scratch("int.last.safetensors"));
  REQUIRE(ck.info.train);
  CHECK(ck.info.train->step == step);
  CHECK(ck.has_optimizer_state());
}

TEST_CASE("cli.resume_reuses_the_saved_training_options") {
  if (!have_cli()) return;
  // The first run sets training options away from their defaults; the resumed run names none of
  // them but --steps (nor the model's shape) and must still follow the uninterrupted run.
  const std::string opts =
      "train --data " + tiny_data() + " " + kTinyModel +
      " --threads 1 --lr 2e-3 --schedule cosine --label-smoothing 0.2 --seed 5 --eval-every 3"
      " --log-every 1 --json --steps 6 --out ";
  const std::string a = testing::scratch("opts_a.safetensors"), b = testing::scratch("opts_b.safetensors");
  const Run full = translate(opts + a);
  REQUIRE(full.status == 0);
  REQUIRE(translate(opts + b + " --steps 3").status == 0);
  const Run rest = translate("train --data " + tiny_data() + " --out " + b +
                             " --resume --steps 6 --threads 1 --log-every 1 --json");
  INFO("stderr: ", rest.err);
  REQUIRE(rest.status == 0);
  const auto lf = losses(full.out), lr = losses(rest.out);
  REQUIRE(lf.size() == 6);
  REQUIRE(lr.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(lr[i] == lf[3 + i]);
  // A saved option given again wins; a model option given again must agree.
  CHECK_USAGE_ERROR("train --data " + tiny_data() + " --out " + b + " --resume --d-model 32",
                    "--d-model 32 disagrees with");
}

// --valid is one of the saved options: a run resumed without it still validates, so the best
// model in --out stays the best on validation instead of being replaced by the latest weights.
TEST_CASE("cli.resume_reuses_valid") {
  if (!have_cli()) return;
  const std::string out = testing::scratch("valid_reuse.safetensors");
  const Run first = translate("train --data " + tiny_data() + " --valid " + tiny_data() + " " + kTinyModel +
                              " --threads 1 --eval-every 3 --steps 3 --json --out " + out);
  REQUIRE(first.status == 0);
  const Run rest =
      translate("train --data " + tiny_data() + " --out " + out + " --resume --steps 6 --threads 1 --json");
  INFO("stderr: ", rest.err);
  REQUIRE(rest.status == 0);
  std::vector<int64_t> validated;
  for (const json::Json& j : json_lines(rest.out))
    if (j.at("event").get<std::string>() == "valid") validated.push_back(j.at("step").get<int64_t>());
  CHECK(validated == std::vector<int64_t>{6});
  CHECK(json_lines(rest.out).front().at("valid_pairs").get<int64_t>() == 240);
  // A run saved before --valid was kept (no train.valid): resuming it without --valid is refused.
  const std::string last = testing::scratch("valid_reuse.last.safetensors");
  io::TensorFile file = io::read_safetensors(last);
  REQUIRE(file.metadata.erase("train.valid") == 1);
  io::write_safetensors(last, file.tensors, file.metadata);
  const Run old =
      translate("train --data " + tiny_data() + " --out " + out + " --resume --steps 9 --threads 1 --json");
  CHECK(old.status == 2);
  CHECK(old.err.find("validated (best loss") != std::string::npos);
  CHECK(old.err.find("give --valid again") != std::string::npos);
}

// An spm model can generate byte pieces that do not form UTF-8 (an undertrained one often does):
// decode --json still prints one JSON object per line, those bytes as U+FFFD.
TEST_CASE("cli.spm_decode_json_survives_bytes_that_are_not_utf8") {
  if (!have_cli()) return;
  const std::string model = testing::scratch("spm_bytes.safetensors");
  const Run r = translate("train --data " + tiny_data() + " --out " + model + " " + kTinyModel +
                          " --tokenizer spm --vocab-size 275 --steps 1 --threads 1");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  // Make the byte piece of 0xFC (never valid in UTF-8) the only likely output.
  const nn::Checkpoint ck = nn::read_checkpoint(model);
  int32_t byte_fc = -1;
  for (int32_t id = 0; id < static_cast<int32_t>(ck.info.config.tgt_vocab) && byte_fc < 0; ++id)
    if (ck.info.tgt->decode(std::vector<int32_t>{id}) == "\xfc") byte_fc = id;
  REQUIRE(byte_fc >= 0);
  io::TensorFile file = io::read_safetensors(model);
  for (auto& [name, t] : file.tensors)
    if (name == "generator.bias") t.data()[byte_fc] = 1000.f;
  const std::string odd = testing::scratch("spm_bytes_fc.safetensors");
  io::write_safetensors(odd, file.tensors, file.metadata);
  const Run d = translate("decode --model " + odd + " --json --max-len 3", "a b c\n");
  INFO("decode stderr: ", d.err);
  REQUIRE(d.status == 0);
  const json::Json j = json::parse(d.out);
  CHECK(j.at("translation").get<std::string>() == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

// examples/tape_tour: the README's tape in ten lines runs and prints the tape and a gradient.
TEST_CASE("cli.examples.tape_tour_prints_the_tape_and_a_gradient") {
  const std::string tour = TG_TAPE_TOUR;
  if (!std::filesystem::exists(tour)) {
    testing::skip_test_case(tour + " is not built (meson configure -Dexamples=true)");
    return;
  }
  const Run r = run_program(tour, "", "", "");
  INFO("stderr: ", r.err);
  CHECK(r.status == 0);
  CHECK(r.out.find("digraph") != std::string::npos);
  CHECK(r.out.find("matmul") != std::string::npos);
  CHECK(r.out.find("tanh") != std::string::npos);
}

// Unknown input is never silent: what became <unk> is named once per run on stderr, and --strict
// makes it an error (status 1) that writes nothing.
TEST_CASE("cli.unknown_tokens_warn_once_and_strict_refuses") {
  if (!have_cli()) return;
  const std::string model = testing::scratch("unk.safetensors");
  Run r = translate("train --data " + tiny_data() + " --out " + model + " " + kTinyModel + " --steps 2");
  REQUIRE(r.status == 0);
  r = translate("decode --model " + model, "a b zz\nQQ a\nc b a\n");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 3);
  CHECK(r.err.find("warning: stdin: 2 tokens became <unk> (not in the model's vocabulary): \"zz\", \"QQ\"") !=
        std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);    // one warning for the run
  r = translate("decode --model " + model, "a \x1b[31m b\n");  // shown escaped, not sent to the terminal
  CHECK(r.err.find("became <unk> (not in the model's vocabulary): \"\\x1b[31m\"") != std::string::npos);
  CHECK(r.err.find('\x1b') == std::string::npos);
  r = translate("decode --model " + model + " --strict", "a b c\nzz a\n");
  CHECK(r.status == 1);
  CHECK(r.err.find("stdin:2: 1 token became <unk>") != std::string::npos);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') <= 1);  // nothing after the bad line
  // eval (both sides of the test pairs) and attention (--src) follow the same policy.
  const std::string odd = testing::write_bytes("odd.tsv", "a b X\tc b a\na b c\tY\n");
  r = translate("eval --model " + model + " --data " + odd);
  CHECK(r.status == 0);
  CHECK(r.err.find("odd.tsv: 2 tokens became <unk>") != std::string::npos);
  r = translate("eval --model " + model + " --data " + odd + " --strict");
  CHECK(r.status == 1);
  const std::string svg = testing::scratch("unk.svg");
  r = translate("attention --model " + model + " --src \"a b W\" --out " + svg + " --strict");
  CHECK(r.status == 1);
  CHECK(r.err.find("--src: 1 token became <unk>") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(svg));
  r = translate("attention --model " + model + " --src \"a b W\" --out " + svg);
  CHECK(r.status == 0);
  CHECK(r.err.find("--src: 1 token became <unk>") != std::string::npos);
  // train too: validation pairs, and training pairs read with a checkpoint's vocabularies (--init).
  r = translate("train --data " + tiny_data() + " --valid " + odd + " --out " +
                testing::scratch("unk_valid.safetensors") + " " + kTinyModel + " --steps 1");
  CHECK(r.status == 0);
  CHECK(r.err.find("warning: " + odd + ": 2 tokens became <unk>") != std::string::npos);
  CHECK(r.err.find(tiny_data() + ":") == std::string::npos);  // its own vocabulary: nothing unknown
  r = translate("train --data " + odd + " --init " + model + " --out " +
                testing::scratch("unk_init.safetensors") + " --steps 1 --batch-size 2");
  CHECK(r.status == 0);
  CHECK(r.err.find("warning: " + odd + ": 2 tokens became <unk>") != std::string::npos);
}

// --tokenizer spm: a SentencePiece model trained on the data, stored in the checkpoint, used by
// eval, decode and attention; no <unk> for text in the training alphabet or beyond it (byte pieces).
TEST_CASE("cli.spm_tokenizer_train_resume_decode") {
  if (!have_cli()) return;
  const std::string model = testing::scratch("spm.safetensors");
  Run r = translate("train --data " + tiny_data() + " --out " + model + " " + kTinyModel +
                    " --tokenizer spm --vocab-size 275 --spm-type bpe --steps 4 --eval-every 2 --json");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  const nn::Checkpoint ck = nn::read_checkpoint(model);
  CHECK(ck.info.src->kind() == "spm");
  CHECK(ck.info.config.src_vocab == 275);
  CHECK((ck.file.metadata.at("src_spm") == ck.file.metadata.at("tgt_spm")));  // one joint model
  // --resume continues with the stored model; spm options, when repeated, must agree.
  r = translate("train --data " + tiny_data() + " --out " + model + " " + kTinyModel +
                " --tokenizer spm --vocab-size 275 --spm-type bpe --steps 6 --eval-every 2 --resume --json");
  CHECK(r.status == 0);
  CHECK_USAGE_ERROR(
      "train --data " + tiny_data() + " --out " + model + " --steps 8 --resume --vocab-size 274",
      "--vocab-size 274 disagrees with");
  // Capitals, accents and a CJK character the training text never had: no <unk>, no warning.
  r = translate("decode --model " + model + " --strict", "A B c\nh é 猫 f\n");
  INFO("decode stderr: ", r.err);
  CHECK(r.status == 0);
  CHECK(r.err.find("<unk>") == std::string::npos);
  CHECK(r.out.find("\u2581") == std::string::npos);  // detokenized: no SentencePiece marks
  r = translate("eval --model " + model + " --data " + tiny_data() + " --json --bleu");
  CHECK(r.status == 0);
  const std::string svg = testing::scratch("spm.svg");
  r = translate("attention --model " + model + " --src \"a b c\" --out " + svg);
  CHECK(r.status == 0);
  // Two models with --spm-separate: the target side here is written in other letters.
  std::string shifted = testing::read_bytes(tiny_data());
  bool target = false;  // after the tab of a line
  for (char& ch : shifted) {
    if (ch == '\t' || ch == '\n') target = ch == '\t';
    if (target && ch >= 'a' && ch <= 'h') ch = static_cast<char>(ch - 'a' + 'p');
  }
  const std::string sep = testing::scratch("spm_sep.safetensors");
  r = translate("train --data " + testing::write_bytes("shifted.tsv", shifted) + " --out " + sep + " " +
                kTinyModel + " --tokenizer spm --vocab-size 270 --spm-separate --steps 1");
  INFO("separate stderr: ", r.err);
  REQUIRE(r.status == 0);
  const nn::Checkpoint two = nn::read_checkpoint(sep);
  CHECK((two.file.metadata.at("src_spm") != two.file.metadata.at("tgt_spm")));
  // A vocabulary the data cannot fill, and an empty training file: a clear error, no checkpoint.
  const std::string none = testing::scratch("spm_none.safetensors");
  r = translate("train --data " + tiny_data() + " --out " + none + " --tokenizer spm --vocab-size 100000");
  CHECK(r.status == 1);
  CHECK(r.err.find("Vocabulary size too high") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(none));
  r = translate("train --data " + testing::write_bytes("spaces.tsv", "  \t  \n") + " --out " + none +
                " --tokenizer spm");
  CHECK(r.status == 1);
  CHECK_FALSE(std::filesystem::exists(none));
}
