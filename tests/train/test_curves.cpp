// Run logs read back and drawn (train/curves.hpp): a resumed run's log, a cut last line, the
// schedule as the start event records it, and what the chart holds (axes, titles, legend, scale).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "io/file.hpp"
#include "io/text.hpp"
#include "tests/test_util.hpp"
#include "train/curves.hpp"
#include "train/log.hpp"

using namespace tg;

namespace {

std::string write_log(const std::string& name, const std::string& text) {
  const std::string path =
      (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".log.jsonl"))
          .string();
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("train.curves.schedule_round_trip") {
  const nn::LrSchedule s{nn::LrSchedule::Kind::cosine, 2e-3f, 60, 600, 2e-4f};
  const std::string j = train::schedule_json(s);
  CHECK(j == R"({"kind":"cosine","lr":0.002,"warmup":60,"total":600,"min_lr":0.0002})");
  const auto back = train::parse_schedule_json(j);
  REQUIRE(back);
  for (int64_t step : {1, 30, 60, 61, 300, 600}) CHECK(back->at(step) == s.at(step));
  CHECK(!train::parse_schedule_json(R"({"kind":"linear","lr":1})"));
  CHECK(train::describe_schedule(s) == "cosine, lr 0.002 to 0.0002, warmup 60");
  CHECK(train::describe_schedule({nn::LrSchedule::Kind::noam, 1e-3f, 200, 0, 0}) ==
        "noam, peak lr 0.001 at step 200");
}

TEST_CASE("train.curves.a_resumed_log_keeps_the_curve_the_model_followed") {
  // Steps 1-30 logged, the checkpoint at step 20, killed at step 30: the resumed run starts at 20
  // and logs 21-40 again. The rows of steps 21-30 of the first run were lost with it.
  const std::string path = write_log(
      "resumed",
      R"({"event":"start","step":0,"total_steps":40,"program":"translate train","schedule":{"kind":"constant","lr":0.001,"warmup":0,"total":40,"min_lr":0}})"
      "\n"
      R"({"event":"train","step":10,"loss":2.0,"lr":0.001})"
      "\n"
      R"({"event":"train","step":20,"loss":1.5,"lr":0.001})"
      "\n"
      R"({"event":"valid","step":20,"loss":1.6,"exact_match":10.0})"
      "\n"
      R"({"event":"train","step":30,"loss":9.9,"lr":0.001})"
      "\n"
      R"({"event":"start","step":20,"total_steps":40})"
      "\n"
      R"({"event":"train","step":30,"loss":1.2,"lr":0.001})"
      "\n"
      R"({"event":"train","step":40,"loss":1.0,"lr":0.001})"
      "\n"
      R"({"event":"valid","step":40,"lo)");  // cut short by a kill
  const train::RunCurves r = train::read_run_log(path);
  std::filesystem::remove(path);
  CHECK(r.name.starts_with("resumed."));
  CHECK(!r.name.ends_with(".log.jsonl"));
  REQUIRE(r.train_loss.size() == 4);
  CHECK(r.train_loss[2].step == 30);
  CHECK(r.train_loss[2].value == 1.2);  // not the lost 9.9
  REQUIRE(r.valid_loss.size() == 1);
  CHECK(r.total_steps == 40);
  CHECK(r.program == "translate train");
  REQUIRE(r.schedule);
  CHECK(r.schedule->lr == 1e-3f);
}

// A resumed run appends to its log: a last line cut short by the run before is dropped first, so
// the new rows start on their own line and the log still reads (and draws) after the resume.
TEST_CASE("train.log.appending_drops_a_cut_last_line") {
  const std::string whole = R"({"event":"start","step":0,"total_steps":40})"
                            "\n"
                            R"({"event":"train","step":10,"loss":2.0,"lr":0.001})"
                            "\n";
  const std::string path = write_log("cut", whole + R"({"event":"train","step":2)");
  {
    const train::Log log(false, path, /*append=*/true, "");
    log.line("start", nlohmann::ordered_json{{"step", 10}, {"total_steps", 40}}, "resumed");
    log.line("train", nlohmann::ordered_json{{"step", 20}, {"loss", 1.5}, {"lr", 0.001}}, "step 20");
  }
  const std::string text = io::read_file(path);
  CHECK(text.starts_with(whole + R"({"event":"start","step":10)"));
  CHECK(text.find("{\"event\":\"train\",\"step\":2{") == std::string::npos);
  const train::RunCurves r = train::read_run_log(path);
  REQUIRE(r.train_loss.size() == 2);
  CHECK(r.train_loss[1].step == 20);
  // a log that ends in a newline is appended to as it is
  {
    const train::Log log(false, path, true, "");
    log.line("train", nlohmann::ordered_json{{"step", 30}, {"loss", 1.0}, {"lr", 0.001}}, "step 30");
  }
  CHECK(io::read_file(path).starts_with(text));
  std::filesystem::remove(path);
  // a cut line longer than the 4 KiB the search reads at a time
  const std::string long_cut = write_log("cut", whole + std::string(10000, 'x'));
  { const train::Log log(false, long_cut, true, ""); }
  CHECK(io::read_file(long_cut) == whole);
  std::filesystem::remove(long_cut);
  // and one that does not exist yet is made
  { const train::Log log(false, path, true, ""); }
  CHECK(std::filesystem::exists(path));
  std::filesystem::remove(path);
}

// Resumed with another schedule (--steps 40 -> 80): the first schedule's curve no longer holds for
// the steps after the resume nor the second's for those before it, so the logged rates are drawn.
TEST_CASE("train.curves.a_schedule_changed_on_resume_draws_the_logged_rates") {
  const std::string start40 =
      R"({"event":"start","step":0,"total_steps":40,"schedule":{"kind":"cosine","lr":0.002,"warmup":0,"total":40,"min_lr":0}})";
  const std::string start80 =
      R"({"event":"start","step":20,"total_steps":80,"schedule":{"kind":"cosine","lr":0.002,"warmup":0,"total":80,"min_lr":0}})";
  const std::string rows = R"({"event":"train","step":10,"loss":2.0,"lr":0.0017})"
                           "\n"
                           R"({"event":"train","step":20,"loss":1.5,"lr":0.001})"
                           "\n";
  const std::string resumed_rows = R"({"event":"train","step":30,"loss":1.2,"lr":0.0012})"
                                   "\n";
  const std::string changed = write_log("changed", start40 + "\n" + rows + start80 + "\n" + resumed_rows);
  const train::RunCurves r = train::read_run_log(changed);
  CHECK(r.schedule_changed);
  REQUIRE(r.schedule);
  CHECK(r.schedule->total == 80);  // the title still names the last start's schedule
  // The learning-rate line (dashed "2 3") through the three logged rates, not a schedule's samples.
  const auto lr_line_points = [](const std::string& svg) {
    const size_t dash = svg.find(R"(stroke-dasharray="2 3" stroke-opacity)");
    const size_t from = svg.rfind("points=\"", dash) + 8, to = svg.find('"', from);
    return 1 + std::count(svg.begin() + static_cast<std::ptrdiff_t>(from),
                          svg.begin() + static_cast<std::ptrdiff_t>(to), ' ');
  };
  CHECK(lr_line_points(train::curves_svg({r})) == 3);
  // The same schedule again (the same command plus --resume): its exact curve, as before.
  const std::string same = write_log("same", start40 + "\n" + rows + start40 + "\n" + resumed_rows);
  const train::RunCurves r_same = train::read_run_log(same);
  CHECK_FALSE(r_same.schedule_changed);
  CHECK(lr_line_points(train::curves_svg({r_same})) == 40);  // the cosine at every step of 40
  std::filesystem::remove(changed);
  std::filesystem::remove(same);
}

TEST_CASE("train.curves.a_line_that_is_not_an_event_is_an_error_naming_it") {
  const std::string path = write_log("bad", "{\"event\":\"train\",\"step\":1,\"loss\":1}\nnot json\n{}\n");
  CHECK_THROWS_WITH_AS(train::read_run_log(path), doctest::Contains(".log.jsonl:2: not a log event"),
                       io::DataError);
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS(train::read_run_log(path), doctest::Contains("cannot open"), io::DataError);
}

TEST_CASE("train.curves.the_chart_has_axes_titles_a_legend_and_the_right_scale") {
  train::RunCurves falling, flat;
  falling.name = "copy";
  flat.name = "flat";
  for (int s = 20; s <= 300; s += 20) {
    falling.train_loss.push_back({static_cast<double>(s), 2.4 * std::pow(0.6, s / 20.0)});  // 2.4 .. 0.001
    flat.train_loss.push_back({static_cast<double>(s), 2.0 - s / 1000.0});
  }
  falling.schedule = nn::LrSchedule{nn::LrSchedule::Kind::cosine, 3e-3f, 50, 300, 0};
  falling.total_steps = 300;
  flat.valid_loss = {{100, 1.95}, {300, 1.8}};
  const std::string one = train::curves_svg({falling});
  CHECK(one.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"460\""));
  CHECK(one.find(">Loss curves: copy<") != std::string::npos);
  CHECK(one.find("cosine, lr 0.003 to 0, warmup 50 · 300 steps") != std::string::npos);
  CHECK(one.find(">step<") != std::string::npos);
  CHECK(one.find(">loss per token (nats, log scale)<") != std::string::npos);  // over 3 decades
  CHECK(one.find(">learning rate<") != std::string::npos);
  CHECK(one.find(">training loss<") != std::string::npos);
  CHECK(one.find(">learning rate (right axis)<") != std::string::npos);
  CHECK(one.find("validation loss") == std::string::npos);  // none logged
  CHECK(testing::count_of(one, "<polyline") == 2);

  const std::string linear = train::curves_svg({flat});
  CHECK(linear.find(">loss per token (nats)<") != std::string::npos);
  CHECK(linear.find(">validation loss<") != std::string::npos);
  CHECK(testing::count_of(linear, "<circle") == 2 + 1);  // the two validations and the legend's marker

  // Two runs: one colour each, every line in the legend under the run's name.
  const std::string both = train::curves_svg({falling, flat}, {.title = "copy vs flat"});
  CHECK(both.find(">copy vs flat<") != std::string::npos);
  CHECK(both.find(">copy: training loss<") != std::string::npos);
  CHECK(both.find(">flat: validation loss<") != std::string::npos);
  CHECK(both.find("#1f77b4") != std::string::npos);
  CHECK(both.find("#ff7f0e") != std::string::npos);

  // Every point inside the plot area (the loss axis covers the data).
  const std::regex pts(R"re(<polyline points="([^"]*)")re");
  for (auto it = std::sregex_iterator(both.begin(), both.end(), pts); it != std::sregex_iterator(); ++it) {
    std::istringstream in((*it)[1].str());
    for (std::string xy; in >> xy;) {
      const double x = std::stod(xy.substr(0, xy.find(','))), y = std::stod(xy.substr(xy.find(',') + 1));
      CHECK(x >= 78 - 0.1);
      CHECK(x <= 760 - 84 + 0.1);
      CHECK(y >= 58 - 0.1);
      CHECK(y <= 460 - 0.1);
    }
  }
  // No run yet: a chart that says so.
  CHECK(train::curves_svg({train::RunCurves{}}).find("no loss logged yet") != std::string::npos);
}
