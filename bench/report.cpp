// Table and JSON output of the kernel benchmark.
#include "bench/report.hpp"

#include <fmt/core.h>

#include <fstream>
#include <stdexcept>

namespace tg::bench {
namespace {

std::string ratio_cell(double r, const char* suffix) {
  return std::isfinite(r) ? fmt::format("{:.2f}{}", r, suffix) : std::string("-");
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// JSON has no NaN: unknown ratios are written as null.
std::string json_number(double x) {
  return std::isfinite(x) ? fmt::format("{:.10g}", x) : "null";
}

}  // namespace

void print_section(std::FILE* out, const std::string& title, const std::vector<Result>& rows) {
  if (rows.empty()) return;
  fmt::print(out, "\n== {} ==\n", title);
  fmt::print(out, "{:<21} {:<22} {:>3} {:<12} {:>9} {:>9} {:>9} {:<8} {:>6} {:>13}\n", "kernel", "shape",
             "thr", "impl", "median", "min", "max", "unit", "%peak", "vs ref");
  for (const Result& r : rows) {
    const std::string vs = std::isfinite(r.vs_ref) ? ratio_cell(r.vs_ref, "x ") + r.ref_name : "-";
    fmt::print(out, "{:<21} {:<22} {:>3} {:<12} {:>9.2f} {:>9.2f} {:>9.2f} {:<8} {:>6} {:>13}\n", r.kernel,
               r.shape, r.threads, r.impl, r.rate(r.time.median), r.rate(r.time.max), r.rate(r.time.min),
               r.unit(), std::isfinite(r.of_peak) ? fmt::format("{:.0f}%", 100 * r.of_peak) : "-", vs);
  }
  std::fflush(out);
}

void print_validations(std::FILE* out, const std::vector<Validation>& v) {
  if (v.empty()) return;
  int failed = 0;
  for (const Validation& x : v) failed += !x.ok();
  fmt::print(out, "validated {} kernel/impl pairs against the scalar reference (one small size each): {}\n",
             v.size(), failed ? fmt::format("{} FAILED", failed) : std::string("all ok"));
  for (const Validation& x : v)
    if (!x.ok())
      fmt::print(out, "  FAILED {} {}: max error {:.3g} x tolerance (not timed)\n", x.impl, x.kernel,
                 x.max_err);
  std::fflush(out);
}

void write_json(const std::string& path, const RunInfo& info, const std::vector<Result>& rows,
                const std::vector<Validation>& validations) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("bench_kernels: cannot write JSON to '" + path + "'");
  f << "{\n  \"info\": {"
    << fmt::format(
           "\"archs\": {}, \"active_arch\": {}, \"threads\": {}, \"openblas\": {}, \"torch\": {}, "
           "\"date\": {}, \"quick\": {}, \"reps\": {}",
           json_string(info.archs), json_string(info.active_arch), json_string(info.threads),
           json_string(info.openblas), json_string(info.torch), json_string(info.date), info.quick, info.reps)
    << "},\n  \"validation\": [";
  for (size_t i = 0; i < validations.size(); ++i) {
    const Validation& v = validations[i];
    f << (i ? ",\n    " : "\n    ")
      << fmt::format("{{\"impl\": {}, \"kernel\": {}, \"max_err_over_tol\": {}, \"ok\": {}}}",
                     json_string(v.impl), json_string(v.kernel), json_number(v.max_err), v.ok());
  }
  f << "\n  ],\n  \"results\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Result& r = rows[i];
    f << (i ? ",\n    " : "\n    ")
      << fmt::format(
             "{{\"kernel\": {}, \"shape\": {}, \"impl\": {}, \"threads\": {}, \"unit\": {}, "
             "\"work_per_call\": {}, "
             "\"median_s\": {}, \"min_s\": {}, \"max_s\": {}, \"reps\": {}, \"calls_per_rep\": {}, "
             "\"rate_median\": {}, \"rate_best\": {}, \"rate_worst\": {}, \"of_peak\": {}, \"vs_ref\": {}, "
             "\"ref\": {}}}",
             json_string(r.kernel), json_string(r.shape), json_string(r.impl), r.threads,
             json_string(r.unit()), json_number(r.work), json_number(r.time.median), json_number(r.time.min),
             json_number(r.time.max), r.time.reps, r.time.inner, json_number(r.rate(r.time.median)),
             json_number(r.rate(r.time.min)), json_number(r.rate(r.time.max)), json_number(r.of_peak),
             json_number(r.vs_ref), json_string(r.ref_name));
  }
  f << "\n  ]\n}\n";
  if (!f) throw std::runtime_error("bench_kernels: error while writing JSON to '" + path + "'");
}

}  // namespace tg::bench
