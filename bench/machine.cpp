// The machine's measured peak: FMA throughput per arch and streaming (triad) bandwidth,
// each on every selected thread count. GEMM is quoted against the FMA peak of the same arch.
#include <omp.h>

#include <fmt/core.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>

#include "bench/bench.hpp"
#include "bench/peak.hpp"

namespace tg::bench {

void sink(float x) {
  static std::atomic<float> s{0.0f};
  s.store(x, std::memory_order_relaxed);
}

FmaLoop fma_loop(ops::Arch a) {
  switch (a) {
    case ops::Arch::scalar:
      return fma_loop_scalar;
#if defined(TG_PEAK_SSE2)
    case ops::Arch::sse2:
      return fma_loop_sse2;
#endif
#if defined(TG_PEAK_AVX2)
    case ops::Arch::avx2:
      return fma_loop_avx2;
#endif
#if defined(TG_PEAK_AVX512)
    case ops::Arch::avx512:
      return fma_loop_avx512;
#endif
#if defined(TG_PEAK_NEON)
    case ops::Arch::neon:
      return fma_loop_neon;
#endif
    default:
      return nullptr;
  }
}

DotLoop amx_loop(ops::Arch a) {
#if defined(TG_PEAK_AMX_BF16)
  if (ops::has_bf16_path(a, ops::Bf16Path::amx)) return dot_loop_amx_bf16;  // it also asked for the tiles
#endif
  (void)a;
  return nullptr;
}

std::string bf16_peak_impl(ops::Arch a, ops::Bf16Path p) {
  return std::string(ops::arch_name(a)) + (p == ops::Bf16Path::amx ? " amx" : "");
}

DotLoop dot_loop(ops::Arch a) {
  if (!ops::has_bf16_dot(a)) return nullptr;  // never run a bf16 instruction the CPU lacks
  switch (a) {
#if defined(TG_PEAK_AVX512_BF16)
    case ops::Arch::avx512:
      return dot_loop_avx512_bf16;
#endif
#if defined(TG_PEAK_NEON_BF16)
    case ops::Arch::neon:
      return dot_loop_neon_bf16;
#endif
    default:
      return nullptr;
  }
}

namespace {

// 200k iterations x 12 accumulators is ~1 ms per thread: long enough to amortize the fork/join.
constexpr int64_t kFmaIters = 200000;

Result fma_peak(ops::Arch arch, FmaLoop loop, int threads, const TimingOptions& t) {
  Result r;
  r.kernel = "fma";
  r.shape = fmt::format("12 acc x {}", kFmaIters);
  r.impl = ops::arch_name(arch);
  r.threads = threads;
  r.work = loop(kFmaIters) * threads;
  r.time = measure(
      [&] {
#pragma omp parallel num_threads(threads)
        loop(kFmaIters);
      },
      t);
  return r;
}

// STREAM triad a = b + s c over three 64 MiB arrays: 2 reads + 1 write per element. Write-allocate
// traffic is not counted (STREAM's convention), so this is the rate the kernels' GB/s compare to.
Result triad(int threads, const TimingOptions& t) {
  const int64_t n = (64ll << 20) / sizeof(float);
  Buffer a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n));
  float* pa = a.data();
  float* pb = b.data();
  float* pc = c.data();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) pa[i] = 0.0f, pb[i] = 1.0f, pc[i] = 2.0f;
  Result r;
  r.kernel = "triad";
  r.shape = "3 x 64 MiB";
  r.impl = "memory";
  r.threads = threads;
  r.flops = false;
  r.work = 3.0 * static_cast<double>(n) * sizeof(float);
  r.time = measure(
      [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
      },
      t);
  sink(pa[n / 2]);
  return r;
}

// The bf16 dot-product loop with `chains` accumulators (AMX: its one shape, four accumulator tiles),
// as fma_peak.
Result dot_peak(ops::Arch arch, ops::Bf16Path path, DotLoop loop, int chains, int threads,
                const TimingOptions& t) {
  Result r;
  r.kernel = "bf16dot";
  r.shape = path == ops::Bf16Path::amx ? fmt::format("4 tiles x {}", kFmaIters)
                                       : fmt::format("{} acc x {}", chains, kFmaIters);
  r.impl = bf16_peak_impl(arch, path);
  r.threads = threads;
  r.work = loop(chains, kFmaIters) * threads;
  r.time = measure(
      [&] {
#pragma omp parallel num_threads(threads)
        loop(chains, kFmaIters);
      },
      t);
  return r;
}

}  // namespace

std::vector<Result> run_bf16_peak(const Options& o) {
  std::vector<Result> out;
  if (!o.bf16) return out;
  for (int threads : o.threads)
    for (ops::Arch arch : o.archs) {
      if (DotLoop loop = dot_loop(arch))
        for (int chains : kDotChains)
          if (loop(chains, 1) > 0)
            out.push_back(dot_peak(arch, ops::Bf16Path::dot, loop, chains, threads, o.timing));
      if (DotLoop loop = amx_loop(arch))
        out.push_back(dot_peak(arch, ops::Bf16Path::amx, loop, kDotChains[0], threads, o.timing));
    }
  return out;
}

double peak_bf16_flops(const std::vector<Result>& machine, const std::string& impl, int threads) {
  double best = NAN;
  for (const Result& r : machine)
    if (r.kernel == "bf16dot" && r.impl == impl && r.threads == threads && !(r.rate(r.time.min) <= best))
      best = r.rate(r.time.min);
  return best;
}

std::vector<Result> run_machine(const Options& o) {
  std::vector<Result> out;
  for (int threads : o.threads) {
    // ~1 ms per sample: 31 of them at least, so that one of them runs with every core (the peak is the
    // best sample) even when the host takes a core for a while
    TimingOptions tf = o.timing;
    tf.reps = std::max(tf.reps, 31);
    for (ops::Arch arch : o.archs)
      if (FmaLoop loop = fma_loop(arch)) out.push_back(fma_peak(arch, loop, threads, tf));
    TimingOptions t = o.timing;
    t.reps = std::min(t.reps, 7);  // 20 ms per call: a few reps already give a stable median
    out.push_back(triad(threads, t));
  }
  return out;
}

// The peak is an upper bound, so it is the best sample (shortest time), not the median: on a shared
// machine a sample that lost its core for a moment must not lower the bound the kernels are held to.
double peak_flops(const std::vector<Result>& machine, const std::string& impl, int threads) {
  for (const Result& r : machine)
    if (r.kernel == "fma" && r.impl == impl && r.threads == threads) return r.rate(r.time.min);
  return NAN;
}

StepPeaks measure_step_peaks(int threads, bool quick) {
  Options po;
  po.archs = {ops::active_arch()};
  po.threads = {threads};
  if (quick) po.timing = {3, 0.02, 1e-3};
  std::vector<Result> machine = run_machine(po);
  const std::vector<Result> dot = run_bf16_peak(po);
  machine.insert(machine.end(), dot.begin(), dot.end());
  StepPeaks p;
  p.arch = ops::arch_name(ops::active_arch());
  p.threads = threads;
  p.fma = peak_flops(machine, p.arch, threads);
  // the unit the bf16 GEMM runs on: AMX where the dispatcher took it, else the dot-product instruction
  const ops::Arch a = ops::active_arch();
  const bool amx = ops::bf16_path(a) == ops::Bf16Path::amx;
  p.bf16_unit = amx ? "AMX tiles" : "dot-product";
  p.bf16 =
      peak_bf16_flops(machine, bf16_peak_impl(a, amx ? ops::Bf16Path::amx : ops::Bf16Path::dot), threads);
  return p;
}

void print_step_peaks(const StepPeaks& p, double step_gflops) {
  fmt::print("  FMA peak ({}, {} threads) {:.1f} GFLOP/s: the training step reaches {:.1f}% of it\n", p.arch,
             p.threads, p.fma, 100.0 * step_gflops / p.fma);
  if (std::isnan(p.bf16))
    fmt::print(
        "  bf16 dot-product peak: none ({} has no bf16 dot-product instruction on this CPU; --precision bf16 "
        "runs fp32 products)\n",
        p.arch);
  else
    fmt::print("  bf16 {} peak ({}, {} threads) {:.1f} GFLOP/s: the training step reaches {:.1f}% of it\n",
               p.bf16_unit, p.arch, p.threads, p.bf16, 100.0 * step_gflops / p.bf16);
}

double fma_probe_gflops(int threads, double seconds) {
  const FmaLoop loop = fma_loop(ops::active_arch());
  if (!loop) return NAN;
  const double flops = loop(kFmaIters) * threads;  // also warms the units up
  int64_t rounds = 0;
  const auto t0 = std::chrono::steady_clock::now();
  do {
#pragma omp parallel num_threads(threads)
    loop(kFmaIters);
    ++rounds;
  } while (rounds < 3 || seconds_since(t0) < seconds);
  return flops * static_cast<double>(rounds) / seconds_since(t0) * 1e-9;
}

Stats frac_of_probes(const ProbedSteps& s, double flops_per_step) {
  std::vector<double> frac;
  for (size_t i = 0; i < s.probe.size() && i < s.seconds.size(); ++i)
    frac.push_back(flops_per_step / s.seconds[i] * 1e-9 / s.probe[i]);
  return stats_of(std::move(frac));
}

void print_probed_peak(const ProbedSteps& s, double flops_per_step, int threads) {
  const Stats p = stats_of(s.probe), f = frac_of_probes(s, flops_per_step);
  if (s.probe.empty() || std::isnan(p.median)) return;  // not probed, or no FMA loop for this arch
  fmt::print(
      "  FMA peak probed after each step ({}, {} threads): median {:.1f} GFLOP/s (range {:.1f}..{:.1f}); "
      "each step against the probe after it: median {:.1f}% (range {:.1f}..{:.1f}%)\n",
      ops::arch_name(ops::active_arch()), threads, p.median, p.min, p.max, 100.0 * f.median, 100.0 * f.min,
      100.0 * f.max);
}

double peak_bandwidth(const std::vector<Result>& machine, int threads) {
  for (const Result& r : machine)
    if (r.kernel == "triad" && r.threads == threads) return r.rate(r.time.min);
  return NAN;
}

}  // namespace tg::bench
