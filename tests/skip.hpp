// Skipping a test case that cannot run here (no torch, examples not built, an arch this CPU lacks).
//
//   TEST_CASE("nn.parity.torch") {
//     if (!python_can_import("torch")) TG_SKIP("/usr/bin/python3 cannot import torch");
//     ...
//
// test_main.cpp reports every skipped case as "SKIPPED: <case>: <reason>", does not count it as
// passed, exits 77 (meson's SKIP) when every case it ran was skipped, and with
// TAPEGRAD_TEST_RESULTS=DIR writes one JSON line per case (passed / failed / skipped) for
// tools/check_test_results.py, which fails CI when a case that must run here did not.
//
// A skip must come before the case's first check: a case that skips after checking something is a
// failure (split it), and a case that returns having checked nothing without skipping is a failure
// too ("ran no checks"), so an early `return` cannot pass for a run.
#pragma once

#include <string>

namespace tg::testing {

// Marks the running test case as skipped; the caller returns right after (TG_SKIP does both).
void skip_test_case(const std::string& reason);

}  // namespace tg::testing

#define TG_SKIP(reason)                    \
  do {                                     \
    ::tg::testing::skip_test_case(reason); \
    return;                                \
  } while (0)
