// What a run prints: human-readable lines, or with --json one JSON object per line (the "event"
// first, then the fields in the order given), flushed at once so that a pipe sees each line as it
// happens. Ranks > 0 of an MPI job print nothing on stdout (dist::World sends it to /dev/null).
//
// The run's log file (--log): every event as one JSON object per line whatever stdout shows,
// appended and flushed as it happens. JSON lines rather than CSV: the events differ (the start
// event holds the learning-rate schedule as an object, a validation row each program's own
// metrics), so no fixed CSV header fits them all, nor a resumed run that appends to the file;
// each line is the same object --json prints, and loads in one call (pandas.read_json(path,
// lines=True), jq, DuckDB's read_json); `plot_log --csv` writes a CSV for spreadsheets. After each
// validation and at the end the loss curves are redrawn from the file (train/curves.hpp).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace tg::train {

class Log {
 public:
  explicit Log(bool json) : json_(json) {}
  // Also writes every event to the log file `file` (created, or appended to when `append`: a
  // resumed run), and redraws the loss curves `curves` (an SVG, when not empty) from it after each
  // "valid" and "done" event. Throws std::runtime_error naming the file when it cannot be opened.
  Log(bool json, const std::string& file, bool append, const std::string& curves = "");

  bool json() const { return json_; }
  const std::string& file() const { return path_; }
  const std::string& curves() const { return curves_; }
  // Fields the "start" event gains, after its own (the learning-rate schedule).
  void add_to_start(const nlohmann::ordered_json& fields);

  // Prints `text` (human mode) or {"event": event, ...fields} (JSON mode), and appends the JSON
  // to the log file. A failed write or drawing is a warning on stderr (once), not the run's end.
  void line(const std::string& event, const nlohmann::ordered_json& fields, const std::string& text) const;

 private:
  struct File;
  bool json_;
  std::string path_, curves_;
  std::shared_ptr<File> file_;
};

// "1 thread", "2 threads": n and the noun, plural unless n is 1.
std::string plural(int64_t n, const std::string& noun);

// "1h02m", "3m05s", "12s"; "?" for a negative or non-finite time.
std::string format_duration(double seconds);

double seconds_since(std::chrono::steady_clock::time_point t0);

}  // namespace tg::train
