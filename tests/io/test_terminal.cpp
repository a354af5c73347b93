// io::TerminalText: what lm sample shows on a terminal.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "io/terminal.hpp"

using tg::io::TerminalText;

namespace {

// The text fed in the given pieces, then finished.
std::string shown(const std::vector<std::string>& pieces, bool active = true) {
  TerminalText t(active);
  std::string out;
  for (const std::string& p : pieces) out += t.feed(p);
  return out + t.finish();
}

}  // namespace

TEST_CASE("io.terminal.control_bytes_are_shown_not_obeyed") {
  CHECK(shown({"plain text, tabs\tand\nlines\r\n"}) == "plain text, tabs\tand\nlines\r\n");
  CHECK(shown({"\x1b[2Jcleared?"}) == "\\x1b[2Jcleared?");
  CHECK(shown({"bell\a del\x7f nul", std::string(1, '\0')}) == "bell\\x07 del\\x7f nul\\x00");
  CHECK(shown({"over\rwrite"}) == "over\\x0dwrite");
  // UTF-8 passes, split anywhere between pieces; C1 controls (U+009B is CSI) and bytes that are not
  // UTF-8 are escaped byte by byte.
  CHECK(shown({"caf\xc3", "\xa9 \xe2\x82", "\xac \xf0\x9f", "\x98", "\x80"}) ==
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(shown({"\xc2\x9b"
               "31m"}) == "\\xc2\\x9b31m");
  CHECK(shown({"\xff\xc3(\xed\xa0\x80"}) == "\\xff\\xc3(\\xed\\xa0\\x80");
  CHECK(shown({"line\r", "\nnext"}) == "line\r\nnext");
  CHECK(shown({"cut \xe2\x82"}) == "cut \\xe2\\x82");           // the text ends inside a character
  CHECK(shown({"\x1b[31m", "\xc3"}, false) == "\x1b[31m\xc3");  // not a terminal: the bytes as they are
}
