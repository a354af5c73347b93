#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "io/json.hpp"
#include "io/utf8.hpp"

using tg::json::Json;
using tg::json::parse;
using tg::json::to_int64;

namespace {
// The message of the ParseError that parsing `text` throws ("" if it parses).
std::string parse_error(std::string_view text, int depth = 64) {
  try {
    parse(text, depth);
  } catch (const tg::json::ParseError& e) {
    return e.what();
  }
  return "";
}
std::string int64_error(const Json& v) {
  try {
    to_int64(v);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("json.parse.values") {
  const Json v = parse(R"( {"a": [1, -2.5e3, true, false, null], "b": {"c": "x\"y\\n\u00e9\ud83d\ude00"}} )");
  REQUIRE(v.is_object());
  const Json& a = v.at("a");
  REQUIRE(a.size() == 5);
  CHECK(to_int64(a[0]) == 1);
  CHECK(a[1].get<double>() == -2500.0);
  CHECK(a[2].get<bool>());
  CHECK(!a[3].get<bool>());
  CHECK(a[4].is_null());
  CHECK(v.at("b").at("c").get<std::string>() == "x\"y\\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(!v.contains("missing"));
}

TEST_CASE("json.int64.exact_and_range") {
  CHECK(to_int64(parse("9007199254740993")) == 9007199254740993LL);  // not representable as a double
  CHECK(to_int64(parse("-9223372036854775808")) == INT64_MIN);
  CHECK(to_int64(parse("9223372036854775807")) == INT64_MAX);
  CHECK(int64_error(parse("9223372036854775808")).find("out of the int64 range") != std::string::npos);
  CHECK(int64_error(parse("1.5")).find("1.5 is not an integer") != std::string::npos);
  CHECK(int64_error(parse("1e3")).find("is not an integer") != std::string::npos);
  CHECK(int64_error(parse("7.0")).find("is not an integer") != std::string::npos);
  CHECK(int64_error(parse("\"1\"")).find("expected an integer, got string") != std::string::npos);
  // Beyond 64 bits an integer literal is refused, never rounded to a double.
  CHECK(parse_error("18446744073709551616")
            .find("integer 18446744073709551616 is out of the 64-bit range at byte 0") != std::string::npos);
  CHECK(parse_error("[1, -9223372036854775809]").find("out of the 64-bit range at byte 4") !=
        std::string::npos);
  CHECK(parse("18446744073709551615").get<uint64_t>() == UINT64_MAX);
}

TEST_CASE("json.parse.rejects_malformed") {
  // Each message names the problem and the byte where it was found.
  CHECK(parse_error("").find("unexpected end of input") != std::string::npos);
  CHECK(parse_error("{\"a\":1,}").find("unexpected '}'; expected string literal at byte 7") !=
        std::string::npos);
  CHECK(parse_error("[1,]").find("unexpected ']'") != std::string::npos);
  CHECK(parse_error("{\"a\":1} x").find("expected end of input at byte 8") != std::string::npos);
  CHECK(parse_error("{\"a\":1,\"a\":2}").find("duplicate key \"a\" at byte 9") != std::string::npos);
  CHECK(parse_error("01").find("unexpected number literal") != std::string::npos);
  CHECK(parse_error("NaN").find("invalid literal") != std::string::npos);
  CHECK(parse_error("[1e309]").find("number overflow") != std::string::npos);
  CHECK(parse_error("\"a\tb\"").find("control character U+0009 (HT) must be escaped") != std::string::npos);
  CHECK(parse_error("\"\\x\"").find("forbidden character after backslash") != std::string::npos);
  CHECK(parse_error("\"\\ud800\"").find("surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF") !=
        std::string::npos);
  CHECK(parse_error("\"\\udc00\"").find("surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF") !=
        std::string::npos);
  CHECK(parse_error("\"abc").find("missing closing quote") != std::string::npos);
  CHECK(parse_error("\"\xff\"").find("not valid UTF-8 at byte 1") != std::string::npos);
  CHECK(parse_error("// c\n1").find("invalid literal; last read: '/' at byte 0") != std::string::npos);
  // Every message starts the same way.
  CHECK(parse_error("[").starts_with("invalid JSON: "));
}

TEST_CASE("json.parse.depth_limit") {
  const std::string deep = std::string(10, '[') + std::string(10, ']');
  CHECK(parse_error(deep, 10).empty());
  CHECK(parse_error(deep, 9).find("nesting deeper than 9 at byte 9") != std::string::npos);
  CHECK(parse_error("{\"a\":{\"b\":{}}}", 2).find("nesting deeper than 2 at byte 10") != std::string::npos);
  // Far beyond any sane depth: an error, not a stack overflow.
  const std::string bomb(1'000'000, '[');
  CHECK(parse_error(bomb).find("nesting deeper than 64") != std::string::npos);
}

TEST_CASE("json.parse.huge_inputs_in_messages_are_shortened") {
  // A 1 MB unterminated string or a million-digit number is named by its ends, not copied.
  const std::string open_string = "\"" + std::string(1'000'000, 'a');
  const std::string msg = parse_error(open_string);
  CHECK(msg.find("missing closing quote") != std::string::npos);
  CHECK(msg.find("(1000001 bytes)") != std::string::npos);
  CHECK(msg.size() < 300);
  const std::string digits = "[" + std::string(1'000'000, '7') + "]";
  const std::string num = parse_error(digits);
  CHECK(num.find("integer 777") != std::string::npos);
  CHECK(num.find("(1000000 bytes)") != std::string::npos);
  CHECK(num.find("out of the 64-bit range at byte 1") != std::string::npos);
  CHECK(num.size() < 300);
  // A million-digit fraction is a valid (if silly) number.
  CHECK(parse("0." + std::string(1'000'000, '3')).get<double>() == doctest::Approx(1.0 / 3));
}

TEST_CASE("json.parse.many_keys_linear") {
  // 200k keys (3 MB): the old parser's duplicate check was quadratic here (tens of seconds);
  // std::map emplace is O(log n) per key.
  std::string text = "{";
  for (int i = 0; i < 200'000; ++i)
    text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  const Json v = parse(text);
  CHECK(v.size() == 200'000);
  CHECK(to_int64(v.at("k199999")) == 199999);
  text.back() = ',';
  text += "\"k7\":1}";
  CHECK(parse_error(text).find("duplicate key \"k7\"") != std::string::npos);
}

TEST_CASE("json.quote") {
  CHECK(tg::json::quote("tab\there \"q\" \x01 \xc3\xa9") == "\"tab\\there \\\"q\\\" \\u0001 \xc3\xa9\"");
  CHECK(tg::json::quote("bad \xff byte") == "\"bad \xef\xbf\xbd byte\"");  // U+FFFD
}

TEST_CASE("json.dump.round_trips_doubles") {
  // Log lines and configs are written by nlohmann: doubles in shortest round-trip form.
  for (const double d : {0.1, 1.0 / 3, 1e-300, 123456789.125, -0.0})
    CHECK(parse(Json(d).dump()).get<double>() == d);
}

TEST_CASE("json.utf8.validation") {
  using tg::io::find_invalid_utf8;
  constexpr auto npos = std::string_view::npos;
  CHECK(find_invalid_utf8("plain ascii") == npos);
  CHECK(find_invalid_utf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") == npos);  // é € 😀
  CHECK(find_invalid_utf8("ab\x80") == 2);                                   // stray continuation
  CHECK(find_invalid_utf8("a\xc0\xaf") == 1);                                // overlong '/'
  CHECK(find_invalid_utf8("\xe0\x80\xaf") == 0);                             // overlong 3-byte
  CHECK(find_invalid_utf8("\xed\xa0\x80") == 0);                             // surrogate U+D800
  CHECK(find_invalid_utf8("\xf4\x90\x80\x80") == 0);                         // > U+10FFFF
  CHECK(find_invalid_utf8("ok\xe2\x82") == 2);                               // truncated
}
