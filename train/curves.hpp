// Loss curves: a run's log (--log, one JSON object per line: train/log.hpp) read back, and drawn
// as an SVG chart: training and validation loss against the step, the learning rate on a second
// axis, a legend; several runs on one chart to compare them (apps/plot_log.cpp).
//
//   train::write_curves({train::read_run_log("toy.log.jsonl")}, "toy.loss.svg");
//
// A resumed run appends to its log: its "start" event names the step it resumed at, and the rows
// of the old run past that step (steps lost to a kill -9 after the last checkpoint) are dropped,
// so the curve is the one the model followed. A last line cut short by a kill is ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/optim.hpp"

namespace tg::train {

struct Point {
  double step = 0, value = 0;
};

struct RunCurves {
  std::string name;                        // the legend's name for the run (the log's file name)
  std::vector<Point> train_loss;           // mean training loss per token since the previous row
  std::vector<Point> valid_loss;           // at each validation
  std::vector<Point> lr;                   // the logged learning rate (when the schedule is unknown)
  std::optional<nn::LrSchedule> schedule;  // from the last start event
  // A resumed run started with another schedule (--steps changed, say) while rows of the earlier one
  // remain: no one schedule gives the curve, so the logged values are drawn.
  bool schedule_changed = false;
  int64_t total_steps = 0;  // from the last start event or train row
  std::string program;      // "translate train", "lm train", "copy_task" when logged
};

// Reads a log written by train::Log (io::DataError "<path>:<line>: ..." for a line that is not a
// JSON object, except a cut last line). `name` defaults to the file's name without ".log.jsonl"
// (or ".jsonl", ".json").
RunCurves read_run_log(const std::string& path, const std::string& name = "");

// The run's schedule as the start event records it: {"kind": "noam", "lr": 0.001, "warmup": 200,
// "total": 2345, "min_lr": 0}, and back (std::nullopt for JSON that is not one).
std::string schedule_json(const nn::LrSchedule& s);
std::optional<nn::LrSchedule> parse_schedule_json(const std::string& json);
// "noam, peak lr 0.001 at step 200" / "cosine, lr 0.002 to 0.0002, warmup 60": for titles.
std::string describe_schedule(const nn::LrSchedule& s);

struct CurvesOptions {
  std::string title;  // default: "Loss curves: <name>" (one run) or "Loss curves: N runs"
  double width = 760, height = 460;
};

// The chart as an SVG document: step on x, loss on the left axis (log scale when the losses span
// more than a factor of 10, else linear), learning rate on the right axis; axis titles, grid, and
// a legend naming each line. Runs without any point still get their legend entry.
std::string curves_svg(const std::vector<RunCurves>& runs, const CurvesOptions& o = {});

// curves_svg written atomically (io::write_file_atomic): the picture is whole or the old one.
void write_curves(const std::vector<RunCurves>& runs, const std::string& svg_path,
                  const CurvesOptions& o = {});

}  // namespace tg::train
