// Heatmaps drawn as SVG text: one labelled grid of coloured cells per matrix, with the value of
// each cell in its tooltip. Shared by the programs that draw attention maps (translate attention).
#pragma once

#include <string>
#include <vector>

namespace tg::heatmap {

// s with &, <, > and " escaped for SVG/HTML text and attribute values.
std::string xml_escape(const std::string& s);

// Approximate rendered width of a label in pixels at font-size 11 (code points, not bytes).
double label_width(const std::string& s);

// White (0) to dark blue (1), the usual sequential heatmap ramp; w is clamped to [0, 1].
std::string color(float w);

struct Panel {
  std::string title;
  const float* weights;  // [rows, cols], row-major
  const std::vector<std::string>* rows;
  const std::vector<std::string>* cols;
};

// One heatmap with row labels on the left and column labels on top (rotated), appended to `svg`
// at (x, y): the title, then a grid of `cell`-pixel squares whose origin is label_w pixels right
// of x and 20 + label_w pixels below y.
void draw_panel(std::string& svg, const Panel& p, double x, double y, double cell, double label_w);

}  // namespace tg::heatmap
