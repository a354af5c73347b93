// A small timing harness: warm up, then time repetitions and keep the median.
//
// Why the median: the machine is shared and has 2 cores, so a few samples are always hit by
// someone else's work; the median ignores them where a mean would not. min/max show the spread.
// Tiny kernels (a 64^3 GEMM takes microseconds) are called `inner` times per sample so one sample
// lasts at least `min_sample_s` and the clock's resolution does not matter.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tg::bench {

struct TimingOptions {
  int reps = 11;               // timed samples; the median is reported
  double warmup_s = 0.05;      // run at least this long (and at least once) before timing
  double min_sample_s = 2e-3;  // each sample repeats the call until it lasts at least this
};

// Seconds per call.
struct Stats {
  double median = NAN, min = NAN, max = NAN;
  int reps = 0;
  int64_t inner = 0;  // calls per sample
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline Stats stats_of(std::vector<double> samples) {
  Stats s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  s.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.min = samples.front();
  s.max = samples.back();
  s.reps = static_cast<int>(n);
  return s;
}

// Times f(): the warm-up also estimates the cost of one call, which sets `inner`.
template <class F>
Stats measure(F&& f, const TimingOptions& o) {
  using clock = std::chrono::steady_clock;
  int64_t warm_calls = 0;
  const auto w0 = clock::now();
  do {
    f();
    ++warm_calls;
  } while (seconds_since(w0) < o.warmup_s);
  const double per_call = seconds_since(w0) / static_cast<double>(warm_calls);
  const int64_t inner = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(o.min_sample_s / per_call)));

  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(o.reps));
  for (int r = 0; r < std::max(1, o.reps); ++r) {
    const auto t0 = clock::now();
    for (int64_t i = 0; i < inner; ++i) f();
    samples.push_back(seconds_since(t0) / static_cast<double>(inner));
  }
  Stats s = stats_of(std::move(samples));
  s.inner = inner;
  return s;
}

}  // namespace tg::bench
