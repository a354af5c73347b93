// Text bound for a terminal. A language model sampling bytes can emit an escape sequence (ESC [
// 2 J clears the screen; others retitle the window or remap keys): on a terminal such bytes are
// shown as text instead, as \x1b, and only there, so that a pipe or a file gets the exact bytes.
//
//   io::TerminalText screen(::isatty(1));
//   for (...) fmt::print("{}", screen.feed(piece));   // pieces may split a UTF-8 character
//   fmt::print("{}\n", screen.finish());
#pragma once

#include <string>
#include <string_view>

namespace tg::io {

class TerminalText {
 public:
  // Inactive: feed() returns its bytes unchanged.
  explicit TerminalText(bool active) : active_(active) {}

  // What of `bytes` can be shown now. C0 control bytes but \n and \t (and \r before \n), DEL, the
  // C1 controls U+0080..U+009F and bytes that are not UTF-8 come out as "\xNN" (two lowercase hex
  // digits per byte); the start of a character or a \r that the next piece may complete is held.
  std::string feed(std::string_view bytes);
  // What was held, escaped (an incomplete character at the end of the text).
  std::string finish();

 private:
  bool active_;
  std::string held_;
};

}  // namespace tg::io
