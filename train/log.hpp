// What a run prints: human-readable lines, or with --json one JSON object per line (the "event"
// first, then the fields in the order given), flushed at once so that a pipe sees each line as it
// happens. Ranks > 0 of an MPI job print nothing on stdout (dist::World sends it to /dev/null).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace tg::train {

class Log {
 public:
  explicit Log(bool json) : json_(json) {}
  bool json() const { return json_; }
  // Prints `text` (human mode) or {"event": event, ...fields} (JSON mode).
  void line(const std::string& event, const nlohmann::ordered_json& fields, const std::string& text) const;

 private:
  bool json_;
};

// "1 thread", "2 threads": n and the noun, plural unless n is 1.
std::string plural(int64_t n, const std::string& noun);

// "1h02m", "3m05s", "12s"; "?" for a negative or non-finite time.
std::string format_duration(double seconds);

double seconds_since(std::chrono::steady_clock::time_point t0);

}  // namespace tg::train
