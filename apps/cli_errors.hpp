// Exit statuses of the tapegrad programs and the error for a bad command line found after parsing:
// the part of apps/cli.hpp that code running after the parse needs, without the declarations.
#pragma once

#include <stdexcept>

namespace tg::cli {

// Training programs add theirs (train/loop.hpp): 3 when training stopped on a NaN/Inf, 130 when
// interrupted by Ctrl-C or SIGTERM.
inline constexpr int kSuccess = 0;
inline constexpr int kFailure = 1;  // a runtime error: bad data, an unreadable checkpoint, a failed save
inline constexpr int kUsage = 2;    // a bad command line

// A bad command line found after parsing, e.g. "--d-model 30 must be divisible by --heads 4":
// cli::run() prints it like a parse error (with the usage line) and exits with kUsage.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tg::cli
