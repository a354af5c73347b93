#include "io/json.hpp"

#include "io/utf8.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace tg::json {

// ---- values ------------------------------------------------------------------------------------

Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::boolean;
  v.bool_ = b;
  return v;
}
Value Value::number(double d) {
  if (!std::isfinite(d))
    throw std::invalid_argument(fmt::format("json: cannot write non-finite number {}", d));
  Value v;
  v.type_ = Type::number;
  v.text_ = fmt::format("{}", d);
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::number;
  v.text_ = std::to_string(i);
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.type_ = Type::string;
  v.text_ = std::move(s);
  return v;
}
Value Value::array(Array a) {
  Value v;
  v.type_ = Type::array;
  v.array_ = std::move(a);
  return v;
}
Value Value::object(Object o) {
  Value v;
  v.type_ = Type::object;
  v.object_ = std::move(o);
  return v;
}

const char* Value::type_name() const {
  switch (type_) {
    case Type::null:
      return "null";
    case Type::boolean:
      return "boolean";
    case Type::number:
      return "number";
    case Type::string:
      return "string";
    case Type::array:
      return "array";
    case Type::object:
      return "object";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_type(const char* want, const Value& v) {
  throw std::runtime_error(fmt::format("json: expected {}, got {}", want, v.type_name()));
}
}  // namespace

bool Value::as_bool() const {
  if (type_ != Type::boolean) wrong_type("boolean", *this);
  return bool_;
}
double Value::as_double() const {
  if (type_ != Type::number) wrong_type("number", *this);
  return std::strtod(text_.c_str(), nullptr);
}
int64_t Value::as_int64() const {
  if (type_ != Type::number) wrong_type("integer", *this);
  int64_t out = 0;
  const char* end = text_.data() + text_.size();
  auto [p, ec] = std::from_chars(text_.data(), end, out);
  if (ec == std::errc::result_out_of_range)
    throw std::runtime_error(fmt::format("json: integer {} out of the int64 range", text_));
  if (ec != std::errc() || p != end)
    throw std::runtime_error(fmt::format("json: {} is not an integer", text_));
  return out;
}
const std::string& Value::as_string() const {
  if (type_ != Type::string) wrong_type("string", *this);
  return text_;
}
const Value::Array& Value::as_array() const {
  if (type_ != Type::array) wrong_type("array", *this);
  return array_;
}
const Value::Object& Value::as_object() const {
  if (type_ != Type::object) wrong_type("object", *this);
  return object_;
}

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : as_object())
    if (k == key) return &v;
  return nullptr;
}
Value& Value::set(std::string key, Value v) {
  if (type_ != Type::object) wrong_type("object", *this);
  for (auto& [k, old] : object_)
    if (k == key) return old = std::move(v);
  object_.emplace_back(std::move(key), std::move(v));
  return object_.back().second;
}
Value& Value::push(Value v) {
  if (type_ != Type::array) wrong_type("array", *this);
  array_.push_back(std::move(v));
  return array_.back();
}

namespace {
void dump_to(const Value& v, std::string& out) {
  switch (v.type()) {
    case Value::Type::null:
      out += "null";
      break;
    case Value::Type::boolean:
      out += v.as_bool() ? "true" : "false";
      break;
    case Value::Type::number:
      out += v.number_text();
      break;
    case Value::Type::string:
      out += quote(v.as_string());
      break;
    case Value::Type::array: {
      out += '[';
      bool first = true;
      for (const Value& e : v.as_array()) {
        if (!first) out += ',';
        first = false;
        dump_to(e, out);
      }
      out += ']';
      break;
    }
    case Value::Type::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.as_object()) {
        if (!first) out += ',';
        first = false;
        out += quote(k);
        out += ':';
        dump_to(e, out);
      }
      out += '}';
      break;
    }
  }
}
}  // namespace

std::string Value::dump() const {
  std::string out;
  dump_to(*this, out);
  return out;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20)
          out += fmt::format("\\u{:04x}", c);
        else
          out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// ---- parser ------------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::string_view s, int max_depth) : s_(s), max_depth_(max_depth) {}

  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected data after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ParseError(fmt::format("invalid JSON: {} at byte {}", what, i_));
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect_word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) fail("unexpected character");
    i_ += w.size();
  }

  Value parse_value(int depth) {
    if (i_ >= s_.size()) fail("unexpected end of input");
    switch (s_[i_]) {
      case '{':
        return parse_object(depth + 1);
      case '[':
        return parse_array(depth + 1);
      case '"':
        return Value::string(parse_string());
      case 't':
        expect_word("true");
        return Value::boolean(true);
      case 'f':
        expect_word("false");
        return Value::boolean(false);
      case 'n':
        expect_word("null");
        return Value();
      default:
        return parse_number();
    }
  }

  Value parse_object(int depth) {
    if (depth > max_depth_) fail(fmt::format("nesting deeper than {}", max_depth_));
    ++i_;  // '{'
    Value obj = Value::object();
    skip_ws();
    if (eat('}')) return obj;
    for (;;) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
      const size_t key_at = i_;
      std::string key = parse_string();
      if (obj.find(key)) {
        i_ = key_at;
        fail(fmt::format("duplicate key {}", quote(key)));
      }
      skip_ws();
      if (!eat(':')) fail("expected ':' after a key");
      skip_ws();
      Value v = parse_value(depth);
      obj.object_.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (eat('}')) return obj;
      if (!eat(',')) fail("expected ',' or '}' in an object");
    }
  }

  Value parse_array(int depth) {
    if (depth > max_depth_) fail(fmt::format("nesting deeper than {}", max_depth_));
    ++i_;  // '['
    Value arr = Value::array();
    skip_ws();
    if (eat(']')) return arr;
    for (;;) {
      skip_ws();
      arr.array_.push_back(parse_value(depth));
      skip_ws();
      if (eat(']')) return arr;
      if (!eat(',')) fail("expected ',' or ']' in an array");
    }
  }

  // number = [ '-' ] int [ frac ] [ exp ],  int = '0' | [1-9][0-9]*
  Value parse_number() {
    const size_t start = i_;
    auto digits = [&] {
      const size_t from = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - from;
    };
    eat('-');
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') fail("unexpected character");
    if (s_[i_] == '0') {
      ++i_;
      if (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') fail("leading zero in a number");
    } else {
      digits();
    }
    if (eat('.') && digits() == 0) fail("expected digits after '.'");
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (!eat('+')) eat('-');
      if (digits() == 0) fail("expected digits in an exponent");
    }
    Value v;
    v.type_ = Value::Type::number;
    v.text_ = std::string(s_.substr(start, i_ - start));
    return v;
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned u = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      u <<= 4;
      if (c >= '0' && c <= '9')
        u |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        u |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        u |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("bad hex digit in a \\u escape");
    }
    return u;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    ++i_;  // opening quote
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return out;
      }
      if (c < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++i_;
        continue;
      }
      ++i_;
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("unpaired low surrogate in a \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(i_, 2) != "\\u") fail("unpaired high surrogate in a \\u escape");
            i_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired high surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --i_;
          fail(fmt::format("bad escape '\\{}'", e));
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  int max_depth_;
};

Value parse(std::string_view text, int max_depth) {
  if (const size_t bad = io::find_invalid_utf8(text); bad != std::string_view::npos)
    throw ParseError(fmt::format("invalid JSON: not valid UTF-8 at byte {}", bad));
  return Parser(text, max_depth).parse_document();
}

}  // namespace tg::json
