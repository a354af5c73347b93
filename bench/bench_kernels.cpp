// bench_kernels: GFLOP/s and GB/s of every kernel on every arch this CPU runs, beside the machine's
// measured peak (FMA throughput, the bf16 dot-product throughput where the CPU has it, triad
// bandwidth), OpenBLAS's sgemm, PyTorch's softmax/layernorm and its bf16 and fp32 matmul, all
// measured in the same run. Every kernel is first checked against the scalar reference.
//
//   ninja -C build bench/bench_kernels
//   build/bench/bench_kernels --quick                      # smoke test, < 30 s
//   OPENBLAS_CORETYPE=SkylakeX build/bench/bench_kernels --json bench_kernels.json
//                                                          # the full run, ~3 min on an idle machine
//   build/bench/bench_kernels --arch avx2,avx512 --threads 1 --filter linear
//
// OpenBLAS 0.3.21 (Debian 12) does not know CPUs newer than it and then runs its SSE3 "Prescott"
// kernels; OPENBLAS_CORETYPE (read when the library loads, so it must be set outside) picks its
// AVX-512 (SkylakeX) or AVX2 (Haswell) kernels instead. The header line shows the core in use.
//
// Timing (bench/timing.hpp): warm-up, then --reps samples; the table shows the median rate and the
// range [worst, best]. GEMM counts 2*M*N*K flops; row-wise kernels count each tensor they touch once
// (bench/bench_rowwise.cpp). "%peak" is GEMM over the FMA peak of the same arch and thread count
// (the bf16 GEMM on its dot-product path: over the best bf16 dot-product loop), row-wise kernels
// over the triad bandwidth at the same thread count (peaks: best sample); "vs ref" is ours /
// OpenBLAS (fp32 GEMM), ours / PyTorch's bf16 matmul (bf16 GEMM) or ours / PyTorch (softmax,
// layernorm), same case and threads. bf16 rows: "<arch> bf16" has bf16 operands on the arch's best
// path, "bf16f" fp32 operands rounded while packing, "bf16w" the widen path (fp32 FMA).
//
// PyTorch: the script runs with --python, by default the PyTorch 2.x virtualenv of
// tools/setup_torch2.sh ($TAPEGRAD_TORCH_VENV, else ~/.cache/tapegrad-torch2) when it exists, else
// /usr/bin/python3 (Debian's torch 1.13, which has no oneDNN bf16 matmul).
#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <exception>
#include <stdexcept>

#include "bench/bench.hpp"
#include "bench/cli.hpp"

namespace {

using namespace tg;
using namespace tg::bench;

// The PyTorch 2.x virtualenv's interpreter (tools/setup_torch2.sh) when it exists, else Debian's.
std::string default_python() {
  const char* venv = std::getenv("TAPEGRAD_TORCH_VENV");
  const char* home = std::getenv("HOME");
  const std::string dir = venv && *venv ? venv : std::string(home ? home : "") + "/.cache/tapegrad-torch2";
  const std::string python = dir + "/bin/python";
  return access(python.c_str(), X_OK) == 0 ? python : "/usr/bin/python3";
}

// An arch this CPU runs: "avx3" or an arch it lacks is refused, naming the available ones.
cli::Validator runnable_arch() {
  return [](const std::string& v) -> std::string {
    try {
      ops::kernels(ops::parse_arch(v));
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  };
}

// The command line, declared once (apps/cli.hpp: --help generated, exit status 2 naming the
// option on a bad value).
void declare(cli::Command& app, Options& o, std::vector<std::string>& archs, std::optional<int>& reps,
             bool& torch_on, bool& torch_off) {
  cli::style(app, "[options]");
  cli::add_flag(app, "--quick", o.quick, "small subset and few reps (a smoke test, < 30 s)");
  cli::add_list(app, "--arch", archs,
                "comma-separated archs (scalar,sse2,avx2,avx512,neon) (default: all available)")
      .check(runnable_arch());
  cli::add_list(app, "--threads", o.threads, "comma-separated thread counts, each 1..1024")
      .check(cli::int_range(1, 1024))
      .default_str("1,2");
  cli::add_text(
      app, "--filter", o.filter,
      "only cases whose \"<kernel> <shape>\" contains TEXT (e.g. \"linear\", \"softmax.fwd 8192x64\")",
      "TEXT");
  cli::add_optional_int(app, "--reps", reps, "timed samples per case (median reported)", 1, cli::kNoMax, "N",
                        "11, --quick 3");
  cli::add_text(app, "--json", o.json, "also write every result as JSON");
  cli::add_flag(app, "--torch", torch_on, "run the PyTorch comparison (default: when PYTHON imports torch)");
  cli::add_flag(app, "--no-torch", torch_off, "skip it").excludes("--torch");
  bool no_blas = false, no_bf16 = false;
  cli::add_flag(app, "--no-blas", no_blas, "skip OpenBLAS").each([&o](const std::string&) {
    o.blas = false;
  });
  cli::add_flag(app, "--no-bf16", no_bf16, "skip the bf16 GEMM and its dot-product peak")
      .each([&o](const std::string&) { o.bf16 = false; });
  cli::add_text(app, "--python", o.python,
                "interpreter for the PyTorch script: the tools/setup_torch2.sh venv's python when present "
                "($TAPEGRAD_TORCH_VENV or ~/.cache/tapegrad-torch2), else /usr/bin/python3",
                "PATH");
  cli::add_text(app, "--torch-script", o.torch_script, "the PyTorch script", "PATH");
}

// What declare() parsed, completed with the defaults that depend on other options.
void finish(Options& o, const std::vector<std::string>& archs, const std::optional<int>& reps, bool torch_on,
            bool torch_off) {
  for (const std::string& a : archs) o.archs.push_back(ops::parse_arch(a));
  if (o.archs.empty()) o.archs = ops::available_archs();
  if (o.threads.empty()) throw cli::UsageError("--threads needs at least one count");
  o.torch = torch_on ? 1 : torch_off ? 0 : -1;
  if (o.quick) o.timing = {3, 0.02, 1e-3};
  if (reps) o.timing.reps = *reps;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Stable order for a table: by kernel and shape in order of first appearance, then threads, so
// rows added later (PyTorch) join their case.
void group_rows(std::vector<Result>& rows) {
  std::vector<std::string> order;
  auto index = [&](const std::string& key) {
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i] == key) return i;
    order.push_back(key);
    return order.size() - 1;
  };
  for (const Result& r : rows) index(r.key());
  std::stable_sort(rows.begin(), rows.end(), [&](const Result& a, const Result& b) {
    return std::pair(index(a.key()), a.threads) < std::pair(index(b.key()), b.threads);
  });
}

int run(const Options& o) {
  RunInfo info;
  info.archs = join(o.archs, [](ops::Arch a) { return ops::arch_name(a); });
  info.threads = join(o.threads, [](int t) { return std::to_string(t); });
  info.active_arch = ops::arch_name(ops::active_arch());
  info.openblas = o.blas ? openblas_info() : "";
  info.date = utc_now();
  info.quick = o.quick;
  info.reps = o.timing.reps;

  fmt::print("bench_kernels {}\n  kernels: {}\n  benchmarking archs: {}; threads: {}; reps: {}{}\n",
             info.date, ops::arch_report(), info.archs, info.threads, info.reps,
             o.quick ? " (--quick subset)" : "");
  fmt::print("  OpenBLAS: {}\n",
             info.openblas.empty() ? (o.blas ? "not built in" : "skipped (--no-blas)") : info.openblas);
  if (info.openblas.find("core Prescott") != std::string::npos &&
      ops::available_archs().back() != ops::Arch::sse2)
    fmt::print(
        "  warning: OpenBLAS runs its Prescott (SSE3) kernels: it does not know this CPU model. For a fair\n"
        "           comparison rerun with OPENBLAS_CORETYPE=SkylakeX (AVX-512) or Haswell (AVX2) set.\n");
  if (!o.filter.empty()) fmt::print("  filter: \"{}\"\n", o.filter);
  std::fflush(stdout);

  std::vector<Validation> validations;
  std::vector<Result> machine = run_machine(o);
  const std::vector<Result> bf16_peak = run_bf16_peak(o);
  machine.insert(machine.end(), bf16_peak.begin(), bf16_peak.end());
  print_section(
      stdout,
      "Machine peak: FMA loop per arch (GFLOP/s), bf16 dot-product loop with 8..32 accumulator "
      "chains where the CPU has one (\"<arch> amx\": AMX's TDPBF16PS on 4 tiles), triad bandwidth (GB/s)",
      machine);

  std::vector<Validation> val_gemm;
  std::vector<Result> gemm = run_gemm(o, machine, val_gemm);
  bool torch_failed = false;
  std::string torch_gemm_version = "not run (no bf16 GEMM case selected)", torch_rows_version;
  try {
    const std::vector<Result> torch_gemm = run_torch_gemm(o, bf16_gemm_shapes(o), gemm, torch_gemm_version);
    gemm.insert(gemm.end(), torch_gemm.begin(), torch_gemm.end());
    group_rows(gemm);
  } catch (const std::exception& e) {  // keep our results: report the failure, exit non-zero at the end
    torch_gemm_version = std::string("FAILED: ") + e.what();
    torch_failed = true;
  }
  if (!val_gemm.empty()) std::fputs("\n", stdout);
  print_validations(stdout, val_gemm);
  fmt::print("PyTorch: {}\n", torch_gemm_version);
  print_section(
      stdout,
      "GEMM (GFLOP/s; shape MxNxK with op(A)op(B) n/t; %peak of the arch's FMA loop, bf16 dot path: "
      "of its dot-product loop)",
      gemm);

  std::vector<Validation> val_attn;
  std::vector<Result> attn = run_attention(o, machine, val_attn);
  std::string torch_attn_version;
  try {
    const std::vector<Result> torch_attn = run_torch_attention(o, attn, torch_attn_version);
    attn.insert(attn.end(), torch_attn.begin(), torch_attn.end());
    group_rows(attn);
  } catch (const std::exception& e) {  // keep our results: report the failure, exit non-zero at the end
    torch_attn_version = std::string("FAILED: ") + e.what();
    torch_failed = true;
  }
  if (!attn.empty() || !val_attn.empty()) {
    if (!val_attn.empty()) std::fputs("\n", stdout);
    print_validations(stdout, val_attn);
    fmt::print("PyTorch: {}\n", torch_attn_version);
    print_section(stdout,
                  "Fused attention (GFLOP/s: the model's products over the visible (query, key) pairs, "
                  "fwd+bwd 3x fwd; %peak of the arch's FMA loop; vs PyTorch's scaled_dot_product_attention "
                  "in fp32)",
                  attn);
  }

  std::vector<Validation> val_rows;
  std::vector<Result> rowwise = run_rowwise(o, val_rows);
  std::vector<Result> torch;
  try {
    torch = run_torch(o, rowwise, torch_rows_version);
  } catch (const std::exception& e) {  // keep our results: report the failure, exit non-zero at the end
    torch_rows_version = std::string("FAILED: ") + e.what();
    torch_failed = true;
  }
  // the run's torch: a failure first, else the version that ran (GEMM and row-wise use one python)
  info.torch = torch_rows_version.rfind("FAILED", 0) == 0 || torch_rows_version.rfind("not run", 0) != 0
                   ? torch_rows_version
                   : torch_gemm_version;
  rowwise.insert(rowwise.end(), torch.begin(), torch.end());
  // Row-wise kernels are memory-bound on large shapes: their "%peak" is of the triad bandwidth.
  for (Result& r : rowwise) r.of_peak = r.rate(r.time.median) / peak_bandwidth(machine, r.threads);
  group_rows(rowwise);
  if (!val_rows.empty()) std::fputs("\n", stdout);
  print_validations(stdout, val_rows);
  fmt::print("PyTorch: {}\n", torch_rows_version);
  print_section(stdout,
                "Row-wise kernels (GB/s, each tensor touched counted once; %peak of the triad bandwidth)",
                rowwise);

  validations.insert(validations.end(), val_gemm.begin(), val_gemm.end());
  validations.insert(validations.end(), val_attn.begin(), val_attn.end());
  validations.insert(validations.end(), val_rows.begin(), val_rows.end());
  if (!o.json.empty()) {
    std::vector<Result> all = machine;
    all.insert(all.end(), gemm.begin(), gemm.end());
    all.insert(all.end(), attn.begin(), attn.end());
    all.insert(all.end(), rowwise.begin(), rowwise.end());
    write_json(o.json, info, all, validations);
    fmt::print("\nwrote {}\n", o.json);
  }
  for (const Validation& v : validations)
    if (!v.ok()) return 1;
  return torch_failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program app(
      "GFLOP/s and GB/s of every kernel on every arch this CPU runs, beside the machine's peak, "
      "OpenBLAS and PyTorch.",
      "bench_kernels");
  Options o;
  o.torch_script = TG_SOURCE_DIR "/tools/bench_torch_kernels.py";
  o.python = default_python();
  std::vector<std::string> archs;
  std::optional<int> reps;
  bool torch_on = false, torch_off = false;
  declare(app, o, archs, reps, torch_on, torch_off);
  return cli::run(app, argc, argv, [&] {
    finish(o, archs, reps, torch_on, torch_off);
    return run(o);
  });
}
