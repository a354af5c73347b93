// The walkthrough as JSON (every number) and as an HTML page of labelled heatmaps, with the tape
// drawn by Graphviz when it is installed.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "apps/attention_walkthrough.hpp"
#include "apps/heatmap_svg.hpp"
#include "io/file.hpp"

extern char** environ;

namespace tg::walkthrough {

namespace {

using heatmap::xml_escape;
using nlohmann::ordered_json;

ordered_json matrix_json(const Matrix& m) {
  const int64_t R = m.value.size(0), C = m.value.size(1);
  ordered_json values = ordered_json::array();
  for (int64_t r = 0; r < R; ++r) {
    ordered_json row = ordered_json::array();
    for (int64_t c = 0; c < C; ++c) {
      const float v = m.value.data()[r * C + c];
      row.push_back(std::isfinite(v) ? ordered_json(v) : ordered_json(nullptr));
    }
    values.push_back(std::move(row));
  }
  return {{"label", m.label},
          {"shape", {R, C}},
          {"rows", m.rows},
          {"cols", m.cols},
          {"values", std::move(values)}};
}

ordered_json check_json(const GradCheck& c) {
  return {{"ok", c.ok()},         {"tape_max_diff", c.tape_diff},
          {"tape_ok", c.tape_ok}, {"fd_max_error", c.fd_error},
          {"fd_ok", c.fd_ok},     {"fd_worst_ratio", c.worst_ratio},
          {"fd_step", c.eps},     {"checked", c.checked},
          {"elements", c.total}};
}

// ---- the page

// The colour scale of a matrix: white to blue over [0, 1] when every value lies there (weights,
// probabilities), else blue (negative) to white (0) to red (positive), symmetric about 0.
std::pair<float, float> value_range(const Tensor& t) {
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isfinite(t.data()[i])) lo = std::min(lo, t.data()[i]), hi = std::max(hi, t.data()[i]);
  if (lo >= 0.0f && hi <= 1.0f) return {0.0f, 1.0f};
  const float m = std::max(-lo, hi);
  return {-m, m};
}

// What a matrix's rows or columns are, when the step did not say: tokens, or the d_model (or
// per-head) dimensions.
std::string axis_title(const std::vector<std::string>& labels) {
  if (labels.empty()) return "";
  const std::string& l = labels.front();
  if (l.starts_with("h") && l.find('.') != std::string::npos) return "dimension (head.index)";
  if (l == "0") return "dimension";
  return labels.size() == 1 ? "" : "token";
}

// A matrix as a heatmap; small ones carry their values in the cells (two decimals, after a common
// power of ten when the values are all tiny or huge, as the text prints them). `id` is unique on
// the page (the SVGs share the page's ids).
std::string heatmap_svg(const Matrix& m, const std::string& id) {
  const int64_t R = m.value.size(0), C = m.value.size(1);
  const bool small = R <= 16 && C <= 16;
  const auto [lo, hi] = value_range(m.value);
  double largest = std::max(std::abs(lo), std::abs(hi));
  if (lo == 0.0f && hi == 1.0f) largest = 1.0;
  std::string title = fmt::format("{} [{} x {}]", m.label, R, C);
  double factor = 1.0;
  int decimals = 2;
  if (largest > 0 && (largest < 1e-2 || largest >= 1e3)) {
    const int e = static_cast<int>(std::floor(std::log10(largest)));
    factor = std::pow(10.0, e);
    title += fmt::format(" (x 1e{:+03d})", e);
  } else if (largest >= 10) {
    decimals = largest >= 100 ? 0 : 1;
  }
  std::vector<std::string> texts = m.cells;
  if (small && texts.empty())
    for (int64_t i = 0; i < m.value.numel(); ++i) {
      const float v = m.value.data()[i];
      texts.push_back(std::isfinite(v) ? fmt::format("{:.{}f}", v / factor, decimals) : fmt::format("{}", v));
    }
  heatmap::Panel p{title, m.value.data(), &m.rows, &m.cols, lo, hi, texts.empty() ? nullptr : &texts};
  p.row_title = m.row_title.empty() ? axis_title(m.rows) : m.row_title;
  p.col_title = m.col_title.empty() ? axis_title(m.cols) : m.col_title;
  if (!m.masked.empty()) p.masked = &m.masked;
  p.plain = !m.cells.empty();  // a table of tokens, say
  const double cell =
      small ? 38.0 : std::clamp(std::floor(480.0 / static_cast<double>(std::max(R, C))), 3.0, 24.0);
  return heatmap::panel_svg(p, cell, id);
}

std::string check_html(const GradCheck& c) {
  return fmt::format(
      "<p class=\"{}\">formula vs the tape's gradient: max |diff| {:.1e} ({}); vs central differences: max "
      "|err| "
      "{:.1e} over {}{} elements, worst {:.2f} of its tolerance ({})</p>\n",
      c.ok() ? "ok" : "fail", c.tape_diff, c.tape_ok ? "ok" : "DIFFERS", c.fd_error, c.checked,
      c.checked < c.total ? fmt::format(" sampled of {}", c.total) : "", c.worst_ratio,
      c.fd_ok ? "ok" : "FAILED");
}

std::string decoding_html(const Result& r) {
  std::string h =
      "<section id=\"greedy\"><h2>Greedy decoding, step by step</h2>\n<p>Each step runs the decoder "
      "on the newest token only (cached keys and values), takes the most likely next token and stops "
      "at &lt;eos&gt;: nn::greedy_decode, one step at a time.</p>\n<table><tr><th>step</th><th>prefix</th>"
      "<th>most likely next tokens</th><th>chosen</th></tr>\n";
  for (size_t i = 0; i < r.decoding.size(); ++i) {
    const DecodeStep& s = r.decoding[i];
    std::string top, prefix;
    for (const auto& [token, p] : s.top) top += fmt::format("{} {:.3f} &nbsp; ", xml_escape(token), p);
    for (const auto& t : s.prefix) prefix += xml_escape(t) + " ";
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td><b>{}</b></td></tr>\n", i + 1, prefix, top,
                     xml_escape(s.chosen));
  }
  return h + fmt::format("</table>\n<p>translation: <b>{}</b></p></section>\n", xml_escape(r.translation));
}

std::string tape_html(const std::string& title, const std::string& intro, const std::string& dot) {
  std::string h = fmt::format("<h3>{}</h3>\n<p>{}</p>\n", title, intro);
  std::string why;
  if (const auto svg = render_dot(dot, why)) return h + "<div class=\"tape\">" + *svg + "</div>\n";
  return h + fmt::format(
                 "<p class=\"note\">The graph is not drawn: {}. Install Graphviz (Debian: apt-get install "
                 "graphviz) to see it here, or render the DOT source below with any Graphviz viewer.</p>\n"
                 "<pre>{}</pre>\n",
                 xml_escape(why), xml_escape(dot));
}

}  // namespace

std::string json_report(const Result& r) {
  ordered_json j = {{"sentence", r.sentence},
                    {"model",
                     {{"source", r.model},
                      {"trained", r.trained},
                      {"d_model", r.d_model},
                      {"heads", r.heads},
                      {"d_k", r.d_k},
                      {"norm_first", r.norm_first}}},
                    {"mask", r.mask},
                    {"tokens", r.tokens},
                    {"decoder_prefix", r.prefix}};
  ordered_json sections = ordered_json::array();
  for (const Section& s : r.sections) {
    ordered_json steps = ordered_json::array();
    for (const Step& st : s.steps) {
      ordered_json o = {{"id", st.id}, {"title", st.title}, {"formula", st.formula}, {"notes", st.notes}};
      ordered_json ms = ordered_json::array();
      for (const Matrix& m : st.matrices) ms.push_back(matrix_json(m));
      o["matrices"] = std::move(ms);
      if (st.check) o["check"] = check_json(*st.check);
      steps.push_back(std::move(o));
    }
    sections.push_back({{"id", s.id}, {"title", s.title}, {"intro", s.intro}, {"steps", std::move(steps)}});
  }
  j["sections"] = std::move(sections);
  ordered_json agreements = ordered_json::array();
  for (const Agreement& a : r.agreements)
    agreements.push_back(
        {{"what", a.what}, {"max_diff", a.max_diff}, {"tolerance", a.tolerance}, {"ok", a.ok}});
  j["agreements"] = std::move(agreements);
  ordered_json decoding = ordered_json::array();
  for (const DecodeStep& s : r.decoding) {
    ordered_json top = ordered_json::array();
    for (const auto& [token, p] : s.top) top.push_back({{"token", token}, {"p", p}});
    decoding.push_back({{"prefix", s.prefix}, {"top", std::move(top)}, {"chosen", s.chosen}});
  }
  j["greedy"] = {{"steps", std::move(decoding)}, {"translation", r.translation}};
  j["tape_dot"] = r.tape_dot;
  j["failed"] = r.failures();
  j["checks"] = r.num_checks();
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

std::string html_report(const Result& r) {
  const auto failed = r.failures();
  std::string h = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>Attention, number by "
      "number: {0}"
      "</title>\n<style>\nbody {{ font-family: sans-serif; max-width: 1200px; margin: auto; padding: 1em; "
      "}}\n"
      ".formula {{ font-family: monospace; background: #f3f3f3; padding: 0.3em 0.6em; }}\n"
      ".panels {{ display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }}\n"
      ".ok {{ color: #060; }} .fail {{ color: #b00; font-weight: bold; }} .note {{ color: #555; }}\n"
      "table {{ border-collapse: collapse; }} td, th {{ padding: 2px 10px; border-bottom: 1px solid #ddd; "
      "text-align: left; }}\n.tape {{ overflow-x: auto; }}\n</style></head><body>\n"
      "<h1>Attention, number by number: &ldquo;{0}&rdquo;</h1>\n<p>model: {1}; d_model {2}, {3} heads of d_k "
      "{4}, "
      "{5}; self-attention mask: {6}. Hover over a cell for its exact value; colours: white to blue for "
      "weights in "
      "[0, 1], blue (negative) to red (positive) otherwise (each map's colour bar gives its scale); "
      "hatched cells are masked (a weight of exactly 0, a score of -inf).</p>\n<p class=\"{7}\">{8}</p>\n",
      xml_escape(r.sentence), xml_escape(r.model), r.d_model, r.heads, r.d_k,
      r.norm_first ? "pre-norm" : "post-norm", r.mask, failed.empty() ? "ok" : "fail",
      failed.empty() ? fmt::format("all {} checks passed", r.num_checks())
                     : xml_escape(fmt::format("{} of {} checks FAILED: {}", failed.size(), r.num_checks(),
                                              fmt::join(failed, "; "))));
  int number = 0, panels = 0;
  for (const Section& sec : r.sections) {
    if (sec.id == "backward" && !r.decoding.empty()) h += decoding_html(r);
    h += fmt::format("<section id=\"{}\"><h2>{}. {}</h2>\n<p>{}</p>\n", sec.id, ++number,
                     xml_escape(sec.title), xml_escape(sec.intro));
    int sub = 0;
    for (const Step& st : sec.steps) {
      h += fmt::format("<section id=\"step-{}\"><h3>{}.{} {}</h3>\n<p class=\"formula\">{}</p>\n",
                       xml_escape(st.id), number, ++sub, xml_escape(st.title), xml_escape(st.formula));
      for (const std::string& n : st.notes) h += "<p>" + xml_escape(n) + "</p>\n";
      if (!st.matrices.empty()) {
        h += "<div class=\"panels\">\n";
        for (const Matrix& m : st.matrices) h += heatmap_svg(m, fmt::format("m{}", ++panels));
        h += "</div>\n";
      }
      if (st.check) h += check_html(*st.check);
      h += "</section>\n";
    }
    h += "</section>\n";
  }
  h += "<section id=\"tape\"><h2>The tape</h2>\n";
  h += tape_html(
      "The step-by-step forward pass",
      "What the tape recorded for the self-attention steps above and the loss (to_dot(), also written by "
      "--dot FILE): one node per op with its output's shape; boxes are leaves, dashed when they need no "
      "gradient. backward() runs these nodes in reverse.",
      r.tape_dot);
  h += tape_html(
      "The same block through the engine's fused path",
      "nn::MultiHeadAttention::self_attention records one linear for Q, K and V together, one attention "
      "op (the heads read in place as column blocks; P exists per batch row only and backward "
      "recomputes it) and the output projection.",
      r.fused_dot);
  h += "</section>\n<section id=\"checks\"><h2>Checks</h2>\n<table><tr><th></th><th>the step-by-step numbers "
       "against the engine's own path</th><th>max |diff|</th></tr>\n";
  for (const Agreement& a : r.agreements)
    h += fmt::format("<tr><td class=\"{}\">{}</td><td>{}</td><td>{}</td></tr>\n", a.ok ? "ok" : "fail",
                     a.ok ? "ok" : "FAIL", xml_escape(a.what),
                     a.tolerance > 0 ? fmt::format("{:.1e}", a.max_diff)
                     : a.ok          ? "identical"
                                     : "different");
  return h + "</table></section>\n</body></html>\n";
}

std::optional<std::string> render_dot(const std::string& dot, std::string& why) {
  std::string program;
  const char* path = std::getenv("PATH");
  for (std::string_view rest = path ? path : ""; program.empty();) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/dot";
    if (::access(candidate.c_str(), X_OK) == 0) program = candidate;
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  if (program.empty()) {
    why = "Graphviz's dot is not on the PATH";
    return std::nullopt;
  }
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path();
  const std::string stem = (dir / fmt::format("attention_walkthrough.{}", ::getpid())).string();
  const std::string in = stem + ".dot", out = stem + ".svg", err = stem + ".err";
  io::write_file_atomic(in, dot);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  // Top to bottom (the DOT says left to right): the tape's long chain of ops then fits the page's
  // width at its own size instead of being shrunk to ~6 px labels.
  std::string a0 = "dot", a1 = "-Tsvg", a2 = "-Grankdir=TB", a3 = "-o", a4 = out, a5 = in;
  std::vector<char*> argv = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), a5.data(), nullptr};
  pid_t pid = 0;
  int status = 0;
  const int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc == 0) ::waitpid(pid, &status, 0);
  std::optional<std::string> svg;
  std::error_code ec;
  if (rc != 0) {
    why = fmt::format("{} could not be started", program);
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string msg = fs::exists(err, ec) ? io::read_file(err) : "";
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    why = fmt::format("{} failed (status {}){}", program, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                      msg.empty() ? "" : ": " + msg);
  } else {
    const std::string text = io::read_file(out);
    const size_t at = text.find("<svg");  // drop the XML prolog and doctype: the SVG goes inline
    if (at == std::string::npos)
      why = fmt::format("{} wrote no SVG", program);
    else
      svg = text.substr(at);
  }
  for (const std::string& f : {in, out, err}) fs::remove(f, ec);
  return svg;
}

}  // namespace tg::walkthrough
