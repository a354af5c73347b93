// Table and JSON output of the kernel benchmark.
#include "bench/report.hpp"

#include <fmt/core.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace tg::bench {
namespace {

std::string ratio_cell(double r, const char* suffix) {
  return std::isfinite(r) ? fmt::format("{:.2f}{}", r, suffix) : std::string("-");
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
  // A product cannot beat the FMA loop: above 100%, the peak itself was timed while another process
  // held a core (its best sample still slow), so this section's %peak figures are not meaningful.
  bool over = false;
  for (const Result& r : rows) over = over || (r.flops && r.of_peak > 1.0);
  if (over)
    fmt::print(out,
               "note: rows above 100% of the peak: the peak loop, timed at the start, was slowed by another "
               "process; the %peak column of this run is not meaningful (the GFLOP/s are)\n");
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
  // Keys in the order written here, for people reading the file. JSON has no NaN: nlohmann writes a
  // non-finite number (an unknown ratio) as null.
  using Json = nlohmann::ordered_json;
  Json doc = {{"info",
               {{"archs", info.archs},
                {"active_arch", info.active_arch},
                {"threads", info.threads},
                {"openblas", info.openblas},
                {"torch", info.torch},
                {"date", info.date},
                {"quick", info.quick},
                {"reps", info.reps}}},
              {"validation", Json::array()},
              {"results", Json::array()}};
  for (const Validation& v : validations)
    doc["validation"].push_back(
        {{"impl", v.impl}, {"kernel", v.kernel}, {"max_err_over_tol", v.max_err}, {"ok", v.ok()}});
  for (const Result& r : rows)
    doc["results"].push_back({{"kernel", r.kernel},
                              {"shape", r.shape},
                              {"impl", r.impl},
                              {"threads", r.threads},
                              {"unit", r.unit()},
                              {"work_per_call", r.work},
                              {"median_s", r.time.median},
                              {"min_s", r.time.min},
                              {"max_s", r.time.max},
                              {"reps", r.time.reps},
                              {"calls_per_rep", r.time.inner},
                              {"rate_median", r.rate(r.time.median)},
                              {"rate_best", r.rate(r.time.min)},
                              {"rate_worst", r.rate(r.time.max)},
                              {"of_peak", r.of_peak},
                              {"vs_ref", r.vs_ref},
                              {"ref", r.ref_name}});
  std::ofstream f(path);
  if (!f) throw std::runtime_error("bench_kernels: cannot write JSON to '" + path + "'");
  f << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  if (!f) throw std::runtime_error("bench_kernels: error while writing JSON to '" + path + "'");
}

}  // namespace tg::bench
