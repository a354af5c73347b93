// Reliability (issue 6): loads that fail change nothing, saves that fail keep the previous file,
// kill -9 + --resume continues exactly, NaN/Inf steps are never applied, and the CLI rejects bad
// options with a usage line. The translate runs use the tiny task of test_cli.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "io/file.hpp"
#include "io/safetensors.hpp"
#include "nn/family/transformer_family.hpp"
#include "nn/loss.hpp"
#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"
#include "train/guard.hpp"

using namespace tg;
using namespace tg::nn;
using namespace tg::io;
using namespace tg::testing::cli;
using testing::error_of, testing::tiny_config, testing::values_of;

namespace {

CheckpointInfo small_info() {
  CheckpointInfo info;
  info.config = tiny_config();
  info.src = vocab_tokenizer(TokenizerKind::word,
                             Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c"}));
  info.tgt = vocab_tokenizer(TokenizerKind::word,
                             Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "x", "y"}));
  return info;
}

// Tensors of two safetensors files are bitwise equal (names, shapes, values).
void check_same_tensors(const std::string& a, const std::string& b, const std::string& only_prefix = "") {
  const TensorFile fa = read_safetensors(a), fb = read_safetensors(b);
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    if (!fa.tensors[i].first.starts_with(only_prefix)) continue;
    INFO(fa.tensors[i].first);
    CHECK(fa.tensors[i].first == fb.tensors[i].first);
    CHECK(fa.tensors[i].second.to_vector() == fb.tensors[i].second.to_vector());
  }
}

int64_t saved_step(const std::string& path) {
  const Checkpoint ck = read_checkpoint(path);
  REQUIRE(ck.info.train);
  return ck.info.train->step;
}

int temporaries_in_scratch() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(testing::scratch_dir()))
    n += e.path().filename().string().find(".tmp-") != std::string::npos;
  return n;
}

}  // namespace

// ---- checkpoints: config vs weights, nothing half-loaded, nothing corrupt written ----------------

TEST_CASE("faults.checkpoint.parameter_count_from_config") {
  for (const bool norm_first : {false, true}) {
    TransformerConfig c = tiny_config();
    c.norm_first = norm_first;
    c.enc_layers = 2;
    c.dec_layers = 3;
    const Transformer m(c, 1);
    CHECK(transformer_parameter_count(c) == static_cast<double>(m.num_parameters()));
  }
}

TEST_CASE("faults.checkpoint.config_that_disagrees_with_the_weights_is_refused_before_allocating") {
  Transformer model(tiny_config(), 1);
  const std::string path = testing::scratch("liar.safetensors");
  Metadata md = testing::tiny_metadata();
  write_safetensors(path, model.named_parameters(), md);
  CHECK_NOTHROW(read_checkpoint(path));
  // The same weights with a config asking for a model of 2^40 parameters: rejected at read time,
  // before anything would build that model.
  TransformerConfig huge = tiny_config();
  huge.d_model = 1 << 20;
  huge.heads = 1;
  md["config"] = config_to_json(huge);
  write_safetensors(path, model.named_parameters(), md);
  std::string msg = error_of([&] { read_checkpoint(path); });
  CHECK(msg.find("liar.safetensors") != std::string::npos);
  CHECK(msg.find("config and weights disagree") != std::string::npos);
  // A positional table of 2^40 rows.
  TransformerConfig tall = tiny_config();
  tall.max_len = int64_t{1} << 40;
  md["config"] = config_to_json(tall);
  write_safetensors(path, model.named_parameters(), md);
  msg = error_of([&] { read_checkpoint(path); });
  CHECK(msg.find("max_len 1099511627776 is over the limit") != std::string::npos);
}

TEST_CASE("faults.checkpoint.failed_loads_leave_model_and_optimizer_unchanged") {
  Transformer trained(tiny_config(), 1), model(tiny_config(), 2);
  Adam opt(model.named_parameters(), {.lr = 1e-2f});
  // Give the optimizer some state to lose.
  const Batch b = testing::tiny_batch();
  label_smoothed_cross_entropy(model.forward(b), b.labels, 0.1f).backward();
  opt.step();
  const auto params_before = values_of(model.named_parameters());
  const auto state_before = values_of(opt.state());

  Adam other(trained.named_parameters(), {});
  const NamedTensors good = trained.named_parameters();
  auto with = [&](auto&& change) {
    NamedTensors t = good;
    for (auto& [n, v] : other.state()) t.emplace_back(kOptimPrefix + n, v);
    change(t);
    TensorFile f;
    f.tensors = t;
    return f;
  };
  const std::vector<TensorFile> bad = {
      with([](NamedTensors& t) { t.erase(t.begin() + 3); }),  // a weight missing
      with([](NamedTensors& t) {
        t[2].second = Tensor::zeros({1, 2, 3});
      }),                                                                                 // wrong shape
      with([](NamedTensors& t) { t.emplace_back("extra.weight", Tensor::zeros({2})); }),  // unexpected
  };
  for (const TensorFile& f : bad) {
    CHECK_THROWS_AS(load_weights(model, f, "bad.safetensors"), SafetensorsError);
    CHECK(values_of(model.named_parameters()) == params_before);
  }
  // Optimizer state: the weights are right but one moment has the wrong shape, or one is missing.
  const TensorFile wrong_moment = with([](NamedTensors& t) {
    for (auto& [n, v] : t)
      if (n.starts_with("optim.exp_avg_sq.")) {
        v = Tensor::zeros({3});
        break;
      }
  });
  CHECK_THROWS_AS(load_optimizer_state(opt, wrong_moment, "bad.safetensors"), SafetensorsError);
  const TensorFile missing_moment = with([](NamedTensors& t) {
    std::erase_if(t, [](const auto& kv) {
      return kv.first.starts_with("optim.exp_avg.") && kv.first.ends_with("bias");
    });
  });
  CHECK_THROWS_AS(load_optimizer_state(opt, missing_moment, "bad.safetensors"), SafetensorsError);
  CHECK(values_of(opt.state()) == state_before);
  CHECK(opt.step_count() == 1);
}

TEST_CASE("faults.checkpoint.non_finite_weights_are_never_written") {
  Transformer model(tiny_config(), 1);
  const std::string path = testing::scratch("finite.safetensors");
  save_checkpoint(path, model, small_info());
  const std::string before = testing::read_bytes(path);
  for (const float poison :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    Tensor w = model.parameter("transformer.decoder.layers.0.linear2.weight");
    const float keep = w.data()[5];
    w.data()[5] = poison;
    const std::string msg = error_of([&] { save_checkpoint(path, model, small_info()); });
    CHECK(msg.find("finite.safetensors") != std::string::npos);
    CHECK(msg.find("transformer.decoder.layers.0.linear2.weight") != std::string::npos);
    CHECK(msg.find("element 5 of [8, 16]") != std::string::npos);
    CHECK(testing::read_bytes(path) == before);
    w.data()[5] = keep;
  }
  CHECK(temporaries_in_scratch() == 0);
}

TEST_CASE("faults.save.stale_temporaries_are_removed") {
  const std::string path = testing::scratch("stale.safetensors");
  const std::string t1 = testing::write_bytes(".stale.safetensors.tmp-Ab3xYz", "half a file");
  const std::string keep1 = testing::write_bytes(".stale.safetensors.tmp-toolongname", "not ours");
  const std::string keep2 = testing::write_bytes(".other.safetensors.tmp-Ab3xYz", "another file's");
  CHECK(remove_stale_temporaries(path) == 1);
  CHECK_FALSE(std::filesystem::exists(t1));
  CHECK(std::filesystem::exists(keep1));
  CHECK(std::filesystem::exists(keep2));
  std::filesystem::remove(keep1);
  std::filesystem::remove(keep2);
  CHECK(remove_stale_temporaries(testing::scratch("no/such/dir/x.safetensors")) == 0);
}

// ---- the CLI --------------------------------------------------------------------------------

TEST_CASE("faults.cli.more_usage_errors_exit_2") {
  if (!have_cli()) return;
  const std::string d = "--data " + tiny_data() + " --out " + testing::scratch("u.safetensors");
  CHECK_USAGE_ERROR("train " + d + " stray", "unexpected argument 'stray'");
  CHECK_USAGE_ERROR("train " + d + " --lr --steps 3", "--lr: needs a value");
  CHECK_USAGE_ERROR("train " + d + " --json=1", "--json: takes no value");
  CHECK_USAGE_ERROR("train " + d + " --steps -5", "--steps: must be >= 0, got -5");
  CHECK_USAGE_ERROR("train " + d + " --heads 0", "--heads: must be in [1, 64], got 0");
  CHECK_USAGE_ERROR("train " + d + " --enc-layers 0", "--enc-layers: must be in [1, 64], got 0");
  CHECK_USAGE_ERROR("train " + d + " --d-ff -1", "--d-ff: must be in [1, 1048576], got -1");
  CHECK_USAGE_ERROR("train " + d + " --batch-size 99999999999999999999", "expects an integer");
  CHECK_USAGE_ERROR("train " + d + " --threads 1025", "--threads: must be in [1, 1024], got 1025");
  CHECK_USAGE_ERROR("train " + d + " --threads -1", "--threads: must be in [1, 1024], got -1");
  CHECK_USAGE_ERROR("train " + d + " --lr nan", "--lr: expects a number, got 'nan'");
  CHECK_USAGE_ERROR("train " + d + " --on-nan ignore", "--on-nan: must be one of stop|skip");
  CHECK_USAGE_ERROR("train " + d + " --on-save-error retry", "--on-save-error: must be one of continue|stop");
  CHECK_USAGE_ERROR("eval --model m --data " + tiny_data() + " --batch-size 0", "--batch-size: must be >= 1");
  CHECK_USAGE_ERROR("eval --model m --data " + tiny_data() + " --threads 0",
                    "--threads: must be in [1, 1024]");
  CHECK_USAGE_ERROR("decode --model m --batch-size -3", "--batch-size: must be >= 1, got -3");
  CHECK_USAGE_ERROR("decode --model m --threads 100000", "--threads: must be in [1, 1024], got 100000");
  CHECK_USAGE_ERROR("decode --model", "--model: needs a value");
  CHECK_USAGE_ERROR("attention --model m --src x --out y --max-len -1", "--max-len: must be in [0, 1048576]");
}

TEST_CASE("faults.cli.bad_checkpoints_exit_1_and_name_the_file") {
  if (!have_cli()) return;
  const std::string model = testing::scratch("cli_good.safetensors");
  Run r = translate("train --data " + tiny_data() + " --out " + model + " " + kTinyModel + " --steps 2");
  REQUIRE(r.status == 0);
  const std::string bytes = testing::read_bytes(model);
  // Truncated, a flipped header byte, the header length of another file, not a checkpoint at all.
  std::string flipped = bytes;
  flipped[20] = '\x01';
  std::string longer = bytes;
  longer[0] = static_cast<char>(longer[0] + 8);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {bytes.substr(0, bytes.size() / 2), "out of range"},  // the header is intact, the data short
      {flipped, "header"},
      {longer, "cli_bad.safetensors"},
      {testing::safetensors_bytes("{}", ""), "has no \"format\""},
      {"", "too short"}};
  for (const auto& [content, text] : cases) {
    const std::string bad = testing::write_bytes("cli_bad.safetensors", content);
    for (const std::string& cmd : {"decode --model " + bad, "eval --model " + bad + " --data " + tiny_data(),
                                   "train --data " + tiny_data() + " --out " +
                                       testing::scratch("fresh.safetensors") + " --init " + bad}) {
      r = translate(cmd, "a b c\n");
      INFO(cmd, "\nstderr: ", r.err);
      CHECK(r.status == 1);
      CHECK(r.err.find("cli_bad.safetensors") != std::string::npos);
      CHECK(r.err.find(text) != std::string::npos);
      CHECK(r.out.empty());
      CHECK_MESSAGE(r.written.empty(), "files written: ", join(r.written));
    }
    CHECK_FALSE(std::filesystem::exists(testing::scratch("fresh.safetensors")));
  }
}

TEST_CASE("faults.cli.failed_save_keeps_the_previous_checkpoint") {
  if (!have_cli()) return;
  const std::string model = testing::scratch("full.safetensors"),
                    last = testing::scratch("full.last.safetensors");
  const std::string common = "train --data " + tiny_data() + " --out " + model + " " + kTinyModel +
                             " --threads 1 --log-every 2 --eval-every 4 --json ";
  Run r = translate(common + "--steps 4 --overwrite");  // each subcase runs this again
  REQUIRE(r.status == 0);
  const std::string best_before = testing::read_bytes(model), last_before = testing::read_bytes(last);
  REQUIRE(saved_step(last) == 4);

  // A file-size limit of 8-16 KB (sh counts 512- or 1024-byte blocks) stands for a full disk: every
  // checkpoint write fails half-way, the small JSON log still fits.
  const std::string disk_full = "ulimit -f 16; ";
  SUBCASE("continue (the default): training goes on, later saves retry, the final failure exits 1") {
    r = translate(common + "--steps 12 --resume", "", disk_full);
    INFO("stderr: ", r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("error: step 8: saving " + model) != std::string::npos);
    CHECK(r.err.find("File too large") != std::string::npos);
    CHECK(r.err.find("keeps its previous content; training continues") != std::string::npos);
    CHECK(r.err.find("error: step 12: saving " + last) != std::string::npos);
    CHECK(r.err.find("this was the final save") != std::string::npos);
    const auto l = losses(r.out);
    REQUIRE(!l.empty());
    CHECK(l.back().first == 12);  // trained to the end
    const auto lines = json_lines(r.out);
    CHECK(lines.back().at("failed_saves").get<int64_t>() == 4);
  }
  SUBCASE("stop: the run ends at the first failed save") {
    r = translate(common + "--steps 12 --resume --on-save-error stop", "", disk_full);
    INFO("stderr: ", r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("stopping (--on-save-error stop)") != std::string::npos);
    CHECK(losses(r.out).back().first == 8);
  }
  // Either way the files hold exactly what they held, and no temporary is left behind.
  CHECK(testing::read_bytes(model) == best_before);
  CHECK(testing::read_bytes(last) == last_before);
  CHECK(temporaries_in_scratch() == 0);
  // And the run resumes from there once the disk has room again.
  r = translate(common + "--steps 6 --resume");
  CHECK(r.status == 0);
  CHECK(saved_step(last) == 6);
  // An output directory that does not exist is an error before training, not at the first save.
  r = translate("train --data " + tiny_data() + " --out " + testing::scratch("no/such/dir/m.safetensors") +
                " " + kTinyModel + " --steps 2");
  CHECK(r.status == 1);
  CHECK(r.err.find("directory " + testing::scratch("no/such/dir") + " does not exist") != std::string::npos);
  CHECK(r.out.empty());
  CHECK_MESSAGE(r.written.empty(), "files written: ", join(r.written));
}

TEST_CASE("faults.cli.kill_9_then_resume_continues_exactly") {
  if (!have_cli()) return;
  // One thread and dropout on: the comparison is exact and covers the dropout generator too.
  const std::string opts = "train --data " + tiny_data() + " " + kTinyModel +
                           " --threads 1 --dropout 0.2 --seed 3 --eval-every 5 --log-every 1 --json ";
  const std::string killed = testing::scratch("killed.safetensors"),
                    killed_last = testing::scratch("killed.last.safetensors");
  // Start a long run; once its first checkpoint exists, let it train (and save) a little more, then
  // SIGKILL it: no handler runs, possibly in the middle of writing a checkpoint.
  const std::string rc = testing::scratch("kill_rc.txt");
  const std::string script = kTranslate + " " + opts + "--steps 1000000 --out " + killed +
                             " >/dev/null 2>&1 & pid=$!; " + "i=0; while [ ! -f " + killed_last +
                             " ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done; " +
                             "sleep 0.2; kill -9 $pid; wait $pid; echo $? >" + rc;
  REQUIRE(std::system(("sh " + testing::write_bytes("kill9.sh", script) + " 2>/dev/null").c_str()) == 0);
  CHECK(testing::read_bytes(rc) == "137\n");  // 128 + SIGKILL
  const int64_t k = saved_step(killed_last);
  MESSAGE("killed after the checkpoint of step ", k);
  REQUIRE(k >= 5);
  CHECK(k % 5 == 0);
  const std::string total = std::to_string(k + 10);

  // Resume to k + 10 steps, and compare with one uninterrupted run of k + 10 steps (the noam
  // schedule does not depend on the total).
  Run resumed = translate(opts + "--steps " + total + " --out " + killed + " --resume");
  INFO("stderr: ", resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(temporaries_in_scratch() == 0);  // a half-written checkpoint of the killed run is cleaned up
  const std::string ref = testing::scratch("uninterrupted.safetensors");
  Run full = translate(opts + "--steps " + total + " --out " + ref);
  REQUIRE(full.status == 0);
  const auto lr = losses(resumed.out), lf = losses(full.out);
  REQUIRE(lr.size() == 10);
  REQUIRE(lf.size() == static_cast<size_t>(k + 10));
  for (size_t i = 0; i < 10; ++i) {
    CHECK(lr[i].first == k + 1 + static_cast<int64_t>(i));
    CHECK(lr[i] == lf[static_cast<size_t>(k) + i]);
  }
  check_same_tensors(killed_last, testing::scratch("uninterrupted.last.safetensors"));
}

TEST_CASE("faults.cli.nan_gradient_stop_saves_the_last_good_state") {
  if (!have_cli()) return;
  const std::string common = "train --data " + tiny_data() + " " + kTinyModel +
                             " --threads 1 --dropout 0 --eval-every 2 --log-every 1 --json --steps 10 ";
  const std::string out = testing::scratch("nan.safetensors"),
                    last = testing::scratch("nan.last.safetensors");
  // The gradient of one parameter in the middle of the model turns NaN at step 5.
  const char* param = "transformer.decoder.layers.0.linear1.weight";
  Run r = translate_with_faults(std::string("5:") + param, common + "--out " + out);
  INFO("stderr: ", r.err);
  CHECK(r.status == 3);
  CHECK(r.err.find(std::string("step 5: the gradient of ") + param + " (nan at element") !=
        std::string::npos);
  CHECK(r.err.find("the step was not applied") != std::string::npos);
  CHECK(r.err.find("--on-nan stop") != std::string::npos);
  const auto lines = json_lines(r.out);
  REQUIRE(!lines.empty());
  CHECK(lines.back().at("stopped_on_nan").get<bool>());
  CHECK(lines.back().at("step").get<int64_t>() == 4);
  CHECK(losses(r.out).back().first == 4);
  // What was saved is the state after step 4, bit for bit (weights and optimizer): compare with a
  // clean run of 4 steps.
  CHECK(saved_step(last) == 4);
  const std::string ref = testing::scratch("clean4.safetensors");
  REQUIRE(translate("train --data " + tiny_data() + " " + kTinyModel +
                    " --threads 1 --dropout 0 --eval-every 2 --log-every 1 --json --steps 4 --out " + ref)
              .status == 0);
  check_same_tensors(last, testing::scratch("clean4.last.safetensors"));

  // A NaN loss is reported as such.
  r = translate_with_faults("2:loss", common + "--overwrite --out " + out);
  CHECK(r.status == 3);
  CHECK(r.err.find("step 2: the loss is nan") != std::string::npos);
}

TEST_CASE("faults.cli.nan_gradient_skip_goes_on") {
  if (!have_cli()) return;
  const std::string out = testing::scratch("skip.safetensors");
  Run r = translate_with_faults("3", "train --data " + tiny_data() + " --out " + out + " " + kTinyModel +
                                         " --threads 1 --log-every 1 --json --steps 8 --on-nan skip");
  INFO("stderr: ", r.err);
  CHECK(r.status == 0);
  CHECK(r.err.find("step 3: the gradient of generator.bias (nan at element") != std::string::npos);
  CHECK(r.err.find("--on-nan skip: batch dropped, 1 skipped so far") != std::string::npos);
  const auto lines = json_lines(r.out);
  CHECK(lines.back().at("skipped_steps").get<int64_t>() == 1);
  CHECK(losses(r.out).back().first == 8);
  // 8 batches, 7 updates: the optimizer's own step count did not advance on the skipped one.
  const Checkpoint ck = read_checkpoint(testing::scratch("skip.last.safetensors"));
  REQUIRE(ck.info.train);
  CHECK(ck.info.train->step == 8);
  CHECK(ck.file.find("optim.step")->item() == 7.0f);
  CHECK_FALSE(first_non_finite_parameter(ck.file.tensors).has_value());
}

// ---- out of memory: a clear error and exit status 1, never an abort, no checkpoint damaged -------
// translate runs under an address-space limit (prlimit --as; it needs about 8 MB of its own here).
// Not under AddressSanitizer, which reserves terabytes of address space for its shadow memory.
TEST_CASE("checkpoint.cli.out_of_memory_exits_1_and_keeps_files" * doctest::skip(kSanitized)) {
  if (!have_cli()) return;
  // A 33 MB checkpoint (d_model 384, 2 + 2 layers) and an existing model file that must keep its bytes.
  TransformerConfig big = tiny_config();
  big.d_model = 384;
  big.d_ff = 1536;
  big.enc_layers = big.dec_layers = 2;
  CheckpointInfo info = small_info();
  info.config = big;
  const std::string model = testing::scratch("oom_big.safetensors");
  save_checkpoint(model, Transformer(big, 1), info);
  REQUIRE(std::filesystem::file_size(model) > 30'000'000);
  const std::string out = testing::scratch("oom_out.safetensors");
  save_checkpoint(out, Transformer(tiny_config(), 1), small_info());
  const std::string before = testing::read_bytes(out);
  auto limit = [](int mb) { return "prlimit --as=" + std::to_string(mb << 20) + " "; };

  // 24 MB: reading the file fails; 56 MB: the file is read, building its tensors fails.
  for (const int mb : {24, 56}) {
    INFO("limit ", mb, " MB");
    const Run r =
        translate("eval --model " + model + " --data " + tiny_data() + " --threads 2", "", limit(mb));
    INFO("stderr: ", r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("oom_big.safetensors: out of memory loading it (33.") != std::string::npos);
  }
  // Starting a run from it: the same error, and --out keeps its bytes.
  Run r = translate(
      "train --data " + tiny_data() + " --init " + model + " --out " + out + " --steps 2 --overwrite", "",
      limit(56));
  INFO("stderr: ", r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("out of memory loading it") != std::string::npos);
  CHECK(testing::read_bytes(out) == before);
  // A model far too large for the limit (8192 wide: gigabytes): status 1, --out untouched.
  r = translate(
      "train --data " + tiny_data() + " --out " + out + " --overwrite" +
          " --d-model 8192 --heads 8 --d-ff 32768 --enc-layers 2 --dec-layers 2 --steps 2 --threads 2",
      "", limit(256));
  INFO("stderr: ", r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("translate train: error: ") != std::string::npos);
  CHECK(r.err.find("out of memory") != std::string::npos);
  CHECK(testing::read_bytes(out) == before);
}
