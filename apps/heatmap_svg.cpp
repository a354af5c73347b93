#include "apps/heatmap_svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "io/utf8.hpp"

namespace tg::heatmap {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    // XML has no character for a control byte but tab, newline and return, nor for invalid UTF-8:
    // either would make the file unreadable (a prompt holding ESC, a byte model's bytes); they are
    // shown as \x1b, as lm sample shows them on a terminal (io/terminal.cpp).
    const std::string_view rest = std::string_view(s).substr(i);
    const size_t len = c < 0x80 ? 1 : io::sequence_length(c);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f ||
        (c >= 0x80 && (len > rest.size() || !io::is_valid_utf8(rest.substr(0, len))))) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.append(rest.substr(0, len));
    }
    i += len;
  }
  return out;
}

double label_width(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return 6.5 * static_cast<double>(n);
}

std::string color(float w) {
  const float t = std::clamp(w, 0.0f, 1.0f);
  auto mix = [&](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * t)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(255, 8), mix(255, 48), mix(255, 107));
}

std::string color(float v, float lo, float hi) {
  if (!std::isfinite(v)) return "#c8c8c8";
  if (lo >= 0.0f) return color(hi > lo ? (v - lo) / (hi - lo) : 0.0f);
  const float m = std::max(-lo, hi), t = std::clamp(m > 0.0f ? v / m : 0.0f, -1.0f, 1.0f);
  if (t <= 0.0f) return color(-t);
  auto mix = [&](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * t)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(255, 103), mix(255, 0), mix(255, 13));
}

bool Panel::is_masked(int64_t r, int64_t c) const {
  const auto S = static_cast<int64_t>(cols->size());
  if (causal && c > r) return true;
  if (masked && (*masked)[static_cast<size_t>(r * S + c)]) return true;
  return !std::isfinite(weights[r * S + c]);
}

int64_t label_stride(double cell) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(12.0 / std::max(cell, 0.01) - 1e-9)));
}

namespace {
// The width of an axis title (font-size 11, italic).
double title_width(const std::string& s) {
  return 6.2 * static_cast<double>(s.size());
}
}  // namespace

std::string hatch_defs(const std::string& id) {
  return fmt::format(
      R"svg(<defs><pattern id="{}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">)svg"
      R"(<rect width="6" height="6" fill="#f0f0f0"/><rect width="2" height="6" fill="#b4b4b4"/></pattern></defs>)"
      "\n",
      id);
}

Size draw_panel(std::string& svg, const Panel& p, double x, double y, double cell, double label_w,
                const std::string& hatch) {
  const auto T = static_cast<int64_t>(p.rows->size()), S = static_cast<int64_t>(p.cols->size());
  const int64_t stride = label_stride(cell);
  svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="12" font-weight="bold">{}</text>)"
                     "\n",
                     x, y + 12, xml_escape(p.title));
  const double gx = x + 18 + label_w, gy = y + 34 + label_w;  // grid origin
  const double gw = cell * static_cast<double>(S), gh = cell * static_cast<double>(T);
  // Axis titles: the columns' above their labels, the rows' on the left, reading upwards.
  svg += fmt::format(
      R"(<text x="{:.1f}" y="{:.1f}" font-size="11" font-style="italic" fill="#555" text-anchor="middle">{}</text>)"
      "\n",
      gx + gw / 2, y + 28, xml_escape(p.col_title));
  svg += fmt::format(
      R"svg(<text x="{0:.1f}" y="{1:.1f}" font-size="11" font-style="italic" fill="#555" text-anchor="middle" transform="rotate(-90 {0:.1f} {1:.1f})">{2}</text>)svg"
      "\n",
      x + 10, gy + std::max(gh, title_width(p.row_title)) / 2, xml_escape(p.row_title));
  for (int64_t s = 0; s < S; s += stride)
    svg += fmt::format(
        R"svg(<text x="{0:.1f}" y="{1:.1f}" font-size="11" transform="rotate(-90 {0:.1f} {1:.1f})">{2}</text>)svg"
        "\n",
        gx + (static_cast<double>(s) + 0.5) * cell + 4, gy - 4,
        xml_escape((*p.cols)[static_cast<size_t>(s)]));
  const bool unit = p.lo == 0.0f && p.hi == 1.0f;
  const bool values = p.cell_text || (unit && cell >= kValueCell);
  for (int64_t t = 0; t < T; ++t) {
    const std::string& row = (*p.rows)[static_cast<size_t>(t)];
    if (t % stride == 0)
      svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="end">{}</text>)"
                         "\n",
                         gx - 4, gy + (static_cast<double>(t) + 0.5) * cell + 4, xml_escape(row));
    const double cy = gy + static_cast<double>(t) * cell;
    for (int64_t s = 0; s < S;) {
      const double cx = gx + static_cast<double>(s) * cell;
      if (p.is_masked(t, s)) {  // a run of masked cells: one hatched rectangle
        int64_t e = s + 1;
        while (e < S && p.is_masked(t, e)) ++e;
        svg += fmt::format(
            R"svg(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="url(#{})"><title>{} -> {}{}: masked</title></rect>)svg"
            "\n",
            cx, cy, cell * static_cast<double>(e - s), cell, hatch, xml_escape(row),
            xml_escape((*p.cols)[static_cast<size_t>(s)]),
            e - s > 1 ? " .. " + xml_escape((*p.cols)[static_cast<size_t>(e - 1)]) : "");
        s = e;
        continue;
      }
      const float w = p.weights[t * S + s];
      const std::string value = unit ? fmt::format("{:.3f}", w) : fmt::format("{:.6g}", w);
      svg += fmt::format(
          R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"><title>{} -> {}: {}</title></rect>)"
          "\n",
          cx, cy, cell, cell, p.plain ? "white" : color(w, p.lo, p.hi), xml_escape(row),
          xml_escape((*p.cols)[static_cast<size_t>(s)]), value);
      if (values) {
        // Dark cells get white text. The text ignores the pointer, so the cell's tooltip still shows.
        const float m = std::max(std::abs(p.lo), std::abs(p.hi));
        const bool dark =
            !p.plain && m > 0 && (p.lo >= 0 ? (w - p.lo) / (p.hi - p.lo) : std::abs(w) / m) > 0.55f;
        svg += fmt::format(
            R"(<text x="{:.1f}" y="{:.1f}" font-size="{}" text-anchor="middle" fill="{}" pointer-events="none">{}</text>)"
            "\n",
            cx + cell / 2, cy + cell / 2 + 3, p.cell_text ? 9 : 8, dark ? "white" : "black",
            xml_escape(p.cell_text ? (*p.cell_text)[static_cast<size_t>(t * S + s)]
                                   : fmt::format("{:.2f}", w)));
      }
      ++s;
    }
  }
  svg +=
      fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#888"/>)"
                  "\n",
                  gx, gy, gw, gh);
  return {std::max(18 + label_w + gw, 7.5 * static_cast<double>(p.title.size())),
          34 + label_w + std::max(gh, title_width(p.row_title))};
}

double draw_colour_bar(std::string& svg, float lo, float hi, double x, double y, double width,
                       const std::string& title, bool masked, const std::string& hatch) {
  constexpr int kSteps = 48;
  const bool diverging = lo < 0.0f;
  const float m = std::max(-lo, hi), a = diverging ? -m : lo, b = diverging ? m : hi;
  svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11">{}</text>)"
                     "\n",
                     x, y + 11, xml_escape(title));
  const double step = width / kSteps;
  for (int i = 0; i < kSteps; ++i) {
    const float v = a + (b - a) * (static_cast<float>(i) + 0.5f) / kSteps;
    svg += fmt::format(R"(<rect x="{:.2f}" y="{:.1f}" width="{:.2f}" height="10" fill="{}"/>)"
                       "\n",
                       x + step * i, y + 16, step + 0.3, color(v, lo, hi));
  }
  svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="10" fill="none" stroke="#888"/>)"
                     "\n",
                     x, y + 16, width);
  for (int i = 0; i <= 4; ++i) {
    const float v = a + (b - a) * static_cast<float>(i) / 4;
    const double tx = x + width * i / 4;
    svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#555"/>)"
                       "\n"
                       R"(<text x="{0:.1f}" y="{3:.1f}" font-size="10" text-anchor="middle">{4}</text>)"
                       "\n",
                       tx, y + 26, y + 30, y + 40, fmt::format("{:.3g}", std::abs(v) < 1e-6f * m ? 0.0f : v));
  }
  if (masked)
    svg += fmt::format(
        R"svg(<rect x="{0:.1f}" y="{1:.1f}" width="20" height="10" fill="url(#{2})" stroke="#888"/>)svg"
        "\n"
        R"(<text x="{3:.1f}" y="{4:.1f}" font-size="11">masked</text>)"
        "\n",
        x + width + 24, y + 16, hatch, x + width + 48, y + 25);
  return 44;
}

namespace {

bool any_masked(const Panel& p) {
  for (int64_t t = 0; t < static_cast<int64_t>(p.rows->size()); ++t)
    for (int64_t s = 0; s < static_cast<int64_t>(p.cols->size()); ++s)
      if (p.is_masked(t, s)) return true;
  return false;
}

}  // namespace

std::string panel_svg(const Panel& p, double cell, const std::string& id) {
  double label_w = 0;
  for (const auto* v : {p.rows, p.cols})
    for (const auto& s : *v) label_w = std::max(label_w, label_width(s));
  label_w += 8;
  const double title_w = 7.5 * static_cast<double>(p.title.size());
  const bool masked = any_masked(p);
  const double grid_w = cell * static_cast<double>(p.cols->size());
  const double bar_w = std::clamp(grid_w, 120.0, 200.0);
  const double width = std::max({18 + label_w + grid_w, title_w, bar_w + (masked ? 100 : 0)}) + 8;
  const double grid_bottom =
      34 + label_w + std::max(cell * static_cast<double>(p.rows->size()), title_width(p.row_title));
  const double height = grid_bottom + 12 + (p.plain && !masked ? 0 : 44) + 4;
  const std::string hatch = id + "-masked";
  std::string svg = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" font-family="sans-serif">)"
      "\n",
      width, height);
  if (masked) svg += hatch_defs(hatch);
  draw_panel(svg, p, 2, 0, cell, label_w, hatch);
  if (p.plain) {  // no scale; only what the hatching means
    if (masked)
      svg += fmt::format(
          R"svg(<rect x="2" y="{0:.1f}" width="20" height="10" fill="url(#{1})" stroke="#888"/>)svg"
          "\n"
          R"(<text x="28" y="{2:.1f}" font-size="11">masked</text>)"
          "\n",
          grid_bottom + 16, hatch, grid_bottom + 25);
  } else {
    draw_colour_bar(svg, p.lo, p.hi, 2, grid_bottom + 12, bar_w, p.lo < 0 ? "value: blue < 0 < red" : "value",
                    masked, hatch);
  }
  return svg + "</svg>\n";
}

std::string page_svg(const std::vector<std::string>& header, const std::vector<std::vector<Panel>>& grid,
                     const std::string& scale_title) {
  double longest = 1, label_w = 0;
  size_t per_row = 1;
  bool masked = false;
  for (const auto& row : grid) {
    per_row = std::max(per_row, row.size());
    for (const Panel& p : row) {
      masked = masked || any_masked(p);
      for (const auto* labels : {p.rows, p.cols}) {
        longest = std::max(longest, static_cast<double>(labels->size()));
        for (const auto& s : *labels) label_w = std::max(label_w, label_width(s));
      }
    }
  }
  const double cell = std::clamp(std::floor(320.0 / longest), 8.0, 24.0);
  label_w += 8;
  // Every panel in the same box: the largest grid, title and row axis title of all.
  double panel_w = 18 + label_w + cell * longest, grid_h = cell * longest;
  for (const auto& row : grid)
    for (const Panel& p : row) {
      panel_w = std::max(panel_w, 7.5 * static_cast<double>(p.title.size()));
      grid_h = std::max(grid_h, title_width(p.row_title));
    }
  panel_w += 24;
  const double panel_h = 34 + label_w + grid_h + 24;
  const double bar_y = 10 + 20 * static_cast<double>(header.size()), top = bar_y + 44 + 16;
  double width = std::max(20 + panel_w * static_cast<double>(per_row), 10 + 240 + 110.0);
  for (const std::string& line : header) width = std::max(width, 20 + 7.6 * static_cast<double>(line.size()));
  const double height = top + 10 + panel_h * static_cast<double>(grid.size());

  std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" )"
                                R"(font-family="sans-serif">)"
                                "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
                                width, height);
  if (masked) svg += hatch_defs("masked");
  for (size_t i = 0; i < header.size(); ++i)
    svg += fmt::format(R"(<text x="10" y="{}" font-size="14">{}</text>)"
                       "\n",
                       20 * (i + 1), xml_escape(header[i]));
  const bool first_unit = !grid.empty() && !grid[0].empty() && grid[0][0].lo == 0.0f && grid[0][0].hi == 1.0f;
  draw_colour_bar(svg, first_unit ? 0.0f : grid[0][0].lo, first_unit ? 1.0f : grid[0][0].hi, 10, bar_y, 240,
                  scale_title, masked);
  for (size_t k = 0; k < grid.size(); ++k)
    for (size_t h = 0; h < grid[k].size(); ++h)
      draw_panel(svg, grid[k][h], 10 + panel_w * static_cast<double>(h),
                 top + panel_h * static_cast<double>(k), cell, label_w);
  return svg + "</svg>\n";
}

}  // namespace tg::heatmap
