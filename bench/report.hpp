// Results of one benchmark run: the table printed to stdout and the JSON written with --json.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/timing.hpp"

namespace tg::bench {

// One measurement: `work` units (flops or bytes) per call, timed by `time` (seconds per call).
struct Result {
  std::string kernel;  // "gemm linear.fwd", "softmax.fwd", "fma", "triad", ...
  std::string shape;   // "M2048 N256 K256 nn", "8192x256", ...
  std::string impl;    // an arch name, "openblas" or "torch"
  int threads = 1;
  Stats time;
  double work = 0;       // flops or bytes per call
  bool flops = true;     // GFLOP/s, else GB/s
  double of_peak = NAN;  // ours / the FMA peak of this arch at this thread count
  double vs_ref = NAN;   // ours / ref_name on the same case and thread count
  std::string ref_name;

  // Billions of work units per second for a time per call: the median gives the headline rate,
  // min time the best rate and max time the worst.
  double rate(double seconds) const { return work / seconds * 1e-9; }
  const char* unit() const { return flops ? "GFLOP/s" : "GB/s"; }
  std::string key() const { return kernel + " " + shape; }
};

// A kernel's output compared against the scalar reference before it is timed.
struct Validation {
  std::string impl, kernel;
  double max_err = 0;  // max |x - ref| / (atol + rtol |ref|); passes when <= 1
  bool ok() const { return max_err <= 1.0; }
};

struct RunInfo {
  std::string archs, active_arch, threads, openblas, torch, date;
  bool quick = false;
  int reps = 0;
};

void print_section(std::FILE* out, const std::string& title, const std::vector<Result>& rows);
void print_validations(std::FILE* out, const std::vector<Validation>& v);
// Throws std::runtime_error naming the file if it cannot be written.
void write_json(const std::string& path, const RunInfo& info, const std::vector<Result>& rows,
                const std::vector<Validation>& validations);

}  // namespace tg::bench
