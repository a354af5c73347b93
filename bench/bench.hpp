// Shared pieces of bench_kernels: options, buffers, the check against the scalar reference, and the
// sections (machine peak, GEMM, row-wise kernels, PyTorch), each in its own file.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "bench/report.hpp"
#include "bench/timing.hpp"
#include "ops/kernels.hpp"

namespace tg::bench {

struct Options {
  bool quick = false;            // small subset, few reps: a smoke test
  std::vector<ops::Arch> archs;  // default: every available arch
  std::vector<int> threads{1, 2};
  std::string filter;  // substring of "<kernel> <shape>"
  TimingOptions timing;
  std::string json;  // write results here when set
  int torch = -1;    // 1 = run the PyTorch script, 0 = don't, -1 = if torch imports
  bool blas = true;
  bool bf16 = true;  // the bf16 GEMM rows and the bf16 dot-product peak
  std::string python = "/usr/bin/python3";
  std::string torch_script;

  bool selected(const std::string& kernel, const std::string& shape) const {
    return filter.empty() || (kernel + " " + shape).find(filter) != std::string::npos;
  }
};

// 64-byte aligned float storage, so no timed load straddles a cache line by accident.
template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    if (void* p = std::aligned_alloc(64, bytes)) return static_cast<T*>(p);
    throw std::bad_alloc();
  }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const AlignedAllocator&) const { return true; }
};
using Buffer = std::vector<float, AlignedAllocator<float>>;

inline Buffer random_buffer(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Buffer b(n);
  for (float& x : b) x = dist(rng);
  return b;
}

// max_i |x_i - ref_i| / (atol + rtol |ref_i|): the kernel agrees with the reference when <= 1.
inline double max_err(const float* x, const float* ref, size_t n, double atol = 1e-5, double rtol = 1e-4) {
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::abs(static_cast<double>(x[i]) - ref[i]) / (atol + rtol * std::abs(ref[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

// "a,b,c" from items and a function giving each one's text.
template <class Range, class Str>
std::string join(const Range& items, Str&& str) {
  std::string s;
  for (const auto& x : items) {
    if (!s.empty()) s += ',';
    s += str(x);
  }
  return s;
}

// Machine peak: the FMA loop of every selected arch and streaming triad, per thread count.
std::vector<Result> run_machine(const Options& o);
// The FMA peak of arch `impl` at `threads` among run_machine's results, or NaN.
double peak_flops(const std::vector<Result>& machine, const std::string& impl, int threads);
// The triad bandwidth at `threads` (best sample), or NaN.
double peak_bandwidth(const std::vector<Result>& machine, int threads);
// The bf16 dot-product loop (vdpbf16ps, BFMMLA) of every selected arch whose CPU has it, with each
// chain count of kDotChains, per thread count (kernel "bf16dot"); empty without such a CPU.
std::vector<Result> run_bf16_peak(const Options& o);
// The best chain count's rate (best sample) for arch `impl` at `threads`, or NaN.
double peak_bf16_flops(const std::vector<Result>& machine, const std::string& impl, int threads);

// The peaks a training benchmark (bench_train, bench_lm) quotes its step against, at one thread
// count: the active arch's FMA loop and, where the CPU has a bf16 dot-product unit, the best
// chain count of its bf16 dot-product loop; NaN where there is none.
struct StepPeaks {
  std::string arch;
  int threads = 1;
  double fma = NAN, bf16 = NAN;  // GFLOP/s
  std::string bf16_unit;         // "AMX tiles" or "dot-product": the unit bf16 is the peak of
};
StepPeaks measure_step_peaks(int threads, bool quick);
// Two lines: each peak and the fraction of it the step's matmul GFLOP/s reach (or why there is
// no bf16 peak on this CPU).
void print_step_peaks(const StepPeaks& p, double step_gflops);

// The steps timed with the FMA peak probed right after each one. On a shared machine the host may
// take a core or cycles away for minutes, and a peak measured once, before or after the run, then
// belongs to other conditions than the steps it divides; a probe right after each step shares
// them (it cannot see what slows memory rather than the FMA units: that stays in the fraction).
struct ProbedSteps {
  Stats time;                   // seconds per step, as measure() gives them
  std::vector<double> seconds;  // each timed step
  std::vector<double> probe;    // the FMA loop's GFLOP/s right after it; empty when not probed
};
// The active arch's FMA loop on `threads` threads for `seconds` (rounds of under a millisecond, at
// least 3): its GFLOP/s over that whole time, not its best round, so that a core shared with other
// work shows (the best round of a process getting a tenth of a core still ran at full speed); NaN
// where this build has no FMA loop for the arch. machine.cpp.
double fma_probe_gflops(int threads, double seconds);
// f() once untimed, then `steps` timed calls, each followed when probe by fma_probe_gflops for 5% of
// that step's time (10 to 250 ms).
template <class F>
ProbedSteps measure_probed(F&& f, int steps, int threads, bool probe) {
  f();
  ProbedSteps s;
  for (int i = 0; i < std::max(1, steps); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    s.seconds.push_back(seconds_since(t0));
    if (probe) s.probe.push_back(fma_probe_gflops(threads, std::clamp(0.05 * s.seconds.back(), 0.01, 0.25)));
  }
  s.time = stats_of(s.seconds);
  s.time.inner = 1;
  return s;
}
// Each step's matmul GFLOP/s over the probe after it: their median, min and max (NaN without
// probes), as a Stats of fractions.
Stats frac_of_probes(const ProbedSteps& s, double flops_per_step);
// One line: the probes' median and range, and the steps' median fraction of them.
void print_probed_peak(const ProbedSteps& s, double flops_per_step, int threads);

// GEMM of every selected arch (and OpenBLAS when built with it) on the benchmark shapes, and the
// bf16 GEMM of every arch on the Transformer shapes (impl "<arch> bf16", "bf16f", "bf16w").
std::vector<Result> run_gemm(const Options& o, const std::vector<Result>& machine,
                             std::vector<Validation>& val);
// A selected GEMM case the bf16 GEMM runs on, as the PyTorch script takes it.
struct GemmShape {
  std::string kernel, shape;  // as in the GEMM rows ("gemm linear.fwd", "M2048 N256 K256 nn")
  int64_t M, N, K;
  bool ta, tb;
  int64_t batch;
};
std::vector<GemmShape> bf16_gemm_shapes(const Options& o);
// PyTorch's matmul in bf16 (oneDNN on CPUs with AVX512_BF16) and fp32 on `cases` (impl "torch bf16",
// "torch fp32"); sets vs_ref of our bf16 rows to ours / torch bf16. Empty when torch is not used
// (`version` then says why, as run_torch).
std::vector<Result> run_torch_gemm(const Options& o, const std::vector<GemmShape>& cases,
                                   std::vector<Result>& ours, std::string& version);
std::string openblas_info();  // "" when not built with OpenBLAS

// Softmax, layernorm, cross-entropy, GELU, Adam in GB/s.
std::vector<Result> run_rowwise(const Options& o, std::vector<Validation>& val);
// Bytes one call of a row-wise benchmark kernel moves, each tensor counted once (shared with torch).
double rowwise_bytes(const std::string& kernel, int64_t rows, int64_t cols);

// Runs tools/bench_torch_kernels.py on the row-wise cases that torch also has; fills vs_ref of `ours`.
// Returns the torch rows (empty when torch is not used); `version` gets torch's version or why not.
std::vector<Result> run_torch(const Options& o, std::vector<Result>& ours, std::string& version);
// Fused attention: one case of bench_attention.cpp, its label ("B64 H8 T64 S64 d32 causal p0.1"),
// the model flops of "attention.fwd" / "attention.fwd+bwd" on it, and the benchmark's cases.
struct AttentionShape {
  int64_t B, H, T, S, d;
  bool causal;
  float dropout;
  std::string text() const;
};
double attention_flops(const std::string& kernel, const AttentionShape& s);
std::vector<AttentionShape> attention_shapes(bool quick);
// The fused attention of every selected arch (but scalar) on attention_shapes, validated first.
std::vector<Result> run_attention(const Options& o, const std::vector<Result>& machine,
                                  std::vector<Validation>& val);
// PyTorch's scaled_dot_product_attention on the selected attention cases (fp32, and bf16 unless
// --no-bf16), fwd and fwd+bwd; sets ours / PyTorch fp32 on our rows (`version` as run_torch).
std::vector<Result> run_torch_attention(const Options& o, std::vector<Result>& ours, std::string& version);

}  // namespace tg::bench
