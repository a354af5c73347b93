#include <doctest/doctest.h>

#include <string>

#include "io/json.hpp"
#include "io/utf8.hpp"

using tg::json::parse;
using tg::json::Value;

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
}  // namespace

TEST_CASE("json.parse.values") {
  const Value v =
      parse(R"( {"a": [1, -2.5e3, true, false, null], "b": {"c": "x\"y\\n\u00e9\ud83d\ude00"}} )");
  REQUIRE(v.is_object());
  const auto& a = v.find("a")->as_array();
  REQUIRE(a.size() == 5);
  CHECK(a[0].as_int64() == 1);
  CHECK(a[1].as_double() == -2500.0);
  CHECK(a[2].as_bool());
  CHECK(!a[3].as_bool());
  CHECK(a[4].is_null());
  CHECK(v.find("b")->find("c")->as_string() == "x\"y\\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(v.find("missing") == nullptr);
}

TEST_CASE("json.int64.exact_and_range") {
  CHECK(parse("9007199254740993").as_int64() == 9007199254740993LL);  // not representable as a double
  CHECK(parse("-9223372036854775808").as_int64() == INT64_MIN);
  CHECK_THROWS_WITH(parse("9223372036854775808").as_int64(), doctest::Contains("out of the int64 range"));
  CHECK_THROWS_WITH(parse("1.5").as_int64(), doctest::Contains("not an integer"));
  CHECK_THROWS_WITH(parse("1e3").as_int64(), doctest::Contains("not an integer"));
  CHECK_THROWS_WITH(parse("\"1\"").as_int64(), doctest::Contains("expected integer, got string"));
}

TEST_CASE("json.parse.rejects_malformed") {
  CHECK(parse_error("").find("unexpected end") != std::string::npos);
  CHECK(parse_error("{\"a\":1,}").find("expected a string key") != std::string::npos);
  CHECK(parse_error("[1,]").find("unexpected character") != std::string::npos);
  CHECK(parse_error("{\"a\":1} x").find("after the JSON value") != std::string::npos);
  CHECK(parse_error("{\"a\":1,\"a\":2}").find("duplicate key \"a\"") != std::string::npos);
  CHECK(parse_error("01").find("leading zero") != std::string::npos);
  CHECK(parse_error("NaN").find("unexpected character") != std::string::npos);
  CHECK(parse_error("\"a\tb\"").find("control character") != std::string::npos);
  CHECK(parse_error("\"\\x\"").find("bad escape") != std::string::npos);
  CHECK(parse_error("\"\\ud800\"").find("unpaired high surrogate") != std::string::npos);
  CHECK(parse_error("\"\\udc00\"").find("unpaired low surrogate") != std::string::npos);
  CHECK(parse_error("\"abc").find("unterminated string") != std::string::npos);
  CHECK(parse_error("\"\xff\"").find("not valid UTF-8 at byte 1") != std::string::npos);
  CHECK(parse_error("// c\n1").find("unexpected character at byte 0") != std::string::npos);
}

TEST_CASE("json.parse.depth_limit") {
  const std::string deep = std::string(10, '[') + std::string(10, ']');
  CHECK(parse_error(deep, 10).empty());
  CHECK(parse_error(deep, 9).find("nesting deeper than 9") != std::string::npos);
  // Far beyond any sane depth: an error, not a stack overflow.
  const std::string bomb(1'000'000, '[');
  CHECK(parse_error(bomb).find("nesting deeper than 64") != std::string::npos);
}

TEST_CASE("json.dump.round_trip") {
  Value o = Value::object();
  o.set("s", Value::string("tab\there \"q\" \x01 \xc3\xa9"));
  o.set("n", Value::number(0.1));
  o.set("i", Value::integer(-42));
  o.set("a", Value::array({Value::boolean(true), Value()}));
  o.set("i", Value::integer(7));  // replaces, keeps position
  const std::string text = o.dump();
  CHECK(text == R"({"s":"tab\there \"q\" \u0001 )"
                "\xc3\xa9"
                R"(","n":0.1,"i":7,"a":[true,null]})");
  const Value back = parse(text);
  CHECK(back.find("s")->as_string() == o.find("s")->as_string());
  CHECK(back.find("n")->as_double() == 0.1);
  CHECK(back.dump() == text);
  CHECK_THROWS_WITH(Value::number(1.0 / 0.0), doctest::Contains("non-finite"));
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
