#include "train/log.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace tg::train {

void Log::line(const std::string& event, const nlohmann::ordered_json& fields,
               const std::string& text) const {
  if (json_) {
    nlohmann::ordered_json out = {{"event", event}};
    out.update(fields);
    // A file name need not be UTF-8: invalid bytes print as U+FFFD instead of throwing.
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  } else {
    fmt::print("{}\n", text);
  }
  std::fflush(stdout);
}

std::string plural(int64_t n, const std::string& noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t % 3600 / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tg::train
