// JSON for the file formats (safetensors headers, checkpoint metadata) and the logs, on nlohmann-json.
//
// Why nlohmann-json and not simdjson (both Debian packages), measured on an AMD EPYC (Zen 4, 2 shared
// cores; `build/bench/bench_load --compare-json`, medians of 5; commands in bench/README.md, "Loading"):
// - Speed: simdjson's DOM, with the duplicate-key check a loader must add, parses 4-14x faster than
//   nlohmann's DOM (a 70 MB header of a million tensors: 0.29 s against 1.79 s; a real checkpoint's
//   0.4 MB header: 0.5 ms against 3.1 ms, of a 30-60 ms load). Both are linear. The safetensors
//   loader builds no document (sax_parse below): 100k tensors (6.9 MB) load in 0.17 s.
// - Compile time (g++ 12 -O3): a one-function parse takes 5.9 s with nlohmann, 2.9 s with simdjson;
//   io/json.cpp 5.2 s (the hand-written parser it replaces: 1.8 s).
// - What decided: only nlohmann has a SAX interface (duplicates refused while parsing, the header
//   checked as it streams by, nesting bounded before anything is built), byte offsets and readable
//   descriptions of syntax errors, the text of a number too long for 64 bits (refused, not rounded),
//   and typed conversions (to_json/from_json) for the checkpoint metadata. simdjson's DOM reports an
//   error code without a position, keeps the last of duplicate keys and needs a padded copy of the
//   input. The project's guide also names nlohmann for JSON.
//
// parse() is strict: exactly one value (surrounding whitespace allowed), RFC 8259 only (no comments,
// trailing commas, NaN/Infinity, control characters in strings, unpaired surrogates), valid UTF-8,
// no duplicate keys in an object, nesting at most max_depth deep, and integer literals that fit in
// 64 bits (int64 or uint64) -- a longer one is refused rather than rounded to a double.
// Objects are nlohmann::json (std::map: sorted keys, O(log n) lookups); never ordered_json, whose
// lookups are linear.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tg::json {

using Json = nlohmann::json;

// Thrown by parse() and sax_parse(); what() is "invalid JSON: <what> at byte <n>" (n: offset in
// the parsed text).
struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Json parse(std::string_view text, int max_depth = 64);

// The number as an exact int64: refuses other types, fractions, exponents and values out of range
// (std::runtime_error naming the problem).
int64_t to_int64(const Json& v);

// s as a JSON string literal with quotes and escapes (invalid UTF-8 bytes become U+FFFD), for
// messages that name a token.
std::string quote(std::string_view s);

// ---- streaming ------------------------------------------------------------------------------------
// For readers that check a document's structure as it is parsed instead of building it (the
// safetensors header): the strict rules of parse() except depth and duplicate keys, which are the
// handler's. The handler has these members, each throwing to refuse the document:
//   void value(Json&& v);  // null, boolean, number or string
//   void start_object();  void key(std::string& k);  void end_object();
//   void start_array();   void end_array();
// and can name where it is with Cursor::last().

// How far nlohmann's lexer has read in the text: it reads one character at a time, without
// look-ahead except the character after a number.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text), read_(text.data()) {}
  std::string_view text() const { return text_; }
  // Offset of the last character read: the '{' or '[' that opened a container, the closing quote
  // of a key or string.
  size_t last() const { return read_ > text_.data() ? static_cast<size_t>(read_ - text_.data() - 1) : 0; }

  // An input iterator for nlohmann that moves the cursor as the lexer reads.
  class Chars {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = char;
    using difference_type = std::ptrdiff_t;
    using pointer = const char*;
    using reference = const char&;
    Chars(const char* p, Cursor* c) : p_(p), c_(c) {}
    reference operator*() const { return *p_; }
    Chars& operator++() {
      c_->read_ = ++p_;
      return *this;
    }
    Chars operator++(int) {
      Chars old = *this;
      ++*this;
      return old;
    }
    bool operator==(const Chars& o) const { return p_ == o.p_; }

   private:
    const char* p_;
    Cursor* c_;
  };

 private:
  friend class Chars;
  std::string_view text_;
  const char* read_;
};

namespace detail {

[[noreturn]] void throw_syntax_error(const nlohmann::json::exception& e, size_t position,
                                     const std::string& token, const Cursor& cursor);
[[noreturn]] void throw_integer_too_long(const std::string& token, const Cursor& cursor);
void check_utf8(std::string_view text);
inline bool is_integer_literal(const std::string& t) {
  return t.find_first_of(".eE") == std::string::npos;
}

// nlohmann's SAX interface over a handler of the simpler interface above.
template <class Handler>
class Strict {
 public:
  Strict(Handler& h, const Cursor& c) : h_(h), c_(c) {}
  bool null() { return value(nullptr); }
  bool boolean(bool b) { return value(b); }
  bool number_integer(Json::number_integer_t i) { return value(i); }
  bool number_unsigned(Json::number_unsigned_t u) { return value(u); }
  bool number_float(Json::number_float_t d, const std::string& text) {
    // nlohmann returns an integer literal beyond 64 bits as a rounded double: refused instead.
    if (is_integer_literal(text)) throw_integer_too_long(text, c_);
    return value(d);
  }
  bool string(std::string& s) { return value(std::move(s)); }
  bool binary(Json::binary_t&) { return false; }  // only produced by binary formats, never by JSON
  bool start_object(std::size_t) { return h_.start_object(), true; }
  bool key(std::string& k) { return h_.key(k), true; }
  bool end_object() { return h_.end_object(), true; }
  bool start_array(std::size_t) { return h_.start_array(), true; }
  bool end_array() { return h_.end_array(), true; }
  bool parse_error(std::size_t position, const std::string& token, const nlohmann::json::exception& e) {
    throw_syntax_error(e, position, token, c_);
  }

 private:
  bool value(Json&& v) {
    h_.value(std::move(v));
    return true;
  }
  Handler& h_;
  const Cursor& c_;
};

}  // namespace detail

// Parses cursor.text() strictly, calling the handler's events; syntax errors, invalid UTF-8 and
// integer literals beyond 64 bits throw ParseError.
template <class Handler>
void sax_parse(Cursor& cursor, Handler& handler) {
  detail::check_utf8(cursor.text());
  detail::Strict<Handler> sax(handler, cursor);
  const char* p = cursor.text().data();
  if (!Json::sax_parse(Cursor::Chars(p, &cursor), Cursor::Chars(p + cursor.text().size(), &cursor), &sax,
                       Json::input_format_t::json, /*strict=*/true, /*ignore_comments=*/false))
    throw ParseError("invalid JSON");  // not reached: every refusal above throws
}

}  // namespace tg::json
