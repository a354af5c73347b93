// The heatmaps' legibility rules (apps/heatmap_svg.*) on the drawing code itself: labels that
// never overlap at any block size, masked cells hatched, values in the cells where they fit,
// axis titles and a colour bar; and the walkthrough page's padded batch and tape drawing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <regex>
#include <string>
#include <vector>

#include "apps/heatmap_svg.hpp"
#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::testing::cli;

namespace {

struct Label {
  double x, y;
  bool rotated;
};

// The label texts of a panel (font-size 11, not the titles): where each is drawn. The expression is
// matched against each <text ...> tag found by string search, not searched for through the page:
// that way a panel of 65,536 tokens (32,768 labels) took std::regex 13.5 s under ASan; now both
// heatmap cases take 2.5 s.
std::vector<Label> labels_of(const std::string& svg) {
  std::vector<Label> v;
  const std::regex text(
      R"re(<text x="([-0-9.]+)" y="([-0-9.]+)" font-size="11"( text-anchor="end"| transform="rotate\(-90)[^>]*>)re");
  std::smatch m;
  for (std::size_t at = svg.find("<text "); at != std::string::npos; at = svg.find("<text ", at + 1)) {
    const std::size_t end = svg.find('>', at);
    if (end == std::string::npos) break;
    const auto first = svg.begin() + static_cast<std::ptrdiff_t>(at);
    if (std::regex_match(first, svg.begin() + static_cast<std::ptrdiff_t>(end + 1), m, text))
      v.push_back({std::stod(m[1]), std::stod(m[2]), m[3].str().starts_with(" transform")});
  }
  return v;
}

// The smallest distance between neighbouring row labels (along y) and column labels (along x).
double closest(const std::vector<Label>& v, bool rotated) {
  std::vector<double> at;
  for (const Label& l : v)
    if (l.rotated == rotated) at.push_back(rotated ? l.x : l.y);
  std::sort(at.begin(), at.end());
  double d = 1e9;
  for (size_t i = 1; i < at.size(); ++i) d = std::min(d, at[i] - at[i - 1]);
  return d;
}

std::vector<std::string> tokens(int64_t n) {
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back("t" + std::to_string(i));
  return v;
}

}  // namespace

TEST_CASE("ux.heatmap.labels_never_overlap_at_any_block_size") {
  // lm's default block size (128), larger ones, and the largest --block-size (65536): one row and
  // one column of the page's cell size for that many tokens (the cells in between change nothing
  // of the labels), drawn by draw_panel.
  for (const int64_t n : {4, 24, 128, 1024, 65536}) {
    const double cell = std::clamp(std::floor(320.0 / static_cast<double>(n)), 8.0, 24.0);
    const std::vector<std::string> many = tokens(n), one = {"q"};
    const std::vector<float> w(static_cast<size_t>(n), 0.5f);
    INFO("n = ", n, ", cell ", cell);
    std::string wide, tall;
    heatmap::draw_panel(wide, {"wide", w.data(), &one, &many}, 0, 0, cell, 40);
    heatmap::draw_panel(tall, {"tall", w.data(), &many, &one}, 0, 0, cell, 40);
    const auto cols = labels_of(wide), rows = labels_of(tall);
    CHECK(closest(cols, true) >= 12);  // font-size 11
    CHECK(closest(rows, false) >= 12);
    const int64_t stride = heatmap::label_stride(cell);
    CHECK(std::count_if(cols.begin(), cols.end(), [](const Label& l) { return l.rotated; }) ==
          (n + stride - 1) / stride);
    if (n <= 24) CHECK(stride == 1);  // every label while they fit
  }
  for (double cell = 0.5; cell <= 30; cell += 0.5)
    CHECK(static_cast<double>(heatmap::label_stride(cell)) * cell >= 12);
  // A whole page at the default block size.
  const int64_t n = 128;
  const std::vector<std::string> t = tokens(n);
  const std::vector<float> w(static_cast<size_t>(n * n), 0.01f);
  heatmap::Panel p{"head 0", w.data(), &t, &t};
  p.causal = true;
  // Two panels side by side: their row labels are at the same heights; look at the first one's.
  const std::string page = heatmap::page_svg({"text"}, {{p, p}});
  std::vector<Label> first_panel;
  for (const Label& l : labels_of(page))
    if (l.x < 10 + 18 + 40 + 8.0 * n) first_panel.push_back(l);
  CHECK(closest(first_panel, false) >= 12);
  CHECK(closest(first_panel, true) >= 12);
  CHECK(std::count_if(first_panel.begin(), first_panel.end(), [](const Label& l) { return !l.rotated; }) ==
        n / 2);
}

TEST_CASE("ux.heatmap.masked_cells_are_hatched_values_fit_titles_and_a_colour_bar") {
  const std::vector<std::string> t = {"the", "dog", "<eos>"};
  const std::vector<float> w = {1, 0, 0, 0.4f, 0.6f, 0, 0.2f, 0.3f, 0.5f};
  heatmap::Panel p{"decoder head 0", w.data(), &t, &t};
  p.causal = true;
  p.row_title = "query (decoder input)";
  const std::string page = heatmap::page_svg({"a note"}, {{p}});
  // Three masked cells above the diagonal, in runs: "the -> dog .. <eos>" and "dog -> <eos>".
  CHECK(page.find(R"re(fill="url(#masked)"><title>the -> dog .. &lt;eos&gt;: masked</title>)re") !=
        std::string::npos);
  CHECK(page.find(R"re(fill="url(#masked)"><title>dog -> &lt;eos&gt;: masked</title>)re") !=
        std::string::npos);
  CHECK(page.find("the -> dog: 0.000") == std::string::npos);  // never drawn as a 0
  CHECK(page.find("<pattern id=\"masked\"") != std::string::npos);
  // 24-pixel cells: the values printed in them, and in the tooltips.
  CHECK(page.find(">0.60</text>") != std::string::npos);
  CHECK(page.find("<title>dog -> dog: 0.600</title>") != std::string::npos);
  CHECK(page.find(">query (decoder input)</text>") != std::string::npos);
  CHECK(page.find(">key</text>") != std::string::npos);
  CHECK(page.find(">attention weight (each row sums to 1)</text>") != std::string::npos);
  for (const char* tick : {">0</text>", ">0.25</text>", ">0.5</text>", ">0.75</text>", ">1</text>"})
    CHECK(page.find(tick) != std::string::npos);
  CHECK(page.find(">masked</text>") != std::string::npos);
  // A -inf score is masked too; a diverging scale's bar runs from -m to m.
  const std::vector<float> s = {1.5f, -INFINITY, -0.5f, 2.0f};
  const std::vector<std::string> two = {"a", "b"};
  const std::string scores = heatmap::panel_svg({"S + M", s.data(), &two, &two, -2.0f, 2.0f}, 38, "x");
  CHECK(scores.find(R"re(fill="url(#x-masked)")re") != std::string::npos);
  CHECK(scores.find(">-2</text>") != std::string::npos);
  CHECK(scores.find(">value: blue &lt; 0 &lt; red</text>") != std::string::npos);
  // Small cells: no values in them, only in the tooltips.
  const std::vector<std::string> many(40, "w");
  const std::vector<float> flat(1600, 0.37f);
  const std::string small = heatmap::page_svg({}, {{heatmap::Panel{"h", flat.data(), &many, &many}}});
  CHECK(small.find(">0.37</text>") == std::string::npos);
  CHECK(small.find("<title>w -> w: 0.370</title>") != std::string::npos);
}

TEST_CASE("ux.walkthrough.padded_batch_hatched_and_the_tape_at_its_own_size") {
  if (!have_cli()) return;
  const std::string page = testing::scratch("walk_pad.html");
  const Run r = run_program(kWalkthrough, "--json --html " + page, "", "");
  REQUIRE(r.status == 0);
  const std::string html = testing::read_bytes(page);
  // The padded batch of two sentences: the short one's <pad> keys hatched in its weights, and the
  // checks that padding changes nothing.
  CHECK(html.find("Padding: two sentences in one batch") != std::string::npos);
  const size_t at = html.find("P (sentence 2) head 0 [5 x 5]");
  REQUIRE(at != std::string::npos);
  const std::string svg =
      html.substr(html.rfind("<svg", at), html.find("</svg>", at) - html.rfind("<svg", at));
  CHECK(svg.find("<title>the -> ball .. &lt;pad&gt;: masked</title>") != std::string::npos);
  CHECK(svg.find("<title>&lt;eos&gt; -> &lt;pad&gt; .. &lt;pad&gt;: masked</title>") != std::string::npos);
  for (const char* what : {"padding changes nothing: P of the short sentence", "padding changes nothing: Z",
                           "P of the padded batch = attention_probs with nn::padding_mask"}) {
    INFO(what);
    CHECK(r.out.find(what) != std::string::npos);
  }
  CHECK(r.out.find("\"failed\":[]") != std::string::npos);
  // The tape, drawn top to bottom, fits the page's 1200-pixel column at its own size (the page no
  // longer shrinks it: 14-point labels stay 14-point).
  if (!have_program("dot")) {
    MESSAGE("Graphviz's dot is not installed: the tape's size is not checked");
    return;
  }
  CHECK(html.find("max-width: 100%; height: auto") == std::string::npos);
  const std::regex tape(R"re(<div class="tape"><svg width="([0-9.]+)pt")re");
  int tapes = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), tape); it != std::sregex_iterator();
       ++it, ++tapes)
    CHECK(std::stod((*it)[1]) * 4 / 3 <= 1200 - 32);
  CHECK(tapes == 2);
}

TEST_CASE("ux.heatmap.text_is_always_valid_xml") {
  // A title holding the user's text (lm attention --prompt, translate attention --src): control
  // bytes and invalid UTF-8 are shown, not written raw (an ESC had made the SVG unreadable); UTF-8,
  // tabs and newlines pass, markup is escaped.
  CHECK(heatmap::xml_escape("a\x1b[31mb\x01 \x7f") == "a\\x1b[31mb\\x01 \\x7f");
  CHECK(heatmap::xml_escape("caf\xc3\xa9 \xf0\x9f\x98\x80\tx\ny") == "caf\xc3\xa9 \xf0\x9f\x98\x80\tx\ny");
  CHECK(heatmap::xml_escape("\xff<\xc3>\xe2\x82") == "\\xff&lt;\\xc3&gt;\\xe2\\x82");
  CHECK(heatmap::xml_escape("\"&\"") == "&quot;&amp;&quot;");
  const std::vector<std::string> t = {"a", "b"};
  const std::vector<float> w = {1, 0, 0.5f, 0.5f};
  const std::string page = heatmap::page_svg({"text: a\x1b[31mb"}, {{heatmap::Panel{"h", w.data(), &t, &t}}});
  CHECK(page.find('\x1b') == std::string::npos);
  CHECK(page.find("a\\x1b[31mb") != std::string::npos);
}
