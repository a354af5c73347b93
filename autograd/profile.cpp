#include "autograd/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>
#include <vector>

namespace tg::profile {

namespace detail {
bool g_on = false;
}

namespace {

struct Row {
  int64_t fwd_calls = 0, bwd_calls = 0;
  int64_t fwd_ns = 0, bwd_ns = 0;
  int64_t fwd_bytes = 0, bwd_bytes = 0;
  int64_t fwd_new = 0, bwd_new = 0;
};

struct State {
  std::map<std::string_view, Row> rows;
  int64_t last = 0;             // time of the last event (forward gaps start here)
  int64_t bytes = 0, news = 0;  // storage requested since the last event
  bool in_backward = false;
  int64_t steps = 0;
};

State& state() {
  static State s;
  return s;
}

// Only the thread that enabled profiling counts (the tape is per thread; kernels' OpenMP workers
// allocate nothing).
thread_local bool t_owner = false;

struct EnvInit {
  EnvInit() {
    const char* e = std::getenv("TAPEGRAD_PROFILE");
    if (e && *e && std::strcmp(e, "0") != 0) {
      enable(true);
      std::atexit([] { std::fputs(report().c_str(), stderr); });
    }
  }
} g_env_init;

}  // namespace

int64_t detail::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void enable(bool on) {
  detail::g_on = on;
  t_owner = on;
  state().last = detail::now_ns();
  state().bytes = state().news = 0;
}
bool enabled() {
  return detail::g_on;
}
void reset() {
  State& s = state();
  s.rows.clear();
  s.steps = 0;
  s.bytes = s.news = 0;
  s.last = detail::now_ns();
}

static void close_gap(const char* name) {
  State& s = state();
  const int64_t t = detail::now_ns();
  Row& r = s.rows[name];
  ++r.fwd_calls;
  r.fwd_ns += t - s.last;
  r.fwd_bytes += s.bytes;
  r.fwd_new += s.news;
  s.bytes = s.news = 0;
  s.last = t;
}

void mark(const char* name) {
  if (detail::g_on && t_owner) close_gap(name);
}

void detail::on_record(const char* op) {
  if (t_owner) close_gap(op);
}

void detail::on_backward_begin() {
  if (!t_owner) return;
  close_gap("(before backward)");
  state().in_backward = true;
}

void detail::on_backward_node(const char* op, int64_t ns) {
  if (!t_owner) return;
  State& s = state();
  Row& r = s.rows[op];
  ++r.bwd_calls;
  r.bwd_ns += ns;
  r.bwd_bytes += s.bytes;
  r.bwd_new += s.news;
  s.bytes = s.news = 0;
}

void detail::on_backward_end(int64_t clear_ns) {
  if (!t_owner) return;
  State& s = state();
  Row& r = s.rows["(tape clear)"];
  ++r.bwd_calls;
  r.bwd_ns += clear_ns;
  s.in_backward = false;
  ++s.steps;
  s.bytes = s.news = 0;
  s.last = now_ns();
}

void detail::on_alloc(int64_t bytes, bool miss) {
  if (!t_owner) return;
  State& s = state();
  s.bytes += bytes;
  s.news += miss;
}

std::string report() {
  const State& s = state();
  const double steps = static_cast<double>(std::max<int64_t>(1, s.steps));
  struct Line {
    std::string_view op;
    Row r;
  };
  std::vector<Line> lines;
  Row tot;
  for (const auto& [op, r] : s.rows) {
    lines.push_back({op, r});
    tot.fwd_calls += r.fwd_calls, tot.bwd_calls += r.bwd_calls;
    tot.fwd_ns += r.fwd_ns, tot.bwd_ns += r.bwd_ns;
    tot.fwd_bytes += r.fwd_bytes, tot.bwd_bytes += r.bwd_bytes;
    tot.fwd_new += r.fwd_new, tot.bwd_new += r.bwd_new;
  }
  std::sort(lines.begin(), lines.end(),
            [](const Line& a, const Line& b) { return a.r.fwd_ns + a.r.bwd_ns > b.r.fwd_ns + b.r.bwd_ns; });
  const double total_ns = static_cast<double>(std::max<int64_t>(1, tot.fwd_ns + tot.bwd_ns));
  auto ms = [&](int64_t ns) { return static_cast<double>(ns) * 1e-6 / steps; };
  auto mib = [&](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0) / steps; };
  auto per = [&](int64_t n) { return static_cast<double>(n) / steps; };
  std::string out = fmt::format(
      "tapegrad profile: per step over {} step(s); fwd = time since the previous op was recorded\n"
      "| op | calls fwd/bwd | fwd ms | bwd ms | total ms | % | fwd MiB | bwd MiB | new allocs |\n"
      "|---|---|---|---|---|---|---|---|---|\n",
      s.steps);
  auto line = [&](std::string_view op, const Row& r) {
    out +=
        fmt::format("| {} | {:.0f}/{:.0f} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n",
                    op, per(r.fwd_calls), per(r.bwd_calls), ms(r.fwd_ns), ms(r.bwd_ns),
                    ms(r.fwd_ns + r.bwd_ns), 100.0 * static_cast<double>(r.fwd_ns + r.bwd_ns) / total_ns,
                    mib(r.fwd_bytes), mib(r.bwd_bytes), per(r.fwd_new + r.bwd_new));
  };
  for (const Line& l : lines) line(l.op, l.r);
  line("total", tot);
  return out;
}

}  // namespace tg::profile
