#include "io/json.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "io/utf8.hpp"

namespace tg::json {

namespace {

// A token quoted in a message, shortened to its first and last 24 bytes (a 50 MB string would
// otherwise be copied into the message), cut on UTF-8 character boundaries.
std::string shorten(std::string_view token) {
  constexpr size_t kKeep = 24;
  if (token.size() <= 3 * kKeep) return std::string(token);
  auto boundary = [&](size_t i) {
    while (i < token.size() && (static_cast<unsigned char>(token[i]) & 0xC0) == 0x80) ++i;
    return i;
  };
  const size_t head = boundary(kKeep), tail = boundary(token.size() - kKeep);
  return fmt::format("{}...({} bytes)...{}", token.substr(0, head), token.size(), token.substr(tail));
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1, column 5: "
// prefix (the caller adds the byte offset) and with the quoted input shortened.
std::string describe(const std::string& what) {
  std::string msg = what;
  if (const size_t id_end = msg.find("] ");
      msg.starts_with("[json.exception.") && id_end != std::string::npos)
    msg.erase(0, id_end + 2);
  if (msg.starts_with("parse error"))
    if (const size_t colon = msg.find(": "); colon != std::string::npos) msg.erase(0, colon + 2);
  for (const std::string_view open : {"; last read: '", "number overflow parsing '"}) {
    const size_t at = msg.find(open);
    if (at == std::string::npos) continue;
    const size_t begin = at + open.size();
    size_t end = msg.rfind("'; expected ");
    if (end == std::string::npos || end < begin) end = msg.rfind('\'');
    if (end == std::string::npos || end < begin) continue;
    msg.replace(begin, end - begin, shorten(std::string_view(msg).substr(begin, end - begin)));
  }
  return msg;
}

[[noreturn]] void fail(const std::string& what, size_t at) {
  throw ParseError(fmt::format("invalid JSON: {} at byte {}", what, at));
}

// Builds the document as nlohmann's own DOM parser does (json_sax_dom_parser), and also refuses a
// key its object already holds (one std::map emplace: O(log n) per key, nothing stored twice) and
// bounds the depth before a container is opened.
class Builder {
 public:
  Builder(Json& root, int max_depth, const Cursor& cursor)
      : root_(root), max_depth_(max_depth), cursor_(cursor) {}

  void value(Json&& v) { slot(std::move(v)); }
  void start_object() { open(Json::object()); }
  void start_array() { open(Json::array()); }
  void end_object() { stack_.pop_back(); }
  void end_array() { stack_.pop_back(); }
  void key(std::string& k) {
    auto [it, inserted] = stack_.back()->get_ref<Json::object_t&>().emplace(std::move(k), nullptr);
    if (!inserted) fail(fmt::format("duplicate key {}", quote(it->first)), cursor_.last());
    next_ = &it->second;
  }

 private:
  void open(Json&& container) {
    if (static_cast<int>(stack_.size()) >= max_depth_)
      fail(fmt::format("nesting deeper than {}", max_depth_), cursor_.last());
    stack_.push_back(slot(std::move(container)));
  }
  // Where a value goes: the root, the end of the open array, or the slot of the last key. Pointers
  // into an array stay valid: only the innermost open container grows.
  Json* slot(Json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    if (stack_.back()->is_array()) {
      auto& array = stack_.back()->get_ref<Json::array_t&>();
      array.push_back(std::move(v));
      return &array.back();
    }
    *next_ = std::move(v);
    return next_;
  }

  Json& root_;
  const int max_depth_;
  const Cursor& cursor_;
  std::vector<Json*> stack_;  // the open containers
  Json* next_ = nullptr;
};

}  // namespace

namespace detail {

void check_utf8(std::string_view text) {
  if (const size_t bad = io::find_invalid_utf8(text); bad != std::string_view::npos)
    fail("not valid UTF-8", bad);
}

void throw_syntax_error(const nlohmann::json::exception& e, size_t position, const std::string& token,
                        const Cursor& cursor) {
  // An integer literal beyond the double range (a million digits) arrives here as error 406.
  if (e.id == 406 && is_integer_literal(token)) throw_integer_too_long(token, cursor);
  // position counts the characters read, the offending one included.
  fail(describe(e.what()), position > 0 ? position - 1 : 0);
}

void throw_integer_too_long(const std::string& token, const Cursor& cursor) {
  // The lexer has read the number and the character after it, unless the number ends the text
  // (a number's last character is a digit, the one after it never is).
  const std::string_view text = cursor.text();
  size_t end = std::min(cursor.last() + 1, text.size());
  if (end > 0 && (text[end - 1] < '0' || text[end - 1] > '9')) --end;
  fail(fmt::format("integer {} is out of the 64-bit range", shorten(token)),
       end - std::min(end, token.size()));
}

}  // namespace detail

Json parse(std::string_view text, int max_depth) {
  Json root;
  Cursor cursor(text);
  Builder builder(root, max_depth, cursor);
  sax_parse(cursor, builder);
  return root;
}

int64_t to_int64(const Json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw std::runtime_error(fmt::format("json: integer {} out of the int64 range", u));
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float())
    throw std::runtime_error(
        fmt::format("json: {} is not an integer (fractions and exponents are refused)", v.dump()));
  throw std::runtime_error(fmt::format("json: expected an integer, got {}", v.type_name()));
}

std::string quote(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tg::json
