#include "train/log.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "train/curves.hpp"

namespace tg::train {

struct Log::File {
  std::FILE* f = nullptr;
  nlohmann::ordered_json start_fields = nlohmann::ordered_json::object();
  mutable bool warned_write = false, warned_curves = false;
  ~File() {
    if (f) std::fclose(f);
  }
};

namespace {

// A file name need not be UTF-8: invalid bytes print as U+FFFD instead of throwing.
std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

Log::Log(bool json, const std::string& file, bool append, const std::string& curves)
    : json_(json), path_(file), curves_(curves), file_(std::make_shared<File>()) {
  file_->f = std::fopen(file.c_str(), append ? "a" : "w");
  if (!file_->f) throw std::runtime_error(fmt::format("cannot write {}: {}", file, std::strerror(errno)));
}

void Log::add_to_start(const nlohmann::ordered_json& fields) {
  if (!file_) file_ = std::make_shared<File>();
  file_->start_fields.update(fields);
}

void Log::line(const std::string& event, const nlohmann::ordered_json& fields,
               const std::string& text) const {
  nlohmann::ordered_json out = {{"event", event}};
  out.update(fields);
  if (event == "start" && file_) {
    out.update(file_->start_fields);
    out["time"] = utc_now();
  }
  if (json_)
    fmt::print("{}\n", dump(out));
  else
    fmt::print("{}\n", text);
  std::fflush(stdout);
  if (!file_ || !file_->f) return;
  const std::string row = dump(out) + "\n";
  if ((std::fwrite(row.data(), 1, row.size(), file_->f) != row.size() || std::fflush(file_->f) != 0) &&
      !file_->warned_write) {
    file_->warned_write = true;
    fmt::print(stderr, "warning: writing the log {} failed: {}; training goes on\n", path_,
               std::strerror(errno));
  }
  if (curves_.empty() || (event != "valid" && event != "done")) return;
  try {
    write_curves({read_run_log(path_)}, curves_);
  } catch (const std::exception& e) {
    if (!file_->warned_curves)
      fmt::print(stderr, "warning: drawing the loss curves failed: {}; training goes on\n", e.what());
    file_->warned_curves = true;
  }
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
