// Heatmaps drawn as SVG text: one labelled grid of coloured cells per matrix, with the value of
// each cell in its tooltip. Shared by the programs that draw attention maps (translate attention,
// lm attention, attention_walkthrough).
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
// v on the scale [lo, hi]: lo >= 0 is the sequential ramp from white (lo) to dark blue (hi);
// lo < 0 a diverging one, dark blue at -m, white at 0, dark red at +m, m = max(-lo, hi) (signed
// values: scores, gradients). A non-finite v (a masked score, -inf) is grey.
std::string color(float v, float lo, float hi);

struct Panel {
  std::string title;
  const float* weights;  // [rows, cols], row-major
  const std::vector<std::string>* rows;
  const std::vector<std::string>* cols;
  float lo = 0.0f, hi = 1.0f;  // the colour scale (see color); the tooltips show 3 decimals on [0, 1]
  // When set, one text per cell (row-major), printed in it (its value, say): for cells of ~36 pixels.
  const std::vector<std::string>* cell_text = nullptr;
};

// One heatmap with row labels on the left and column labels on top (rotated), appended to `svg`
// at (x, y): the title, then a grid of `cell`-pixel squares whose origin is label_w pixels right
// of x and 20 + label_w pixels below y.
void draw_panel(std::string& svg, const Panel& p, double x, double y, double cell, double label_w);

// The panel alone as an <svg> element sized to fit it, its label width taken from its labels.
std::string panel_svg(const Panel& p, double cell);

// A page: `header` lines of text at the top, then one row of panels per entry of `grid`. Every
// panel gets the same cell size (8 to 24 pixels, ~320 pixels for the longest token list) and label
// width, from the longest token list and label of all.
std::string page_svg(const std::vector<std::string>& header, const std::vector<std::vector<Panel>>& grid);

}  // namespace tg::heatmap
