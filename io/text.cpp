#include "io/text.hpp"

#include <fmt/format.h>

#include "io/file.hpp"
#include "io/utf8.hpp"

namespace tg::io {

namespace {

// What is wrong with one (non-blank) line, or "" when it is a good pair.
std::string line_problem(std::string_view line, std::string_view& src, std::string_view& tgt) {
  if (const size_t bad = find_invalid_utf8(line); bad != std::string_view::npos)
    return fmt::format("invalid UTF-8 at byte {} of the line", bad + 1);
  const size_t tab = line.find('\t');
  if (tab == std::string_view::npos) return "no tab between source and target";
  if (line.find('\t', tab + 1) != std::string_view::npos)
    return "more than one tab (expected exactly one, between source and target)";
  src = trim(line.substr(0, tab));
  tgt = trim(line.substr(tab + 1));
  if (src.empty()) return "empty source (nothing before the tab)";
  if (tgt.empty()) return "empty target (nothing after the tab)";
  return "";
}

}  // namespace

ParallelText parse_tsv(std::string_view text, const std::string& name, bool skip_bad_lines) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 byte-order mark
  ParallelText out;
  int64_t lineno = 0;
  while (!text.empty()) {
    ++lineno;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.ends_with('\r')) line.remove_suffix(1);  // CRLF
    if (trim(line).empty()) continue;                 // blank lines are allowed anywhere

    std::string_view src, tgt;
    const std::string problem = line_problem(line, src, tgt);
    if (problem.empty()) {
      out.src.emplace_back(src);
      out.tgt.emplace_back(tgt);
      out.line.push_back(lineno);
      continue;
    }
    const std::string msg = fmt::format("{}:{}: {}", name, lineno, problem);
    if (!skip_bad_lines) throw BadLineError(msg);
    if (out.problems.size() < kMaxReported) out.problems.push_back(msg);
    ++out.skipped;
  }
  if (out.src.empty()) {
    if (out.skipped)
      throw DataError(fmt::format("{}: no valid sentence pairs ({} bad lines skipped, first: {})", name,
                                  out.skipped, out.problems.front()));
    throw DataError(fmt::format("{}: no sentence pairs (the file is empty or blank)", name));
  }
  return out;
}

ParallelText read_tsv(const std::string& path, bool skip_bad_lines) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::runtime_error& e) {
    throw DataError(e.what());
  }
  return parse_tsv(text, path, skip_bad_lines);
}

}  // namespace tg::io
