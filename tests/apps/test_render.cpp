// Every kind of picture the programs draw, looked at by a real renderer, not only parsed: the loss
// curves, translate attention, lm attention and the walkthrough's heatmaps through rsvg-convert
// (Debian's librsvg2-bin), the walkthrough page through headless Chromium. Each must give a PNG of
// the size the picture declares (the window's, for the page) that is not blank: ink on at least a
// few percent of its top 400 rows, in more than a handful of colours (tests/apps/png_stats.py reads
// the PNG).
// A case whose renderer is not installed is SKIPPED, naming the package (tools/install_deps.sh
// --ci installs both).
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::testing::cli;

namespace {

struct Png {
  int width = 0, height = 0, colours = 0;
  double ink = 0;  // fraction of pixels that are not white
};

Png stats(const std::string& png) {
  const Run r = run_program("python3", std::string(TG_PNG_STATS) + " " + png, "", "");
  INFO("png_stats: ", r.err);
  REQUIRE(r.status == 0);
  Png p;
  std::istringstream(r.out) >> p.width >> p.height >> p.colours >> p.ink;
  return p;
}

// The width and height an SVG declares (its first <svg element).
std::pair<int, int> declared_size(const std::string& svg) {
  std::smatch m;
  const std::regex size(R"re(<svg[^>]* width="([0-9.]+)" height="([0-9.]+)")re");
  REQUIRE(std::regex_search(svg, m, size));
  return {static_cast<int>(std::lround(std::stod(m[1]))), static_cast<int>(std::lround(std::stod(m[2])))};
}

// rsvg-convert's PNG of `svg_path`: the declared size, and not blank.
void check_rendered(const std::string& svg_path, double min_ink = 0.01) {
  INFO("picture: ", svg_path);
  const std::string png = svg_path + ".png";
  const Run r = run_program("rsvg-convert", svg_path + " -o " + png, "", "");
  INFO("rsvg-convert: ", r.err);
  REQUIRE(r.status == 0);
  const auto [w, h] = declared_size(testing::read_bytes(svg_path));
  const Png p = stats(png);
  CHECK(p.width == w);
  CHECK(p.height == h);
  CHECK(p.colours >= 16);  // text, lines, the colour ramp
  CHECK(p.ink >= min_ink);
  MESSAGE(svg_path, ": ", p.width, " x ", p.height, ", ", p.colours, " colours, ink ", p.ink);
}

#define REQUIRE_RSVG()                                              \
  if (!have_program("rsvg-convert"))                                \
  TG_SKIP(                                                          \
      "rsvg-convert is not installed (Debian: librsvg2-bin; tools/" \
      "install_deps.sh installs it)")

// A tiny translate model trained with validation (its log and curves beside it).
std::string translate_model() {
  static const std::string path = [] {
    const std::string out = testing::scratch("render.safetensors");
    const Run r = translate("train --data " + tiny_data() + " --valid " + tiny_data() + " --out " + out +
                            " --steps 40 --eval-every 10 --log-every 5 " + kTinyModel);
    REQUIRE(r.status == 0);
    return out;
  }();
  return path;
}

}  // namespace

TEST_CASE("ux.render.loss_curves") {
  if (!have_cli()) return;
  REQUIRE_RSVG();
  translate_model();
  check_rendered(testing::scratch("render.loss.svg"), 0.02);
}

TEST_CASE("ux.render.translate_attention") {
  if (!have_cli()) return;
  REQUIRE_RSVG();
  const std::string svg = testing::scratch("render_attn.svg");
  const Run r = translate("attention --model " + translate_model() + " --src \"a b c\" --out " + svg);
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  check_rendered(svg);
}

TEST_CASE("ux.render.lm_attention_at_the_default_block_size") {
  if (!have_cli()) return;
  REQUIRE_RSVG();
  // A model of lm's default block size (128) and a prompt that fills it: 128 x 128 cells per head.
  std::string text;
  for (int i = 0; text.size() < 4000; ++i) text += i % 2 ? "the cat sees the ball. " : "a dog likes bread. ";
  const std::string data = testing::write_bytes("render_lm.txt", text),
                    model = testing::scratch("render_lm.safetensors");
  const Run t = run_program(kLm,
                            "train --data " + data + " --out " + model +
                                " --n-layer 1 --n-head 1 --n-embd 16 --batch-size 2 --steps 1 --eval-every 1",
                            "", "");
  INFO("lm train: ", t.err);
  REQUIRE(t.status == 0);
  const std::string svg = testing::scratch("render_lm_attn.svg");
  const Run r = run_program(
      kLm, "attention --model " + model + " --prompt \"" + text.substr(0, 128) + "\" --out " + svg, "", "");
  INFO("lm attention: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("128 tokens") != std::string::npos);
  check_rendered(svg);
}

TEST_CASE("ux.render.walkthrough_heatmaps") {
  if (!have_cli()) return;
  REQUIRE_RSVG();
  const std::string page = testing::scratch("render_walk.html");
  REQUIRE(run_program(kWalkthrough, "--html " + page, "", "").status == 0);
  const std::string html = testing::read_bytes(page);
  // The attention weights (a causal mask), the padded batch (a table of tokens), the queries (a
  // signed scale) and a larger matrix (the positions of all five tokens over d_model).
  int drawn = 0;
  for (const char* title : {"P head 0 [", "ids [2 x", "Q [5 x 8]", "W_q [8 x 8]"}) {
    const size_t at = html.find(title);
    REQUIRE_MESSAGE(at != std::string::npos, title);
    const size_t begin = html.rfind("<svg", at), end = html.find("</svg>", at) + 6;
    const std::string svg = testing::write_bytes("render_panel" + std::to_string(++drawn) + ".svg",
                                                 html.substr(begin, end - begin));
    check_rendered(svg);
  }
}

TEST_CASE("ux.render.walkthrough_page_in_chromium") {
  if (!have_cli()) return;
  if (!have_program("chromium"))
    TG_SKIP("chromium is not installed (Debian: chromium; tools/install_deps.sh --ci installs it)");
  const std::string page = testing::scratch("render_page.html"), png = testing::scratch("render_page.png");
  REQUIRE(run_program(kWalkthrough, "--html " + page, "", "").status == 0);
  // As root Chromium needs --no-sandbox; its profile goes to the scratch directory.
  const auto t0 = std::chrono::steady_clock::now();
  const Run r = run_program("timeout 180 chromium",
                            "--headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1600 "
                            "--user-data-dir=" +
                                testing::scratch("chromium") + " --screenshot=" + png + " file://" + page,
                            "", "");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_MESSAGE(std::filesystem::exists(png), "chromium wrote no screenshot: ", r.err);
  const Png p = stats(png);
  MESSAGE("chromium: ", p.width, " x ", p.height, ", ", p.colours, " colours, ink ", p.ink, ", ", seconds,
          " s");
  CHECK(p.width == 1280);
  CHECK(p.height == 1600);
  CHECK(p.colours >= 16);
  CHECK(p.ink >= 0.02);
}
