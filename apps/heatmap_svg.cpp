#include "apps/heatmap_svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tg::heatmap {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
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
        out += c;
    }
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

void draw_panel(std::string& svg, const Panel& p, double x, double y, double cell, double label_w) {
  const auto T = static_cast<int64_t>(p.rows->size()), S = static_cast<int64_t>(p.cols->size());
  svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="12" font-weight="bold">{}</text>)"
                     "\n",
                     x, y + 12, xml_escape(p.title));
  const double gx = x + label_w, gy = y + 20 + label_w;  // grid origin
  const bool unit = p.lo == 0.0f && p.hi == 1.0f;
  for (int64_t s = 0; s < S; ++s)
    svg += fmt::format(
        R"svg(<text x="{0:.1f}" y="{1:.1f}" font-size="11" transform="rotate(-90 {0:.1f} {1:.1f})">{2}</text>)svg"
        "\n",
        gx + (static_cast<double>(s) + 0.7) * cell, gy - 4, xml_escape((*p.cols)[static_cast<size_t>(s)]));
  for (int64_t t = 0; t < T; ++t) {
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="end">{}</text>)"
                       "\n",
                       gx - 4, gy + (static_cast<double>(t) + 0.7) * cell,
                       xml_escape((*p.rows)[static_cast<size_t>(t)]));
    for (int64_t s = 0; s < S; ++s) {
      const float w = p.weights[t * S + s];
      const double cx = gx + static_cast<double>(s) * cell, cy = gy + static_cast<double>(t) * cell;
      const std::string value = unit ? fmt::format("{:.3f}", w) : fmt::format("{:.6g}", w);
      svg += fmt::format(
          R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"><title>{} -> {}: {}</title></rect>)"
          "\n",
          cx, cy, cell, cell, color(w, p.lo, p.hi), xml_escape((*p.rows)[static_cast<size_t>(t)]),
          xml_escape((*p.cols)[static_cast<size_t>(s)]), value);
      if (p.cell_text) {
        // Dark cells get white text. The text ignores the pointer, so the cell's tooltip still shows.
        const float m = std::max(std::abs(p.lo), std::abs(p.hi));
        const bool dark =
            std::isfinite(w) && m > 0 && (p.lo >= 0 ? (w - p.lo) / (p.hi - p.lo) : std::abs(w) / m) > 0.55f;
        svg += fmt::format(
            R"(<text x="{:.1f}" y="{:.1f}" font-size="9" text-anchor="middle" fill="{}" pointer-events="none">{}</text>)"
            "\n",
            cx + cell / 2, cy + cell / 2 + 3, dark ? "white" : "black",
            xml_escape((*p.cell_text)[static_cast<size_t>(t * S + s)]));
      }
    }
  }
  svg +=
      fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#888"/>)"
                  "\n",
                  gx, gy, cell * static_cast<double>(S), cell * static_cast<double>(T));
}

std::string panel_svg(const Panel& p, double cell) {
  double label_w = 0;
  for (const auto* v : {p.rows, p.cols})
    for (const auto& s : *v) label_w = std::max(label_w, label_width(s));
  label_w += 8;
  const double title_w = 7.5 * static_cast<double>(p.title.size());
  const double width = std::max(label_w + cell * static_cast<double>(p.cols->size()), title_w) + 8;
  const double height = 20 + label_w + cell * static_cast<double>(p.rows->size()) + 8;
  std::string svg = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" font-family="sans-serif">)"
      "\n",
      width, height);
  draw_panel(svg, p, 2, 0, cell, label_w);
  return svg + "</svg>\n";
}

std::string page_svg(const std::vector<std::string>& header, const std::vector<std::vector<Panel>>& grid) {
  double longest = 1, label_w = 0;
  size_t per_row = 1;
  for (const auto& row : grid) {
    per_row = std::max(per_row, row.size());
    for (const Panel& p : row)
      for (const auto* labels : {p.rows, p.cols}) {
        longest = std::max(longest, static_cast<double>(labels->size()));
        for (const auto& s : *labels) label_w = std::max(label_w, label_width(s));
      }
  }
  const double cell = std::clamp(std::floor(320.0 / longest), 8.0, 24.0);
  label_w += 8;
  const double panel_w = label_w + cell * longest + 24, panel_h = 20 + label_w + cell * longest + 24;
  const double top = 10 + 20 * static_cast<double>(header.size());
  const double width = 20 + panel_w * static_cast<double>(per_row),
               height = top + 10 + panel_h * static_cast<double>(grid.size());

  std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" )"
                                R"(font-family="sans-serif">)"
                                "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
                                width, height);
  for (size_t i = 0; i < header.size(); ++i)
    svg += fmt::format(R"(<text x="10" y="{}" font-size="14">{}</text>)"
                       "\n",
                       20 * (i + 1), xml_escape(header[i]));
  for (size_t k = 0; k < grid.size(); ++k)
    for (size_t h = 0; h < grid[k].size(); ++h)
      draw_panel(svg, grid[k][h], 10 + panel_w * static_cast<double>(h),
                 top + panel_h * static_cast<double>(k), cell, label_w);
  return svg + "</svg>\n";
}

}  // namespace tg::heatmap
