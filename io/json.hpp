// A small, strict JSON reader and writer (RFC 8259), enough for safetensors headers, checkpoint
// metadata and machine-readable log lines.
//
// Strict means: the whole input must be one value (surrounding whitespace allowed), no trailing
// commas, no comments, no NaN/Infinity, no control characters in strings, valid \u escapes
// (surrogates paired), duplicate keys in an object rejected, nesting at most max_depth deep.
// Numbers keep their source text so integers (shapes, byte offsets) are read back exactly as int64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tg::json {

// Thrown by parse(); what() says what is wrong and at which byte offset.
struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Value {
 public:
  enum class Type { null, boolean, number, string, array, object };
  using Object = std::vector<std::pair<std::string, Value>>;  // keeps insertion order
  using Array = std::vector<Value>;

  Value() = default;  // null
  static Value boolean(bool b);
  static Value number(double d);  // written in shortest round-trip form
  static Value integer(int64_t i);
  static Value string(std::string s);
  static Value array(Array a = {});
  static Value object(Object o = {});

  Type type() const { return type_; }
  const char* type_name() const;
  bool is_null() const { return type_ == Type::null; }
  bool is_string() const { return type_ == Type::string; }
  bool is_number() const { return type_ == Type::number; }
  bool is_array() const { return type_ == Type::array; }
  bool is_object() const { return type_ == Type::object; }

  // Accessors throw std::runtime_error naming the expected and actual type.
  bool as_bool() const;
  double as_double() const;
  // The number as an exact int64: rejects fractions, exponents and values out of range.
  int64_t as_int64() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  const Object& as_object() const;
  const std::string& number_text() const { return text_; }

  // Object helpers: find returns nullptr when the key is absent.
  const Value* find(std::string_view key) const;
  Value& set(std::string key, Value v);  // appends or replaces
  Value& push(Value v);                  // array append

  // Compact serialisation (no spaces), keys in insertion order.
  std::string dump() const;

 private:
  friend class Parser;
  Type type_ = Type::null;
  bool bool_ = false;
  std::string text_;  // string value, or a number's source text
  Array array_;
  Object object_;
};

// Parses exactly one JSON value; throws ParseError ("<what> at byte <n>").
Value parse(std::string_view text, int max_depth = 64);

// s as a JSON string literal with quotes and escapes (s must be valid UTF-8).
std::string quote(std::string_view s);

}  // namespace tg::json
