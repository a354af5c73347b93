#include "train/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

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

// A log whose last line was cut short (a run killed mid-write, a full disk): that partial line is
// dropped before a resumed run appends, so the new rows start on a line of their own. Readers skip
// such a line only at the end of the file (read_run_log); glued to the next row it would be an
// error for good.
void drop_cut_last_line(const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) return;  // no log yet: nothing to mend
  long end = -1;
  if (std::fseek(f, 0, SEEK_END) == 0) end = std::ftell(f);
  long keep = end;  // bytes up to and including the last newline, found 4 KiB at a time from the end
  char buf[4096];
  bool found = end <= 0;
  while (!found && keep > 0) {
    const long from = std::max(0L, keep - static_cast<long>(sizeof buf)), n = keep - from;
    if (std::fseek(f, from, SEEK_SET) != 0 ||
        std::fread(buf, 1, static_cast<size_t>(n), f) != static_cast<size_t>(n))
      break;  // unreadable: leave the file as it is
    const size_t nl = std::string_view(buf, static_cast<size_t>(n)).rfind('\n');
    found = nl != std::string_view::npos;
    keep = found ? from + static_cast<long>(nl) + 1 : from;
  }
  std::fclose(f);
  if (!found && keep > 0) return;
  if (end <= 0 || keep == end) return;
  std::error_code ec;
  std::filesystem::resize_file(file, static_cast<std::uintmax_t>(keep), ec);
  if (ec)
    throw std::runtime_error(
        fmt::format("{}: its last line is cut short and cannot be removed: {}", file, ec.message()));
  fmt::print(stderr, "warning: {}: dropped its last line ({} bytes), cut short when the run before stopped\n",
             file, end - keep);
}

}  // namespace

Log::Log(bool json, const std::string& file, bool append, const std::string& curves)
    : json_(json), path_(file), curves_(curves), file_(std::make_shared<File>()) {
  if (append) drop_cut_last_line(file);
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
