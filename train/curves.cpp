#include "train/curves.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/file.hpp"
#include "io/text.hpp"

namespace tg::train {

namespace {

using Json = nlohmann::json;

// Tableau's ten colours: one per run when several are compared.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// A number as a tick label: "0.001", "2500", "1e-05".
std::string tick_label(double v) {
  if (v == 0) return "0";
  return fmt::format("{:g}", v);
}

// The approximate width in pixels of `s` at font-size `size` (sans-serif: ~0.58 em per character).
double text_width(const std::string& s, double size) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return 0.58 * size * static_cast<double>(n);
}

// Ticks at 1, 2 or 5 x 10^k, about `want` intervals, the first at or below lo and the last at or
// above hi (the axis runs from the first to the last).
std::vector<double> nice_ticks(double lo, double hi, int want) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / want, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last; ++k) t.push_back(k * step);
  return t;
}

// An axis: value -> pixel, linear or log10.
struct Axis {
  double lo = 0, hi = 1;  // in data units
  bool log = false;
  double p0 = 0, p1 = 1;  // pixels of lo and hi
  std::vector<double> ticks;
  double at(double v) const {
    const double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi;
    const double x = log ? std::log10(v) : v;
    return p0 + (x - a) / (b - a) * (p1 - p0);
  }
};

// The loss axis: log scale when the values span more than a factor of 10 (a loss falling from 2.4
// to 0.003 reads as a line, not as a drop and a flat floor), else linear around them.
Axis loss_axis(const std::vector<double>& values) {
  Axis a;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (double v : values)
    if (std::isfinite(v) && v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!std::isfinite(lo)) {
    a.ticks = nice_ticks(0, 1, 5);
    return a;
  }
  if (hi / lo > 10) {
    a.log = true;
    // From the 1, 2 or 5 x 10^k just below the smallest value to the one just above the largest.
    const double d_lo = std::pow(10.0, std::floor(std::log10(lo))),
                 d_hi = std::pow(10.0, std::floor(std::log10(hi)));
    a.lo = d_lo * (lo >= 5 * d_lo ? 5 : lo >= 2 * d_lo ? 2 : 1);
    a.hi = d_hi * (hi <= d_hi ? 1 : hi <= 2 * d_hi ? 2 : hi <= 5 * d_hi ? 5 : 10);
    const bool few = a.hi / a.lo <= 1000;  // three decades or less: 2 and 5 labelled too
    for (double d = d_lo; d <= a.hi * 1.0001; d *= 10)
      for (double m : {1.0, 2.0, 5.0})
        if (m * d >= a.lo * 0.9999 && m * d <= a.hi * 1.0001 && (m == 1.0 || few)) a.ticks.push_back(m * d);
    if (a.ticks.empty() || a.ticks.front() > a.lo * 1.0001)
      a.ticks.insert(a.ticks.begin(), a.lo);  // label the ends
    if (a.ticks.back() < a.hi * 0.9999) a.ticks.push_back(a.hi);
    return a;
  }
  const double pad = std::max((hi - lo) * 0.05, hi * 0.01);
  a.ticks = nice_ticks(std::max(0.0, lo - pad), hi + pad, 6);
  a.lo = a.ticks.front();
  a.hi = a.ticks.back();
  return a;
}

std::string polyline(const std::vector<Point>& pts, const Axis& x, const Axis& y, const std::string& style) {
  std::string d;
  for (const Point& p : pts)
    if (std::isfinite(p.value) && (!y.log || p.value > 0))
      d += fmt::format("{:.1f},{:.1f} ", x.at(p.step), y.at(p.value));
  if (d.empty()) return "";
  d.pop_back();
  return fmt::format("<polyline points=\"{}\" fill=\"none\" {}/>\n", d, style);
}

// The learning rate to draw: the schedule's exact curve when it is known, else the logged values.
std::vector<Point> lr_points(const RunCurves& r) {
  if (!r.schedule || r.schedule_changed || r.total_steps < 1) return r.lr;
  std::vector<Point> pts;
  const int64_t total = r.total_steps, n = std::min<int64_t>(total, 400);
  std::vector<int64_t> steps;
  for (int64_t i = 0; i < n; ++i) steps.push_back(1 + (n > 1 ? (total - 1) * i / (n - 1) : 0));
  if (r.schedule->warmup > 0 && r.schedule->warmup <= total) steps.push_back(r.schedule->warmup);  // the peak
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  for (int64_t s : steps) pts.push_back({static_cast<double>(s), static_cast<double>(r.schedule->at(s))});
  return pts;
}

struct LegendEntry {
  std::string label, colour, dash;
  bool marker = false;
  double opacity = 1;
};

std::string legend_swatch(const LegendEntry& e, double x, double y) {
  std::string s = fmt::format(
      R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="2" {} stroke-opacity="{}"/>)"
      "\n",
      x, y, x + 26, y, e.colour, e.dash.empty() ? "" : fmt::format("stroke-dasharray=\"{}\"", e.dash),
      e.opacity);
  if (e.marker)
    s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)"
                     "\n",
                     x + 13, y, e.colour);
  return s + fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="12">{}</text>)"
                         "\n",
                         x + 32, y + 4, escape(e.label));
}

}  // namespace

std::string schedule_json(const nn::LrSchedule& s) {
  const char* kind = s.kind == nn::LrSchedule::Kind::noam     ? "noam"
                     : s.kind == nn::LrSchedule::Kind::cosine ? "cosine"
                                                              : "constant";
  auto num = [](float v) { return std::stod(fmt::format("{:.6g}", v)); };
  return nlohmann::ordered_json{
      {"kind", kind}, {"lr", num(s.lr)}, {"warmup", s.warmup}, {"total", s.total}, {"min_lr", num(s.lr_min)}}
      .dump();
}

std::optional<nn::LrSchedule> parse_schedule_json(const std::string& text) {
  const Json j = Json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string() || !j.contains("lr") ||
      !j["lr"].is_number())
    return std::nullopt;
  nn::LrSchedule s;
  try {
    s.kind = nn::LrSchedule::parse(j["kind"].get<std::string>());
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  s.lr = j["lr"].get<float>();
  if (j.contains("warmup") && j["warmup"].is_number_integer()) s.warmup = j["warmup"].get<int64_t>();
  if (j.contains("total") && j["total"].is_number_integer()) s.total = j["total"].get<int64_t>();
  if (j.contains("min_lr") && j["min_lr"].is_number()) s.lr_min = j["min_lr"].get<float>();
  return s;
}

std::string describe_schedule(const nn::LrSchedule& s) {
  switch (s.kind) {
    case nn::LrSchedule::Kind::noam:
      return s.warmup > 0 ? fmt::format("noam, peak lr {:g} at step {}", s.lr, s.warmup)
                          : fmt::format("inverse square root from lr {:g}", s.lr);
    case nn::LrSchedule::Kind::cosine:
      return fmt::format("cosine, lr {:g} to {:g}{}", s.lr, s.lr_min,
                         s.warmup > 0 ? fmt::format(", warmup {}", s.warmup) : "");
    case nn::LrSchedule::Kind::constant:
      break;
  }
  return fmt::format("constant lr {:g}", s.lr);
}

RunCurves read_run_log(const std::string& path, const std::string& name) {
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const std::runtime_error& e) {
    throw io::DataError(e.what());
  }
  RunCurves r;
  r.name = name;
  if (r.name.empty()) {  // "toy.log.jsonl" -> "toy"
    r.name = std::filesystem::path(path).filename().string();
    for (const char* ext : {".log.jsonl", ".jsonl", ".json"})
      if (r.name.size() > std::strlen(ext) && r.name.ends_with(ext)) {
        r.name.resize(r.name.size() - std::strlen(ext));
        break;
      }
  }
  std::istringstream in(text);
  int64_t lineno = 0;
  for (std::string line; std::getline(in, line);) {
    ++lineno;
    if (io::trim(line).empty()) continue;
    const Json j = Json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) {
      if (in.peek() == std::char_traits<char>::eof()) break;  // a last line cut short (kill -9)
      throw io::DataError(
          fmt::format("{}:{}: not a log event (a JSON object with an \"event\")", path, lineno));
    }
    const std::string event = j["event"].get<std::string>();
    auto number = [&](const char* key) {
      return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::nan("");
    };
    const double step = number("step");
    if (event == "start") {
      // A resumed run continues from its checkpoint: what the old run logged after it was lost.
      if (std::isfinite(step))
        for (auto* v : {&r.train_loss, &r.valid_loss, &r.lr})
          std::erase_if(*v, [&](const Point& p) { return p.step > step; });
      if (j.contains("schedule")) {
        std::optional<nn::LrSchedule> s = parse_schedule_json(j["schedule"].dump());
        if (!r.lr.empty() && (!s || !r.schedule || schedule_json(*s) != schedule_json(*r.schedule)))
          r.schedule_changed = true;
        r.schedule = std::move(s);
      }
      if (const double t = number("total_steps"); std::isfinite(t)) r.total_steps = static_cast<int64_t>(t);
      if (j.contains("program") && j["program"].is_string()) r.program = j["program"].get<std::string>();
    } else if (event == "train" && std::isfinite(step)) {
      r.train_loss.push_back({step, number("loss")});
      r.lr.push_back({step, number("lr")});
      if (const double t = number("total_steps"); std::isfinite(t)) r.total_steps = static_cast<int64_t>(t);
    } else if (event == "valid" && std::isfinite(step)) {
      r.valid_loss.push_back({step, number("loss")});
    }
  }
  return r;
}

std::string curves_svg(const std::vector<RunCurves>& runs, const CurvesOptions& o) {
  const bool several = runs.size() > 1;
  // The legend first: its rows set the height of the chart's bottom margin.
  std::vector<LegendEntry> legend;
  std::vector<double> losses;
  double max_step = 1, max_lr = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunCurves& r = runs[i];
    const std::string colour = several ? kPalette[i % 10] : "#1f77b4";
    const std::string prefix = several ? r.name + ": " : "";
    legend.push_back({prefix + "training loss", colour, ""});
    if (!r.valid_loss.empty())
      legend.push_back({prefix + "validation loss", several ? colour : "#d62728", "6 3", true});
    const std::vector<Point> lr = lr_points(r);
    if (!lr.empty())
      legend.push_back({prefix + "learning rate (right axis)", several ? colour : "#7f7f7f", "2 3", false,
                        several ? 0.6 : 1.0});
    for (const auto* v : {&r.train_loss, &r.valid_loss})
      for (const Point& p : *v) losses.push_back(p.value), max_step = std::max(max_step, p.step);
    for (const Point& p : lr)
      if (std::isfinite(p.value)) max_lr = std::max(max_lr, p.value);
    max_step = std::max(max_step, static_cast<double>(r.total_steps));
  }
  const double W = o.width, left = 78, right = 84, top = 58;
  // Legend rows: entries flow left to right and wrap at the plot's width.
  std::vector<std::vector<size_t>> rows(1);
  double row_w = 0;
  const double plot_w = W - left - right;
  for (size_t k = 0; k < legend.size(); ++k) {
    const double w = 40 + text_width(legend[k].label, 12) + 18;
    if (row_w > 0 && row_w + w > plot_w) rows.emplace_back(), row_w = 0;
    rows.back().push_back(k);
    row_w += w;
  }
  const double legend_h = 20.0 * static_cast<double>(rows.size());
  const double bottom = 52 + legend_h + 10;
  const double H = std::max(o.height, top + 200 + bottom);

  Axis x{0, max_step, false, left, W - right, nice_ticks(0, max_step, 6)};
  x.hi = x.ticks.back();
  Axis y = loss_axis(losses);
  y.p0 = H - bottom, y.p1 = top;
  Axis y2{0, max_lr > 0 ? max_lr * 1.1 : 1.0, false, H - bottom, top, {}};
  y2.ticks = nice_ticks(0, y2.hi, 5);
  y2.hi = y2.ticks.back();

  std::string title = o.title;
  if (title.empty())
    title = several ? fmt::format("Loss curves: {} runs", runs.size())
                    : "Loss curves: " + (runs.empty() ? std::string("no run") : runs[0].name);
  std::string subtitle;
  if (!several && !runs.empty()) {
    const RunCurves& r = runs[0];
    std::vector<std::string> parts;
    if (!r.program.empty()) parts.push_back(r.program);
    if (r.schedule) parts.push_back(describe_schedule(*r.schedule));
    if (r.total_steps > 0) parts.push_back(fmt::format("{} steps", r.total_steps));
    if (!r.train_loss.empty())
      parts.push_back(fmt::format("logged up to step {:g}", r.train_loss.back().step));
    for (const std::string& p : parts) subtitle += (subtitle.empty() ? "" : " · ") + p;
  }

  std::string svg = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0:.0f}" height="{1:.0f}" viewBox="0 0 {0:.0f} {1:.0f}" )"
      R"(font-family="sans-serif">)"
      "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H);
  svg += fmt::format(
      R"(<text x="{:.1f}" y="22" font-size="15" font-weight="bold" text-anchor="middle">{}</text>)"
      "\n",
      W / 2, escape(title));
  if (!subtitle.empty())
    svg += fmt::format(R"(<text x="{:.1f}" y="40" font-size="12" fill="#444" text-anchor="middle">{}</text>)"
                       "\n",
                       W / 2, escape(subtitle));
  // Grid and ticks.
  const double px0 = left, px1 = W - right, py0 = top, py1 = H - bottom;
  for (double t : x.ticks) {
    const double px = x.at(t);
    svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#e4e4e4"/>)"
                       "\n"
                       R"(<text x="{0:.1f}" y="{3:.1f}" font-size="11" text-anchor="middle">{4}</text>)"
                       "\n",
                       px, py0, py1, py1 + 16, tick_label(t));
  }
  for (double t : y.ticks) {
    const double py = y.at(t);
    svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{2:.1f}" y2="{1:.1f}" stroke="#e4e4e4"/>)"
                       "\n"
                       R"(<text x="{3:.1f}" y="{4:.1f}" font-size="11" text-anchor="end">{5}</text>)"
                       "\n",
                       px0, py, px1, px0 - 6, py + 4, tick_label(t));
  }
  if (max_lr > 0)
    for (double t : y2.ticks)
      svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{2:.1f}" y2="{1:.1f}" stroke="#888"/>)"
                         "\n"
                         R"(<text x="{3:.1f}" y="{4:.1f}" font-size="11" fill="#555">{5}</text>)"
                         "\n",
                         px1, y2.at(t), px1 + 4, px1 + 7, y2.at(t) + 4, tick_label(t));
  svg +=
      fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#666"/>)"
                  "\n",
                  px0, py0, px1 - px0, py1 - py0);
  // Axis titles.
  svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="13" text-anchor="middle">step</text>)"
                     "\n",
                     (px0 + px1) / 2, py1 + 36);
  const std::string ytitle = y.log ? "loss per token (nats, log scale)" : "loss per token (nats)";
  svg += fmt::format(
      R"svg(<text x="18" y="{0:.1f}" font-size="13" text-anchor="middle" transform="rotate(-90 18 {0:.1f})">{1}</text>)svg"
      "\n",
      (py0 + py1) / 2, ytitle);
  if (max_lr > 0)
    svg += fmt::format(
        R"svg(<text x="{0:.1f}" y="{1:.1f}" font-size="13" text-anchor="middle" fill="#555" transform="rotate(90 {0:.1f} {1:.1f})">learning rate</text>)svg"
        "\n",
        W - 16, (py0 + py1) / 2);
  // The lines, clipped to the plot: learning rate under the losses.
  svg += fmt::format(
      R"(<clipPath id="plot"><rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}"/></clipPath>)"
      "\n<g clip-path=\"url(#plot)\">\n",
      px0, py0, px1 - px0, py1 - py0);
  size_t k = 0;
  bool any = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunCurves& r = runs[i];
    const LegendEntry& tr = legend[k++];
    const LegendEntry* va = !r.valid_loss.empty() ? &legend[k++] : nullptr;
    const std::vector<Point> lr = lr_points(r);
    const LegendEntry* le = !lr.empty() ? &legend[k++] : nullptr;
    if (le && max_lr > 0)
      svg +=
          polyline(lr, x, y2,
                   fmt::format(R"(stroke="{}" stroke-width="1.4" stroke-dasharray="2 3" stroke-opacity="{}")",
                               le->colour, le->opacity));
    const std::string t =
        polyline(r.train_loss, x, y, fmt::format(R"(stroke="{}" stroke-width="1.8")", tr.colour));
    svg += t;
    any = any || !t.empty();
    if (va && !r.valid_loss.empty()) {
      svg += polyline(r.valid_loss, x, y,
                      fmt::format(R"(stroke="{}" stroke-width="1.8" stroke-dasharray="6 3")", va->colour));
      for (const Point& p : r.valid_loss)
        if (std::isfinite(p.value) && (!y.log || p.value > 0))
          svg += fmt::format(
              R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"><title>step {:g}: validation loss {:.4f}</title></circle>)"
              "\n",
              x.at(p.step), y.at(p.value), va->colour, p.step, p.value);
      any = true;
    }
  }
  svg += "</g>\n";
  if (!any)
    svg += fmt::format(
        R"(<text x="{:.1f}" y="{:.1f}" font-size="13" fill="#888" text-anchor="middle">no loss logged yet</text>)"
        "\n",
        (px0 + px1) / 2, (py0 + py1) / 2);
  // The legend under the axis title.
  for (size_t row = 0; row < rows.size(); ++row) {
    double lx = px0;
    const double ly = py1 + 58 + 20.0 * static_cast<double>(row);
    for (size_t e : rows[row]) {
      svg += legend_swatch(legend[e], lx, ly);
      lx += 40 + text_width(legend[e].label, 12) + 18;
    }
  }
  return svg + "</svg>\n";
}

void write_curves(const std::vector<RunCurves>& runs, const std::string& svg_path, const CurvesOptions& o) {
  io::write_file_atomic(svg_path, curves_svg(runs, o));
}

}  // namespace tg::train
