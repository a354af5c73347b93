// plot_log: the loss curves of one or several training logs (translate train, lm train and
// copy_task write them: --log, by default <out>.log.jsonl) on one SVG chart, to compare runs; and
// a log as CSV for a spreadsheet.
//
//   build/apps/plot_log run1.log.jsonl run2.log.jsonl --out cmp.svg
//   build/apps/plot_log toy.log.jsonl --csv toy.csv
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli.hpp"
#include "io/file.hpp"
#include "io/text.hpp"
#include "train/curves.hpp"
#include "train/log.hpp"

namespace {

using Json = nlohmann::ordered_json;

// The rows of the logs as CSV: one per event, a column per field seen in any of them (after
// "run" and "event"), nested fields (the schedule) as JSON text, quoted where needed.
std::string logs_csv(const std::vector<std::string>& logs) {
  std::vector<std::pair<std::string, Json>> rows;
  std::vector<std::string> columns = {"run", "event"};
  std::set<std::string> seen(columns.begin(), columns.end());
  for (const std::string& path : logs) {
    const tg::train::RunCurves named = tg::train::read_run_log(path);  // checks the file, names the run
    std::istringstream in(tg::io::read_file(path));
    for (std::string line; std::getline(in, line);) {
      const Json j = Json::parse(line, nullptr, false);
      if (!j.is_object()) continue;  // a blank or cut line (read_run_log refused any other)
      for (const auto& [key, value] : j.items())
        if (seen.insert(key).second) columns.push_back(key);
      rows.emplace_back(named.name, j);
    }
  }
  auto cell = [](const std::string& s) {  // RFC 4180: quoted when needed, quotes doubled
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q(1, '"');
    for (char c : s) {
      q.push_back(c);
      if (c == '"') q.push_back('"');
    }
    q.push_back('"');
    return q;
  };
  std::string csv;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) csv += ',';
    csv += cell(columns[i]);
  }
  csv += '\n';
  for (const auto& [run, j] : rows) {
    for (size_t i = 0; i < columns.size(); ++i) {
      std::string v;
      if (columns[i] == "run")
        v = run;
      else if (j.contains(columns[i]))
        v = j[columns[i]].is_string() ? j[columns[i]].get<std::string>()
                                      : j[columns[i]].dump(-1, ' ', false, Json::error_handler_t::replace);
      if (i > 0) csv += ',';
      csv += cell(v);
    }
    csv += '\n';
  }
  return csv;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = tg::cli;
  cli::Program app(
      "Draws the loss curves of training logs (translate train, lm train and copy_task write them with\n"
      "--log; translate and lm train by default beside the model as <out>.log.jsonl) on one SVG chart:\n"
      "training and validation loss against the step, the learning rate on a second axis, one colour\n"
      "per run. --csv writes the logs' rows as CSV instead (or as well).",
      "plot_log");
  cli::style(app, "LOG.jsonl... [--out CHART.svg] [--csv FILE.csv] [options]");
  std::vector<std::string> logs;
  std::string out, csv, title;
  cli::add_positional(app, "logs", logs, "the logs to draw, one run each").required();
  cli::add_text(app, "--out", out, "the SVG chart to write (default: none with --csv, else curves.svg)");
  cli::add_text(app, "--csv", csv, "also write every logged event as one CSV row (a column per field)");
  cli::add_text(app, "--title", title, "the chart's title (default: the run's name, or \"N runs\")", "TEXT");
  return cli::run(app, argc, argv, [&] {
    if (out.empty() && csv.empty()) out = "curves.svg";
    std::vector<tg::train::RunCurves> runs;
    for (const std::string& path : logs) runs.push_back(tg::train::read_run_log(path));
    if (!csv.empty()) {
      tg::io::write_file_atomic(csv, logs_csv(logs));
      fmt::print(tg::io::is_stdout(csv) ? stderr : stdout, "wrote {}\n", csv);
    }
    if (!out.empty()) {
      tg::train::write_curves(runs, out, {.title = title});
      fmt::print(tg::io::is_stdout(out) ? stderr : stdout, "wrote {} ({})\n", out,
                 tg::train::plural(static_cast<int64_t>(runs.size()), "run"));
    }
    return 0;
  });
}
