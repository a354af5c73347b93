// Attention heatmaps as SVG, shared by `translate attention` and `lm attention`: panels of
// weights in [0, 1] (white to dark blue), labelled with the tokens of their rows (queries, on the
// left) and columns (keys, on top, rotated), a tooltip with the weight on every cell.
#pragma once

#include <string>
#include <vector>

namespace tg::svg {

struct HeatmapPanel {
  std::string title;
  const float* weights = nullptr;  // [rows, cols], row-major
  const std::vector<std::string>* rows = nullptr;
  const std::vector<std::string>* cols = nullptr;
};

// A page: `header` lines of text at the top, then one row of panels per entry of `grid`. Every
// panel gets the same cell size and label width, from the longest token list and label of all.
std::string heatmap_page(const std::vector<std::string>& header,
                         const std::vector<std::vector<HeatmapPanel>>& grid);

}  // namespace tg::svg
