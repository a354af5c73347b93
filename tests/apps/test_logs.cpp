// Training logs and loss curves as a user gets them (issue 30): the log file of translate train,
// lm train and copy_task (--log; by default beside the model), its rows, --resume appending to it,
// the curves redrawn at every validation, the files checked before training, and plot_log
// comparing runs.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"
#include "train/curves.hpp"

using namespace tg;
using namespace tg::testing::cli;

namespace {

const std::string kCopyTask = TG_COPY_TASK;

std::vector<json::Json> events(const std::string& path, const std::string& event) {
  std::vector<json::Json> v;
  for (const auto& j : json_lines(testing::read_bytes(path)))
    if (j.at("event").get<std::string>() == event) v.push_back(j);
  return v;
}

bool is_svg(const std::string& path) {
  const std::string s = testing::read_bytes(path);
  return s.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"") && s.ends_with("</svg>\n");
}

}  // namespace

TEST_CASE("ux.log.translate_train_logs_every_row_and_draws_the_curves") {
  if (!have_cli()) return;
  const std::string out = testing::scratch("logged.safetensors");
  const std::string log = testing::scratch("logged.log.jsonl"), svg = testing::scratch("logged.loss.svg");
  const Run r = translate("train --data " + tiny_data() + " --valid " + tiny_data() + " --out " + out +
                          " --steps 30 --eval-every 10 --log-every 5 " + kTinyModel);
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(std::count(r.written.begin(), r.written.end(), log) == 1);
  const auto start = events(log, "start");
  REQUIRE(start.size() == 1);
  CHECK(start[0].at("program").get<std::string>() == "translate train");
  CHECK(start[0].at("schedule").at("kind").get<std::string>() == "noam");  // the lr schedule
  CHECK(start[0].at("schedule").at("warmup").get<int64_t>() == 5);
  const auto train = events(log, "train");
  REQUIRE(train.size() == 6);  // steps 5, 10, ..., 30
  for (const auto& row : train)
    for (const char* key : {"step", "elapsed_s", "lr", "loss", "grad_norm", "tokens_per_s"})
      CHECK_MESSAGE(row.contains(key), key);
  CHECK(train[0].at("grad_norm").get<double>() > 0);
  const auto valid = events(log, "valid");
  REQUIRE(valid.size() == 3);  // steps 10, 20, 30
  for (const auto& row : valid)
    for (const char* key : {"step", "elapsed_s", "loss", "token_accuracy", "exact_match"})
      CHECK_MESSAGE(row.contains(key), key);
  CHECK(events(log, "done").size() == 1);
  // The same rows as --json prints (the log has the start fields and the time too).
  CHECK(r.out.find("grad norm") != std::string::npos);
  CHECK(is_svg(svg));
  const std::string chart = testing::read_bytes(svg);
  CHECK(chart.find(">validation loss<") != std::string::npos);
  CHECK(chart.find("logged up to step 30") != std::string::npos);
}

TEST_CASE("ux.log.resume_appends_to_the_same_log_and_curve") {
  if (!have_cli()) return;
  const std::string out = testing::scratch("res.safetensors"), log = testing::scratch("res.log.jsonl");
  const std::string args = "train --data " + tiny_data() + " --valid " + tiny_data() + " --out " + out +
                           " --eval-every 10 --log-every 10 " + kTinyModel;
  REQUIRE(translate(args + " --steps 20").status == 0);
  const std::string first = testing::read_bytes(log);
  const Run r = translate(args + " --steps 40 --resume");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  const std::string both = testing::read_bytes(log);
  CHECK(both.starts_with(first));  // appended, not rewritten
  const auto start = events(log, "start");
  REQUIRE(start.size() == 2);
  CHECK(start[1].at("step").get<int64_t>() == 20);
  std::vector<int64_t> steps;
  for (const auto& row : events(log, "train")) steps.push_back(row.at("step").get<int64_t>());
  CHECK(steps == std::vector<int64_t>{10, 20, 30, 40});
  const train::RunCurves c = train::read_run_log(log);
  CHECK(c.train_loss.size() == 4);
  CHECK(c.valid_loss.size() == 4);
  CHECK(testing::read_bytes(testing::scratch("res.loss.svg")).find("logged up to step 40") !=
        std::string::npos);
}

TEST_CASE("ux.log.lm_train_and_copy_task_log_too") {
  if (!have_cli()) return;
  std::string text;
  for (int i = 0; text.size() < 3000; ++i)
    text += i % 2 ? "the cat sees the ball.\n" : "a dog likes bread.\n";
  const std::string data = testing::write_bytes("logs_lm.txt", text);
  const std::string log = testing::scratch("lm_run.jsonl");
  const Run l = run_program(
      kLm,
      "train --data " + data + " --out " + testing::scratch("logs_lm.safetensors") + " --log " + log +
          " --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --warmup 1"
          " --steps 4 --eval-every 2 --log-every 2",
      "", "");
  INFO("lm: ", l.err);
  REQUIRE(l.status == 0);
  CHECK(events(log, "start")[0].at("schedule").at("kind").get<std::string>() == "cosine");
  CHECK(events(log, "train").size() == 2);
  CHECK(events(log, "valid")[0].contains("bits_per_byte"));
  CHECK(is_svg(testing::scratch("logs_lm.loss.svg")));  // beside the model, whatever --log names
  CHECK(!std::filesystem::exists(testing::scratch("logs_lm.log.jsonl")));

  // copy_task: --json prints JSON only; --log writes the log and copy.loss.svg beside it (a batch of
  // 8: under ASan 3 s against 19 at the default 64).
  const std::string clog = testing::scratch("copy.jsonl");
  const Run c = run_program(kCopyTask, "--steps 20 --batch-size 8 --eval 4 --json --log " + clog, "", "");
  INFO("copy_task: ", c.out, c.err);
  const auto lines = json_lines(c.out);  // throws on a line that is not JSON
  REQUIRE(lines.size() >= 4);
  CHECK(lines.front().at("event").get<std::string>() == "start");
  CHECK(lines.back().at("event").get<std::string>() == "eval");
  CHECK(lines.back().at("sequences").get<int64_t>() == 4);
  CHECK(events(clog, "train").size() >= 1);
  CHECK(events(clog, "start")[0].at("program").get<std::string>() == "copy_task");
  CHECK(is_svg(testing::scratch("copy.loss.svg")));
}

TEST_CASE("ux.log.the_log_and_the_curves_are_checked_before_training") {
  if (!have_cli()) return;
  const std::string dir = testing::scratch("logdir");
  std::filesystem::create_directories(dir);
  const std::string train = "train --data " + tiny_data() + " --steps 400 " + kTinyModel + " --out ";
  auto refused = [](const Run& r, const std::string& text) {
    INFO("stderr: ", r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find(text) != std::string::npos);
    CHECK(r.out.find("step ") == std::string::npos);
  };
  refused(translate(train + testing::scratch("a.safetensors") + " --log " + dir), dir + ": is a directory");
  std::filesystem::create_directories(testing::scratch("clash.loss.svg"));
  refused(translate(train + testing::scratch("clash.safetensors")), "clash.loss.svg: is a directory");
  refused(run_program(kCopyTask, "--steps 400 --log " + dir, "", ""), dir + ": is a directory");
}

TEST_CASE("ux.log.plot_log_compares_runs_and_writes_csv") {
  if (!have_cli()) return;
  auto train_run = [](const std::string& name, const std::string& lr) {
    const Run r = translate("train --data " + tiny_data() + " --valid " + tiny_data() + " --out " +
                            testing::scratch(name + ".safetensors") +
                            " --steps 20 --eval-every 10 --log-every 5 --lr " + lr + " " + kTinyModel);
    REQUIRE(r.status == 0);
    return testing::scratch(name + ".log.jsonl");
  };
  const std::string a = train_run("slow", "1e-4"), b = train_run("fast", "3e-3");
  const std::string svg = testing::scratch("cmp.svg"), csv = testing::scratch("cmp.csv");
  const Run r = run_program(kPlotLog, a + " " + b + " --out " + svg + " --csv " + csv, "", "");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("wrote " + svg + " (2 runs)") != std::string::npos);
  const std::string chart = testing::read_bytes(svg);
  CHECK(chart.find(">Loss curves: 2 runs<") != std::string::npos);
  CHECK(chart.find(">slow: training loss<") != std::string::npos);
  CHECK(chart.find(">fast: validation loss<") != std::string::npos);
  const std::string table = testing::read_bytes(csv);
  CHECK(table.starts_with("run,event,"));
  CHECK(table.find("\nslow,train,") != std::string::npos);
  CHECK(table.find("\nfast,valid,") != std::string::npos);
  // Bad input: the file and the problem, status 1; no log at all: status 2.
  const Run bad = run_program(kPlotLog, tiny_data() + " --out " + svg, "", "");
  CHECK(bad.status == 1);
  CHECK(bad.err.find("tiny.tsv:1: not a log event") != std::string::npos);
  CHECK(run_program(kPlotLog, "--out " + svg, "", "").status == 2);
}
