// Text data files. A parallel-text file holds one `source<TAB>target` pair per line, UTF-8. A
// leading byte-order mark, CRLF line ends and blank lines are accepted. A line with no tab (or more
// than one), an empty side or invalid UTF-8 is a bad line: reading stops with "file:line: problem"
// unless skip_bad_lines is set, in which case bad lines are counted and the first few reported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tg::io {

// A data file that cannot be used; what() names the file (and line) and the problem.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The DataError of one bad line ("<path>:<line>: <problem>"): skip_bad_lines would go past it
// (a file that cannot be opened, or holds no pairs at all, is a plain DataError).
struct BadLineError : DataError {
  using DataError::DataError;
};

struct ParallelText {
  std::vector<std::string> src, tgt;
  std::vector<int64_t> line;          // 1-based line number of each pair in its file
  int64_t skipped = 0;                // bad lines skipped (skip_bad_lines only)
  std::vector<std::string> problems;  // "file:line: problem" for the first kMaxReported skipped lines
  size_t size() const { return src.size(); }
};
inline constexpr size_t kMaxReported = 5;

// Throws DataError "<path>: cannot open: ..." for a missing file, BadLineError
// "<path>:<line>: <problem>" for the first bad line (unless skip_bad_lines), and DataError
// "<path>: no sentence pairs" when nothing is left.
ParallelText read_tsv(const std::string& path, bool skip_bad_lines = false);
// The same on text already in memory; `name` stands for the file in messages.
ParallelText parse_tsv(std::string_view text, const std::string& name, bool skip_bad_lines = false);

// ASCII whitespace, and a view with it trimmed from both ends.
inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace tg::io
