// The rough edges a newcomer hit following the README (issue 30), each as the user met it: output
// names, an --out that cannot be written, messages, the toy-data script, the README's commands.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::testing::cli;

namespace {

// ~3 KB of text for lm train.
std::string lm_text() {
  static const std::string path = [] {
    std::string text;
    for (int i = 0; text.size() < 3000; ++i)
      text += i % 3 ? "the cat sees the ball.\n" : "a dog likes some bread.\n";
    return testing::write_bytes("edges_lm.txt", text);
  }();
  return path;
}
const std::string kLmTiny =
    "--n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --warmup 1 --steps 2 --eval-every 2";

bool exists(const std::string& path) {
  return std::filesystem::exists(path);
}

}  // namespace

TEST_CASE("ux.cli.out_without_extension_writes_out_last_safetensors") {
  if (!have_cli()) return;
  const std::string out = testing::scratch("mymodel");
  const Run r = translate("train --data " + tiny_data() + " --out " + out + " --steps 2 " + kTinyModel);
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(exists(out));
  CHECK(exists(out + ".last.safetensors"));  // the README's <out>.last.safetensors
  CHECK(!exists(out + ".last"));
  CHECK(r.out.find(out + ".last.safetensors") != std::string::npos);
}

TEST_CASE("ux.cli.an_out_that_cannot_be_written_is_refused_before_training") {
  if (!have_cli()) return;
  const std::filesystem::path dir = testing::scratch("adir");
  std::filesystem::create_directories(dir);
  const std::string train = "train --data " + tiny_data() + " --steps 400 " + kTinyModel + " --out ";
  auto refused = [](const Run& r, const std::string& text) {
    INFO("stdout: ", r.out);
    INFO("stderr: ", r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find(text) != std::string::npos);
    CHECK(r.err.find("translate train: error: ") != std::string::npos);  // the program's prefix
    CHECK(r.out.find("step ") == std::string::npos);                     // no training
    CHECK_MESSAGE(r.written.empty(), "files written: ", join(r.written));
  };
  refused(translate(train + dir.string()), "is a directory");
  // <out>.last.safetensors a directory: the resumable state could never be saved.
  std::filesystem::create_directories(testing::scratch("m2.last.safetensors"));
  refused(translate(train + testing::scratch("m2.safetensors")), "m2.last.safetensors: is a directory");
  // A directory that refuses new files, whoever runs the test (root passes permission checks, not
  // /sys's).
  const std::string locked = ::geteuid() == 0 ? "/sys" : testing::scratch("locked");
  if (::geteuid() != 0) {
    std::filesystem::create_directories(locked);
    std::filesystem::permissions(locked,
                                 std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  }
  refused(translate(train + locked + "/m.safetensors"), "cannot create a file in " + locked);
  // Nor is a FIFO (or a device: as root a rename over /dev/null would replace it; never test that).
  const std::string fifo = testing::scratch("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  refused(translate(train + fifo), fifo + ": not a regular file");

  // lm train the same.
  const Run r = lm("train --data " + lm_text() + " " + kLmTiny + " --out " + dir.string());
  INFO("stderr: ", r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("lm train: error: ") != std::string::npos);
  CHECK(r.err.find("is a directory") != std::string::npos);
  CHECK(r.out.find("step ") == std::string::npos);
}

TEST_CASE("ux.cli.a_missing_data_file_gets_no_skip_bad_lines_hint") {
  if (!have_cli()) return;
  const Run r = translate("train --data " + testing::scratch("nonexist.tsv") + " --out x --steps 1");
  INFO("stderr: ", r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("nonexist.tsv: cannot open: No such file or directory") != std::string::npos);
  CHECK(r.err.find("--skip-bad-lines") == std::string::npos);
  // A bad line keeps its hint.
  const Run bad = translate("train --data " + testing::write_bytes("edges_bad.tsv", "a\tb\nno tab\n") +
                            " --out x --steps 1");
  CHECK(bad.err.find("edges_bad.tsv:2: no tab between source and target (use --skip-bad-lines") !=
        std::string::npos);
}

TEST_CASE("ux.cli.one_thread_is_singular") {
  if (!have_cli()) return;
  const Run r = translate("train --data " + tiny_data() + " --out " + testing::scratch("t1.safetensors") +
                          " --steps 1 --threads 1 " + kTinyModel);
  INFO("stdout: ", r.out);
  CHECK(r.out.find("1 thread;") != std::string::npos);
  CHECK(r.out.find("1 threads") == std::string::npos);
  const Run l = lm("train --data " + lm_text() + " " + kLmTiny + " --threads 1 --out " +
                   testing::scratch("t1lm.safetensors"));
  CHECK(l.out.find("1 thread;") != std::string::npos);
  CHECK(l.out.find("1 threads") == std::string::npos);
  const Run c = run_program(TG_COPY_TASK, "--steps 1 --eval 1 --threads 1", "", "");
  INFO("copy_task: ", c.out);
  CHECK(c.out.find("1 thread;") != std::string::npos);
  CHECK(c.out.find("1 threads") == std::string::npos);
}

TEST_CASE("ux.tools.make_toy_data_refuses_an_out_that_is_a_file") {
  const std::string file = testing::write_bytes("toy_is_a_file", "x");
  const Run r =
      run_program("python3", std::string(TG_SOURCE_DIR) + "/tools/make_toy_data.py --out " + file, "", "");
  INFO("stderr: ", r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("Traceback") == std::string::npos);
  CHECK(r.err.find("--out " + file + ": not a directory") != std::string::npos);
  CHECK(testing::read_bytes(file) == "x");
}

TEST_CASE("ux.readme.commands_are_pasteable") {
  // Every line of the README's sh blocks is a command as written: optional flags are shown in
  // prose or on a line of their own, never as "[--flag]" (a shell passes the brackets on).
  std::ifstream in(std::string(TG_SOURCE_DIR) + "/README.md");
  REQUIRE(in);
  bool in_sh = false;
  int commands = 0;
  const std::regex bracketed(R"(\[-)");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("```")) {
      in_sh = line == "```sh";
      continue;
    }
    if (!in_sh) continue;
    ++commands;
    INFO("README line: ", line);
    CHECK(!std::regex_search(line, bracketed));
  }
  CHECK(commands > 5);
}

namespace {

// A 1-step lm model (its samples are noise; what matters is how they are printed).
std::string lm_model() {
  static const std::string path = [] {
    const std::string out = testing::scratch("edges_lm.safetensors");
    const Run r = lm("train --data " + lm_text() + " " + kLmTiny + " --out " + out);
    REQUIRE(r.status == 0);
    return out;
  }();
  return path;
}

}  // namespace

TEST_CASE("ux.cli.lm_sample_threads_default_is_what_the_help_says") {
  if (!have_cli()) return;
  const std::string sample = "sample --model " + lm_model() + " --tokens 20 --json";
  const Run help = lm("sample --help");
  CHECK(help.out.find(
            "(default OMP_NUM_THREADS if set, else 1, or all cores for a model of 32M parameters or more)") !=
        std::string::npos);
  // The tests run with OMP_NUM_THREADS=2 (tests/meson.build): without it, 1 thread; with it, its
  // value; --threads over both.
  const Run plain = lm(sample, "env -u OMP_NUM_THREADS ");
  INFO("stdout: ", plain.out, " stderr: ", plain.err);
  REQUIRE(plain.status == 0);
  CHECK(json_lines(plain.out).back().at("threads").get<int>() == 1);
  CHECK(json_lines(lm(sample, "OMP_NUM_THREADS=2 ").out).back().at("threads").get<int>() == 2);
  CHECK(json_lines(lm(sample + " --threads 2", "env -u OMP_NUM_THREADS ").out)
            .back()
            .at("threads")
            .get<int>() == 2);
}

TEST_CASE("ux.cli.lm_sample_escapes_control_bytes_on_a_terminal") {
  if (!have_cli()) return;
  if (!have_program("script"))
    TG_SKIP("script (util-linux, Debian's bsdutils) is not installed: no pseudo-terminal to print to");
  // The prompt is printed first, as given: an escape sequence in it shows as text on a terminal
  // (script(1) runs lm on a pseudo-terminal), and goes through unchanged into a pipe.
  const std::string args =
      "sample --model " + lm_model() + " --tokens 5 --prompt \"$(printf 'red \\033[31m!')\"";
  const std::string tty_out = testing::scratch("edges_tty.txt");
  const std::string sh = testing::write_bytes("edges_tty.sh", kLm + " " + args + "\n");
  REQUIRE(std::system(("script -qec 'sh " + sh + "' /dev/null >" + tty_out + " 2>&1").c_str()) == 0);
  const std::string on_tty = testing::read_bytes(tty_out);
  INFO("on the terminal: ", on_tty);
  CHECK(on_tty.find("red \\x1b[31m!") != std::string::npos);
  CHECK(on_tty.find('\x1b') == std::string::npos);
  const Run piped = lm(args);
  CHECK(piped.out.starts_with("red \x1b[31m!"));
}

TEST_CASE("ux.cli.copy_task_interrupted_does_not_claim_it_saved") {
  if (!have_cli()) return;
  // Interrupt a long run after its first progress line (step 20): the loop finishes the step and
  // stops (130); copy_task writes no file, so it must not say it saved one. Under ASan a batch of 8
  // (3 s to step 20 instead of 20; 40 s of training still ahead); in a release build the default 64
  // (at batch 8 the whole run takes 0.6 s, too little to be sure the signal lands before the end).
  const std::string out = testing::scratch("copy_int.txt"), rc = testing::scratch("copy_int_rc.txt");
  const std::string batch = kSanitized ? " --batch-size 8" : "";
  const std::string script = std::string(TG_COPY_TASK) + " --steps 300" + batch + " >" + out +
                             " 2>&1 & pid=$!; while ! grep -q '^step ' " + out +
                             " 2>/dev/null; do sleep 0.05; done; kill -INT $pid; wait $pid; echo $? >" + rc;
  REQUIRE(std::system(("sh " + testing::write_bytes("copy_int.sh", script)).c_str()) == 0);
  const std::string text = testing::read_bytes(out);
  INFO("output: ", text);
  CHECK(testing::read_bytes(rc) == "130\n");
  CHECK(text.find("interrupted at step ") != std::string::npos);
  CHECK(text.find("saved") == std::string::npos);
}

TEST_CASE("ux.cli.a_new_run_does_not_replace_an_earlier_runs_files") {
  if (!have_cli()) return;
  // lm: a second `train` to the same --out without --resume is refused (status 2) and its files
  // stay as they were; --overwrite starts over; --overwrite with --resume is a contradiction.
  const std::string out = testing::scratch("edges_again.safetensors"),
                    last = testing::scratch("edges_again.last.safetensors"),
                    log = testing::scratch("edges_again.log.jsonl");
  const std::string train = "train --data " + lm_text() + " " + kLmTiny + " --out " + out;
  REQUIRE(lm(train).status == 0);
  const std::string best = testing::read_bytes(out), saved = testing::read_bytes(last),
                    logged = testing::read_bytes(log);
  const Run again = lm(train + " --seed 7");
  INFO("stderr: ", again.err);
  CHECK(again.status == 2);
  CHECK(again.err.find(out + ", " + last + " and " + log +
                       " already exist: --resume continues that run, --overwrite") != std::string::npos);
  CHECK(testing::read_bytes(out) == best);
  CHECK(testing::read_bytes(last) == saved);
  CHECK(testing::read_bytes(log) == logged);
  const Run both = lm(train + " --resume --overwrite");
  CHECK(both.status == 2);
  CHECK(both.err.find("give one") != std::string::npos);
  // Fine-tuning onto the model it starts from: the message says so (--resume would be wrong there).
  const Run onto =
      lm("train --data " + lm_text() + " --steps 2 --eval-every 2 --init-from " + out + " --out " + out);
  CHECK(onto.status == 2);
  CHECK(onto.err.find("--out " + out + " is the model given to start from: --overwrite replaces it") !=
        std::string::npos);
  CHECK(testing::read_bytes(out) == best);
  const Run over = lm(train + " --seed 7 --overwrite");
  INFO("stderr: ", over.err);
  CHECK(over.status == 0);
  CHECK(testing::read_bytes(out) != best);  // another seed: another model
  // translate, with only the best model left from an earlier run, then only its log.
  const std::string tout = testing::scratch("edges_again_t.safetensors"),
                    tlog = testing::scratch("edges_again_t.log.jsonl");
  const std::string ttrain = "train --data " + tiny_data() + " --out " + tout + " --steps 2 " + kTinyModel;
  REQUIRE(translate(ttrain).status == 0);
  std::filesystem::remove(testing::scratch("edges_again_t.last.safetensors"));
  std::filesystem::remove(tlog);
  const Run tagain = translate(ttrain);
  INFO("stderr: ", tagain.err);
  CHECK(tagain.status == 2);
  CHECK(tagain.err.find(tout + " already exists: --resume continues that run, --overwrite starts a new run "
                               "that replaces it, or give another --out") != std::string::npos);
  std::filesystem::remove(tout);
  testing::write_bytes("edges_again_t.log.jsonl", "{}\n");
  const Run tlogged = translate(ttrain);
  INFO("stderr: ", tlogged.err);
  CHECK(tlogged.status == 2);
  CHECK(tlogged.err.find(tlog +
                         " already exists (the log of a run that saved no model: nothing to --resume): "
                         "--overwrite starts a new run") != std::string::npos);
  CHECK(testing::read_bytes(tlog) == "{}\n");
  CHECK(translate(ttrain + " --overwrite").status == 0);
}

TEST_CASE("ux.cli.a_run_never_writes_over_its_data_or_one_output_over_another") {
  if (!have_cli()) return;
  // Each refused before anything is read or written (status 2), --overwrite or not: the data left
  // as it was. Found by trying: `--log DATA` had replaced the training text with the run's log.
  const std::string text = testing::read_bytes(lm_text());
  const std::string out = testing::scratch("edges_clash.safetensors");
  const std::string train = "train --data " + lm_text() + " " + kLmTiny;
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {" --out " + out + " --log " + lm_text(), "--log " + lm_text() + " is the --data file " + lm_text()},
      {" --out " + out + " --log " + lm_text() + " --overwrite", "is the --data file"},
      {" --out " + lm_text() + " --overwrite", "--out " + lm_text() + " is the --data file"},
      {" --out " + out + " --valid " + out + " --overwrite", "--out " + out + " is the --valid file"},
      {" --out " + out + " --log " + out, "--log " + out + " is also --out: the run writes both"},
      {" --out " + out + " --log " + testing::scratch("edges_clash.last.safetensors"),
       "is also the run's last checkpoint"}};
  for (const Case& c : cases) {
    const Run r = lm(train + c.args);
    INFO("args: ", c.args, "\nstderr: ", r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(testing::read_bytes(lm_text()) == text);
    CHECK_FALSE(exists(out));
  }
  // --resume with the --valid its checkpoint saved: checked against it too.
  const std::string valid_text = testing::write_bytes("edges_clash_valid.txt", text);
  REQUIRE(lm(train + " --out " + out + " --valid " + valid_text).status == 0);
  const Run resumed = lm(train + " --out " + out + " --resume --steps 4 --log " + valid_text);
  INFO("stderr: ", resumed.err);
  CHECK(resumed.status == 2);
  CHECK(resumed.err.find("--log " + valid_text + " is the --valid file") != std::string::npos);
  CHECK(testing::read_bytes(valid_text) == text);
  // translate the same way: --log onto the validation file.
  const std::string valid = testing::write_bytes("edges_clash_valid.tsv", testing::read_bytes(tiny_data()));
  const Run t = translate("train --data " + tiny_data() + " --valid " + valid + " --out " + out + " --log " +
                          valid + " --steps 2 " + kTinyModel);
  INFO("stderr: ", t.err);
  CHECK(t.status == 2);
  CHECK(t.err.find("--log " + valid + " is the --valid file") != std::string::npos);
  CHECK(testing::read_bytes(valid) == testing::read_bytes(tiny_data()));
}

TEST_CASE("ux.cli.sentencepiece_options_need_the_sentencepiece_tokenizer") {
  if (!have_cli()) return;
  const std::string out = testing::scratch("edges_spm_opts.safetensors");
  const Run byte = lm("train --data " + lm_text() + " " + kLmTiny + " --out " + out + " --spm-type unigram");
  INFO("stderr: ", byte.err);
  CHECK(byte.status == 2);
  CHECK(byte.err.find("--spm-type applies only with --tokenizer spm; this run has the byte tokenizer") !=
        std::string::npos);
  const Run word = translate("train --data " + tiny_data() + " --out " + out + " --steps 2 " + kTinyModel +
                             " --vocab-size 300");
  CHECK(word.status == 2);
  CHECK(word.err.find("--vocab-size applies only with --tokenizer spm; this run has the word tokenizer") !=
        std::string::npos);
  const Run separate = translate("train --data " + tiny_data() + " --out " + out + " --steps 2 " +
                                 kTinyModel + " --tokenizer char --spm-separate");
  CHECK(separate.status == 2);
  CHECK(separate.err.find(
            "--spm-separate applies only with --tokenizer spm; this run has the char tokenizer") !=
        std::string::npos);
  CHECK(!std::filesystem::exists(out));
  // Resumed, the tokenizer is the checkpoint's.
  const Run resumed =
      lm("train --data " + lm_text() + " --out " + lm_model() + " --steps 3 --resume --vocab-size 300");
  CHECK(resumed.status == 2);
  CHECK(resumed.err.find("--vocab-size applies only with --tokenizer spm; " +
                         testing::scratch("edges_lm.last.safetensors") + " has the byte tokenizer") !=
        std::string::npos);
}

TEST_CASE("ux.cli.commands_list_only_the_options_they_use") {
  if (!have_cli()) return;
  const Run exp = lm("export --help"), tok = lm("tokenize --help"), sample = lm("sample --help");
  REQUIRE(exp.status == 0);
  CHECK(exp.out.find("--hf DIR") != std::string::npos);
  CHECK(exp.out.find("--strict") == std::string::npos);   // no input text
  CHECK(exp.out.find("--threads") == std::string::npos);  // no products
  CHECK(tok.out.find("--strict") != std::string::npos);
  CHECK(tok.out.find("--threads") == std::string::npos);
  CHECK(sample.out.find("--strict") != std::string::npos);
  CHECK(sample.out.find("--threads") != std::string::npos);
  CHECK(lm("export --model " + lm_model() + " --hf x --threads 2").status == 2);
}

TEST_CASE("ux.cli.one_of_a_count_is_singular") {
  if (!have_cli()) return;
  const Run r = lm("train --data " + lm_text() + " --out " + testing::scratch("edges_one.safetensors") +
                   " --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 1 --steps 1");
  INFO("stdout: ", r.out, " stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("; 1 step of 1 window x 16 tokens") != std::string::npos);
  // translate: one training pair, one step.
  const std::string data = testing::write_bytes("edges_one.tsv", "a b\tb a\n");
  const Run t = translate("train --data " + data + " --out " + testing::scratch("edges_one_t.safetensors") +
                          " --steps 1 " + kTinyModel);
  INFO("stdout: ", t.out, " stderr: ", t.err);
  REQUIRE(t.status == 0);
  CHECK(t.out.find("; 1 training pair, 0 validation;") != std::string::npos);
  CHECK(t.out.find("; 1 step (1 per epoch)") != std::string::npos);
}

TEST_CASE("ux.cli.translate_decode_names_the_byte_of_invalid_utf8") {
  if (!have_cli()) return;
  const std::string model = testing::scratch("edges_dec.safetensors");
  REQUIRE(translate("train --data " + tiny_data() + " --out " + model + " --steps 1 " + kTinyModel).status ==
          0);
  const Run r = translate("decode --model " + model, "a b c\nb \xff c\n");
  CHECK(r.status == 1);
  CHECK(r.err.find("stdin:2: invalid UTF-8 at byte offset 2 of the line") != std::string::npos);
}

TEST_CASE("ux.cli.translate_decode_escapes_control_bytes_on_a_terminal") {
  if (!have_cli()) return;
  if (!have_program("script"))
    TG_SKIP("script (util-linux, Debian's bsdutils) is not installed: no pseudo-terminal to print to");
  // Every target is two BEL characters: after 40 steps the model translates anything into them.
  std::string data;
  for (int i = 0; i < 200; ++i)
    data += std::string(1, "abcd"[i % 4]) + " " + "abcd"[i / 4 % 4] + " " + "abcd"[i / 16 % 4] + "\t\a \a\n";
  const std::string model = testing::scratch("edges_bell.safetensors");
  REQUIRE(translate("train --data " + testing::write_bytes("edges_bell.tsv", data) + " --out " + model +
                    " --steps 40 --tokenizer char --threads 1 " + kTinyModel)
              .status == 0);
  const std::string decode = kTranslate + " decode --model " + model;
  const Run piped = translate("decode --model " + model, "a b c\n");
  REQUIRE(piped.status == 0);
  REQUIRE(piped.out.find('\a') != std::string::npos);  // a pipe gets the bytes
  const std::string tty_out = testing::scratch("edges_bell_tty.txt");
  const std::string sh = testing::write_bytes("edges_bell.sh", "printf 'a b c\\n' | " + decode + "\n");
  REQUIRE(std::system(("script -qec 'sh " + sh + "' /dev/null >" + tty_out + " 2>&1").c_str()) == 0);
  const std::string on_tty = testing::read_bytes(tty_out);
  INFO("on the terminal: ", on_tty);
  CHECK(on_tty.find("\\x07") != std::string::npos);
  CHECK(on_tty.find('\a') == std::string::npos);
}

TEST_CASE("ux.cli.a_warmup_as_long_as_the_run_is_warned_about") {
  if (!have_cli()) return;
  // lm's default --warmup 60 against a 3-step trial run: the rate only rises; say so, once.
  const std::string tiny = "--n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --eval-every 3";
  Run r = lm("train --data " + lm_text() + " " + tiny + " --steps 3 --out " +
             testing::scratch("warm.safetensors"));
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("warning: --warmup 60 is not below the run's 3 steps") != std::string::npos);
  CHECK(r.err.find("to 0.0001 at its last step (--lr 0.002)") != std::string::npos);  // 0.002 * 3 / 60
  // A warmup shorter than the run: no warning.
  r = lm("train --data " + lm_text() + " " + tiny + " --steps 3 --warmup 2 --out " +
         testing::scratch("warm2.safetensors"));
  REQUIRE(r.status == 0);
  CHECK(r.err.find("--warmup") == std::string::npos);
  // translate's too (its schedules: noam, cosine; constant has no warmup to speak of).
  r = translate("train --data " + tiny_data() + " --out " + testing::scratch("warm3.safetensors") +
                " --steps 2 --warmup 5 " + kTinyModel);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("warning: --warmup 5 is not below the run's 2 steps") != std::string::npos);
}

TEST_CASE("ux.cli.a_text_file_as_model_is_called_not_a_safetensors_file") {
  if (!have_cli()) return;
  const Run r = lm("sample --model " + lm_text() + " --tokens 2");
  INFO("stderr: ", r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find(lm_text() + ": header length") != std::string::npos);
  CHECK(r.err.find("this is not a safetensors file") != std::string::npos);
  // The lm train message of a text too short to train on names no zero-token validation part.
  const std::string two = testing::write_bytes("edges_two_bytes.txt", "ab");
  const Run t = lm("train --data " + two + " --out " + testing::scratch("two.safetensors") + " --steps 2");
  CHECK(t.status == 1);
  CHECK(t.err.find(two + ": 2 tokens for training, fewer than --block-size + 1") != std::string::npos);
}

TEST_CASE("ux.cli.omp_num_threads_that_is_not_a_thread_count_is_refused_by_name") {
  if (!have_cli()) return;
  // The OpenMP runtime ignores what it cannot parse (and runs on every core) and takes any count;
  // the programs refuse both, as --threads would (status 2), and still print their help.
  for (const std::string value : {"abc", "0", "-3", "99999", "2x"}) {
    const Run r =
        lm("sample --model " + testing::scratch("none.safetensors"), "OMP_NUM_THREADS='" + value + "' ");
    INFO("OMP_NUM_THREADS=", value, "\nstderr: ", r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find("OMP_NUM_THREADS=\"" + value + "\" is not a whole number from 1 to 1024") !=
          std::string::npos);
  }
  const Run t =
      translate("decode --model " + testing::scratch("none.safetensors"), "", "OMP_NUM_THREADS=many ");
  CHECK(t.status == 2);
  CHECK(t.err.find("OMP_NUM_THREADS=\"many\"") != std::string::npos);
  CHECK(lm("sample --help", "OMP_NUM_THREADS=abc ").status == 0);
  for (const std::string value : {"1", "2", " 2 ", "2,1"}) {  // a count, spaces around it, a list per level
    const Run ok =
        lm("sample --model " + testing::scratch("none.safetensors"), "OMP_NUM_THREADS='" + value + "' ");
    INFO("OMP_NUM_THREADS=", value, "\nstderr: ", ok.err);
    CHECK(ok.status == 1);  // past the check: the model file is missing
  }
}

TEST_CASE("ux.cli.an_svg_to_stdout_is_the_svg_alone") {
  if (!have_cli()) return;
  // --out /dev/stdout | rsvg-convert: the picture on stdout, the "wrote" note on stderr; stdout
  // redirected to a file is written through the descriptor (the shell's file, not replaced).
  const std::string model = testing::scratch("edges_svg_out.safetensors");
  REQUIRE(lm("train --data " + lm_text() + " " + kLmTiny + " --out " + model).status == 0);
  const Run r = lm("attention --model " + model + " --prompt 'the cat' --out /dev/stdout");
  INFO("stderr: ", r.err);
  CHECK(r.status == 0);
  CHECK(r.out.starts_with("<svg"));
  CHECK(r.out.ends_with("</svg>\n"));
  CHECK(r.err.find("wrote /dev/stdout") != std::string::npos);
}
