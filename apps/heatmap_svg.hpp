// Heatmaps drawn as SVG text: one labelled grid of coloured cells per matrix, shared by the
// programs that draw attention maps (translate attention, lm attention, attention_walkthrough).
//
// What every heatmap shows: a title; axis titles (rows are queries, columns keys unless said
// otherwise); the row and column labels, thinned to every k-th one where cells are smaller than a
// label (label_stride), never overlapping; each cell's value in its tooltip, and printed in it
// where it fits; masked cells (a causal or padding mask, or a -inf score) hatched, never drawn as
// a value; a colour bar with its scale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tg::heatmap {

// s with &, <, > and " escaped for SVG/HTML text and attribute values; a control byte other than tab,
// newline and return, DEL, and a byte of invalid UTF-8 shown as the text \x1b (XML has no
// character for them).
std::string xml_escape(const std::string& s);

// Approximate rendered width of a label in pixels at font-size 11 (code points, not bytes).
double label_width(const std::string& s);

// Labels are drawn at font-size 11, at least 12 pixels apart: every label_stride(cell)-th one
// (the first included) when the cells are smaller than that.
int64_t label_stride(double cell);
// Values are printed in cells of at least this many pixels (two decimals at font-size 8).
inline constexpr double kValueCell = 22.0;

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
  // When set, one text per cell (row-major), printed in it instead of its value.
  const std::vector<std::string>* cell_text = nullptr;
  // A table of texts rather than a heatmap: white cells, no colour bar (cell_text says it all).
  bool plain = false;
  // What the rows and columns are.
  std::string row_title = "query", col_title = "key";
  // Masked cells: above the diagonal when causal, and those nonzero in `masked` (row-major), and
  // any non-finite weight.
  bool causal = false;
  const std::vector<uint8_t>* masked = nullptr;
  bool is_masked(int64_t r, int64_t c) const;
};

// The hatch pattern masked cells are filled with, as <defs> with the given id (unique within a
// document: an HTML page of several SVGs gives each its own).
std::string hatch_defs(const std::string& id);

// One heatmap appended to `svg` at (x, y): the title, the column axis title and labels (rotated)
// above the grid, the row axis title and labels on its left, then `cell`-pixel squares from
// (x + 18 + label_w, y + 34 + label_w). `hatch` names the pattern of hatch_defs. Returns the
// drawn size {width, height}.
struct Size {
  double width = 0, height = 0;
};
Size draw_panel(std::string& svg, const Panel& p, double x, double y, double cell, double label_w,
                const std::string& hatch = "masked");

// A horizontal colour bar `width` pixels wide for the scale [lo, hi] (see color) at (x, y): its
// title, the ramp, ticks with their values under it, and a hatched "masked" swatch when `masked`.
// Returns its height.
double draw_colour_bar(std::string& svg, float lo, float hi, double x, double y, double width,
                       const std::string& title, bool masked, const std::string& hatch = "masked");

// The panel alone as an <svg> element sized to fit it, with its colour bar under it; its label
// width taken from its labels. `id` makes the element's pattern id unique in a page of several.
std::string panel_svg(const Panel& p, double cell, const std::string& id = "tg");

// A page: `header` lines of text at the top, the colour bar of the panels' shared scale (titled
// `scale_title`), then one row of panels per entry of `grid`. Every panel gets the same cell size
// (8 to 24 pixels, ~320 pixels for the longest token list) and label width, from the longest token
// list and label of all; values are printed in the cells when they fit (kValueCell).
std::string page_svg(const std::vector<std::string>& header, const std::vector<std::vector<Panel>>& grid,
                     const std::string& scale_title = "attention weight (each row sums to 1)");

}  // namespace tg::heatmap
