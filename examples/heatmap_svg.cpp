#include "examples/heatmap_svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tg::svg {

namespace {

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

// Approximate rendered width of a label in pixels at font-size 11 (code points, not bytes).
double label_width(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return 6.5 * static_cast<double>(n);
}

// White (0) to dark blue (1), the usual sequential heatmap ramp.
std::string color(float w) {
  const float t = std::clamp(w, 0.0f, 1.0f);
  auto mix = [&](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * t)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(255, 8), mix(255, 48), mix(255, 107));
}

// One heatmap with row labels on the left and column labels on top (rotated), at (x, y).
void draw_panel(std::string& svg, const HeatmapPanel& p, double x, double y, double cell, double label_w) {
  const auto T = static_cast<int64_t>(p.rows->size()), S = static_cast<int64_t>(p.cols->size());
  svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="12" font-weight="bold">{}</text>)"
                     "\n",
                     x, y + 12, xml_escape(p.title));
  const double gx = x + label_w, gy = y + 20 + label_w;  // grid origin
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
      svg += fmt::format(
          R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"><title>{} -> {}: {:.3f}</title></rect>)"
          "\n",
          gx + static_cast<double>(s) * cell, gy + static_cast<double>(t) * cell, cell, cell, color(w),
          xml_escape((*p.rows)[static_cast<size_t>(t)]), xml_escape((*p.cols)[static_cast<size_t>(s)]), w);
    }
  }
  svg +=
      fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#888"/>)"
                  "\n",
                  gx, gy, cell * static_cast<double>(S), cell * static_cast<double>(T));
}

}  // namespace

std::string heatmap_page(const std::vector<std::string>& header,
                         const std::vector<std::vector<HeatmapPanel>>& grid) {
  double longest = 1, label_w = 0;
  size_t per_row = 1;
  for (const auto& row : grid) {
    per_row = std::max(per_row, row.size());
    for (const HeatmapPanel& p : row)
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

}  // namespace tg::svg
