// The walkthrough as text: each matrix with its tokens as row labels in a fixed-width format, per-head
// matrices side by side when they fit the terminal.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "apps/attention_walkthrough.hpp"

namespace tg::walkthrough {

namespace {

constexpr int kCol = 8;        // characters per number column
constexpr int64_t kRows = 16;  // longer matrices show their first kRows - 2 rows

// Words of `text` wrapped to `width` columns, every line starting with `indent`.
std::string wrap(const std::string& text, int width, const std::string& indent) {
  std::string out, line = indent, word;
  std::istringstream in(text);
  while (in >> word) {
    if (line.size() > indent.size() && line.size() + 1 + word.size() > static_cast<size_t>(width)) {
      out += line + "\n";
      line = indent + "  ";
    }
    line += (line.size() > indent.size() && line.back() != ' ' ? " " : "") + word;
  }
  return out + line + "\n";
}

std::string fit(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 1) + "~";
}

// How the numbers of a matrix are written: a common power of ten when they are all tiny or huge
// (as NumPy does), else 4, 3 or 2 decimals so that every number fits kCol - 1 characters.
struct NumberFormat {
  double factor = 1.0;
  int decimals = 4;
  std::string note;
};

NumberFormat number_format(const Tensor& t) {
  double m = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isfinite(t.data()[i])) m = std::max(m, std::abs(static_cast<double>(t.data()[i])));
  NumberFormat f;
  if (m > 0.0 && (m < 1e-2 || m >= 1e3)) {
    const int e = static_cast<int>(std::floor(std::log10(m)));
    f.factor = std::pow(10.0, e);
    f.note = fmt::format("  (x 1e{:+03d})", e);
  } else {
    f.decimals = m < 10 ? 4 : m < 100 ? 3 : 2;
  }
  return f;
}

std::string number(float v, const NumberFormat& f) {
  if (!std::isfinite(v)) return fmt::format("{:>{}}", v < 0 ? "-inf" : v > 0 ? "inf" : "nan", kCol);
  if (v == 0.0f) v = 0.0f;  // no "-0.0000" for a negative zero
  return fmt::format("{:>{}.{}f}", static_cast<double>(v) / f.factor, kCol, f.decimals);
}

// A matrix as a block of lines of equal width (at most `width`): the title, the column labels, the
// rows. Columns and rows beyond what fits are cut, and the title says so.
std::vector<std::string> block(const Matrix& m, int width) {
  const int64_t R = m.value.size(0), C = m.value.size(1);
  size_t label_w = 3;
  for (const auto& r : m.rows) label_w = std::max(label_w, std::min<size_t>(r.size(), 10));
  const int64_t fit_cols = std::max<int64_t>(1, (width - static_cast<int64_t>(label_w)) / kCol);
  const int64_t cols = C <= fit_cols ? C : fit_cols - 1, rows = R <= kRows ? R : kRows - 2;
  const NumberFormat f = number_format(m.value);
  std::string title = fmt::format("{} [{} x {}]{}", m.label, R, C, f.note);
  if (cols < C) title += fmt::format(" columns 0..{}", cols - 1);
  if (rows < R) title += fmt::format(" rows 0..{}", rows - 1);
  std::vector<std::string> lines = {title};
  std::string head(label_w, ' ');
  for (int64_t c = 0; c < cols; ++c)
    head += fmt::format("{:>{}}", fit(m.cols[static_cast<size_t>(c)], kCol - 1), kCol);
  if (cols < C) head += "  ...";
  lines.push_back(head);
  for (int64_t r = 0; r < rows; ++r) {
    std::string line = fmt::format("{:<{}}", fit(m.rows[static_cast<size_t>(r)], label_w), label_w);
    for (int64_t c = 0; c < cols; ++c) line += number(m.value.data()[r * C + c], f);
    if (cols < C) line += "  ...";
    lines.push_back(line);
  }
  if (rows < R) lines.push_back(fmt::format("... {} more rows", R - rows));
  size_t w = 0;
  for (const auto& l : lines) w = std::max(w, l.size());
  for (auto& l : lines) l.resize(w, ' ');
  return lines;
}

// The matrices of a step, side by side while they fit in `width` columns.
void print_matrices(std::string& out, const std::vector<Matrix>& ms, int width) {
  const std::string indent = "  ", gap = "   ";
  size_t i = 0;
  while (i < ms.size()) {
    std::vector<std::vector<std::string>> row = {block(ms[i], width - 2)};
    size_t used = indent.size() + row.back()[0].size();
    for (size_t j = i + 1; j < ms.size(); ++j) {
      auto next = block(ms[j], width - 2);
      if (used + gap.size() + next[0].size() > static_cast<size_t>(width)) break;
      used += gap.size() + next[0].size();
      row.push_back(std::move(next));
    }
    size_t height = 0;
    for (const auto& b : row) height = std::max(height, b.size());
    for (size_t l = 0; l < height; ++l) {
      std::string line = indent;
      for (size_t k = 0; k < row.size(); ++k) {
        const auto& b = row[k];
        line += (k ? gap : "") + (l < b.size() ? b[l] : std::string(b[0].size(), ' '));
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    i += row.size();
  }
}

std::string check_line(const GradCheck& c) {
  return fmt::format(
      "check: tape max |diff| {:.1e}, central differences max |err| {:.1e} ({} of {} elements): {}",
      c.tape_diff, c.fd_error, c.checked, c.total, c.ok() ? "ok" : "FAILED");
}

std::string last_tokens(const std::vector<std::string>& v, size_t n) {
  std::string s = v.size() > n ? "... " : "";
  for (size_t i = v.size() > n ? v.size() - n : 0; i < v.size(); ++i)
    s += v[i] + (i + 1 < v.size() ? " " : "");
  return s;
}

void print_decoding(std::string& out, const Result& r, int width) {
  out += "\nGREEDY DECODING, STEP BY STEP\n";
  out += wrap(
      "Each step runs the decoder on the newest token only (cached keys and values), takes the most "
      "likely next token and stops at <eos>: nn::greedy_decode, one step at a time.",
      width, "");
  out += fmt::format("  {:>4}  {:<24}  {:<44}  {}\n", "step", "prefix", "most likely next tokens", "chosen");
  for (size_t i = 0; i < r.decoding.size(); ++i) {
    const DecodeStep& s = r.decoding[i];
    std::string top;
    for (const auto& [token, p] : s.top) top += fmt::format("{} {:.3f}  ", fit(token, 10), p);
    out += fmt::format("  {:>4}  {:<24}  {:<44}  {}\n", i + 1, fit(last_tokens(s.prefix, 4), 24),
                       fit(top, 44), fit(s.chosen, 12));
  }
  out += fmt::format("  translation: {}\n", r.translation.empty() ? "(empty)" : r.translation);
}

}  // namespace

std::string text_report(const Result& r, int width) {
  --width;  // a line as wide as the terminal makes some terminals add an empty line
  const std::string rule(static_cast<size_t>(width), '=');
  std::string out = rule + "\n";
  out += wrap(fmt::format("Attention, number by number: \"{}\"", r.sentence), width, "");
  out += wrap(fmt::format("model: {}; d_model {}, {} heads of d_k {}, {}; self-attention mask: {}", r.model,
                          r.d_model, r.heads, r.d_k, r.norm_first ? "pre-norm" : "post-norm", r.mask),
              width, "");
  out += rule + "\n";
  int number = 0;
  for (const Section& sec : r.sections) {
    if (sec.id == "backward" && !r.decoding.empty()) print_decoding(out, r, width);
    out += fmt::format("\n{}. {}\n", ++number, sec.title);
    out += wrap(sec.intro, width, "");
    int sub = 0;
    for (const Step& st : sec.steps) {
      out += '\n';
      out += wrap(fmt::format("{}.{} {}: {}", number, ++sub, st.title, st.formula), width, "");
      for (const std::string& n : st.notes) out += wrap(n, width, "  ");
      print_matrices(out, st.matrices, width);
      if (st.check) out += wrap(check_line(*st.check), width, "  ");
    }
  }
  out += "\nCHECKS: the step-by-step numbers against the engine's own path\n";
  for (const Agreement& a : r.agreements)
    out += wrap(fmt::format("{:<4} {} ({})", a.ok ? "ok" : "FAIL", a.what,
                            a.tolerance > 0 ? fmt::format("max |diff| {:.1e}", a.max_diff)
                                            : (a.ok ? "identical" : "different")),
                width, "  ");
  std::vector<std::string> grads;
  for (const Section& sec : r.sections)
    for (const Step& st : sec.steps)
      if (st.check) grads.push_back(fmt::format("{} {}", st.id, st.check->ok() ? "ok" : "FAILED"));
  out +=
      wrap(fmt::format("gradients vs tape and central differences: {}", fmt::join(grads, ", ")), width, "  ");
  const auto failed = r.failures();
  out += failed.empty() ? fmt::format("all {} checks passed\n", r.num_checks())
                        : fmt::format("{} of {} checks FAILED: {}\n", failed.size(), r.num_checks(),
                                      fmt::join(failed, "; "));
  return out;
}

}  // namespace tg::walkthrough
