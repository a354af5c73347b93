#include "nn/tokenizers/gpt2_bpe.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "io/file.hpp"
#include "io/json.hpp"
#include "io/text.hpp"
#include "io/utf8.hpp"

namespace tg::nn {

namespace {

using io::DataError;
using json::Json;

// The cache of merged pieces (gpt2_bpe.hpp): pieces of at most kCacheMaxPiece bytes; cleared when
// it holds kCacheMaxWords pieces or about kCacheMaxMemory bytes (keys, ids and kCacheEntryBytes per
// entry for the node, the string and the vector).
constexpr size_t kCacheMaxWords = 65536;
constexpr size_t kCacheMaxPiece = 256;
constexpr size_t kCacheMaxMemory = 16 << 20;
constexpr size_t kCacheEntryBytes = 96;
constexpr std::string_view kMergesHeader = "#version: 0.2";

// ---- the byte-to-unicode table ----------------------------------------------------------------

std::array<char32_t, 256> make_byte_table() {
  std::array<char32_t, 256> t{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return t;
}

// Code points of the table are below 256 + 68; the inverse is an array over them.
constexpr char32_t kTableEnd = 256 + 68;
std::array<int16_t, kTableEnd> make_inverse_table() {
  std::array<int16_t, kTableEnd> inv{};
  inv.fill(-1);
  const auto& t = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) inv[t[b]] = static_cast<int16_t>(b);
  return inv;
}

void append_utf8(std::string& s, char32_t c) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// The code point at s[i] of valid UTF-8; advances i.
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

// ---- the pre-tokenizer ------------------------------------------------------------------------

// Unicode's White_Space, which is Oniguruma's \s (PCRE2's \s with UCP also has U+180E).
#define TG_GPT2_WS \
  R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})"
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" TG_GPT2_WS R"(\p{L}\p{N}]+|[)" TG_GPT2_WS
    R"(]+(?![^)" TG_GPT2_WS R"(])|[)" TG_GPT2_WS R"(]+)";
#undef TG_GPT2_WS

class Pretokenizer {
 public:
  Pretokenizer() {
    int err = 0;
    PCRE2_SIZE at = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw std::logic_error(fmt::format("gpt2 tokenizer: PCRE2 refused the pattern at {}: {}", at,
                                         reinterpret_cast<const char*>(msg)));
    }
    // 0 where PCRE2 was built with its JIT (Debian's is, on x86-64 and arm64); else the interpreter.
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Pretokenizer() { pcre2_code_free(code_); }
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Calls emit(piece) for each piece of `text` (valid UTF-8), in order.
  template <class Emit>
  void split(std::string_view text, Emit&& emit) const {
    thread_local MatchData md(code_);
    const auto* s = reinterpret_cast<PCRE2_SPTR>(text.data());
    const size_t n = text.size();
    size_t at = 0;
    while (at < n) {
      int rc = jit_ ? pcre2_jit_match(code_, s, n, at, 0, md.p, nullptr)
                    : pcre2_match(code_, s, n, at, PCRE2_NO_UTF_CHECK, md.p, nullptr);
      // The JIT's stack limit: the interpreter (heap frames) instead.
      if (jit_ && rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        rc = pcre2_match(code_, s, n, at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.p, nullptr);
      size_t start = n, end = n;
      if (rc >= 0) {
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.p);
        start = ov[0];
        end = ov[1];
      } else if (rc != PCRE2_ERROR_NOMATCH) {
        // Never seen (every character matches an alternative, and the longest backtrack is one
        // character); should PCRE2 fail anyway, the next character is a piece of its own, so that
        // encoding goes on and decoding still gives the bytes back.
        start = at;
        end = at;
      }
      if (start > at) emit(text.substr(at, start - at));  // unmatched text: cannot happen either
      if (end <= start && start < n) {                    // no empty pieces: one character
        size_t i = start;
        next_code_point(text, i);
        end = i;
      }
      if (end > start) emit(text.substr(start, end - start));
      at = std::max(end, start);
    }
  }

 private:
  struct MatchData {
    explicit MatchData(const pcre2_code* code) : p(pcre2_match_data_create_from_pattern(code, nullptr)) {
      if (!p) throw std::bad_alloc();
    }
    ~MatchData() { pcre2_match_data_free(p); }
    pcre2_match_data* p;
  };
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

const Pretokenizer& pretokenizer() {
  static const Pretokenizer p;
  return p;
}

// Splits `text` (any bytes) as the pre-tokenizer splits it with each invalid UTF-8 byte read as
// U+FFFD (gpt2_bpe.hpp): the pieces are of `text` itself.
template <class Emit>
void split_any_bytes(std::string_view text, Emit&& emit) {
  size_t bad = io::find_invalid_utf8(text);
  if (bad == std::string_view::npos) {
    pretokenizer().split(text, emit);
    return;
  }
  // The copy, and where in it each U+FFFD stands for an invalid byte: a piece boundary at offset c
  // of the copy (never inside a U+FFFD) is at c - 2 k in `text`, k the U+FFFDs before c.
  std::string copy;
  std::vector<size_t> stand_ins;
  copy.reserve(text.size() + 16);
  size_t i = 0;
  for (;;) {
    const size_t good = bad == std::string_view::npos ? text.size() - i : bad;
    copy.append(text.substr(i, good));
    i += good;
    if (i >= text.size()) break;
    stand_ins.push_back(copy.size());
    copy.append("\xEF\xBF\xBD");
    ++i;
    bad = io::find_invalid_utf8(text.substr(i));
  }
  size_t k = 0, from = 0;  // the pieces come in order
  pretokenizer().split(copy, [&](std::string_view piece) {
    const size_t end = static_cast<size_t>(piece.data() - copy.data()) + piece.size();
    while (k < stand_ins.size() && stand_ins[k] < end) ++k;
    const size_t to = end - 2 * k;
    emit(text.substr(from, to - from));
    from = to;
  });
}

// ---- reading ----------------------------------------------------------------------------------

// Heterogeneous lookup: find(std::string_view) without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// json::parse with the file named, and the line and column of a syntax error.
Json parse_json(std::string_view text, const std::string& name) {
  try {
    return json::parse(text);
  } catch (const json::ParseError& e) {
    std::string what = e.what();
    const size_t at = what.rfind(" at byte ");
    if (at != std::string::npos) {
      const size_t offset = std::min<size_t>(std::strtoull(what.c_str() + at + 9, nullptr, 10), text.size());
      const std::string_view before = text.substr(0, offset);
      const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
      const size_t line_start = before.rfind('\n');
      const size_t column = offset - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
      what += fmt::format(" (line {}, column {})", line, column);
    }
    throw DataError(fmt::format("{}: {}", name, what));
  }
}

const Json* member(const Json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// An integer id as int64 (a uint64 beyond that range is out of range all the same).
int64_t id_value(const Json& id) {
  if (id.is_number_unsigned() &&
      id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return std::numeric_limits<int64_t>::max();
  return id.get<int64_t>();
}

bool flag(const Json& obj, const char* key, const std::string& where) {
  const Json* v = member(obj, key);
  if (!v || v->is_null()) return false;
  if (!v->is_boolean())
    throw DataError(fmt::format("{}.{}: expected true or false, got {}", where, key, v->dump()));
  return v->get<bool>();
}

}  // namespace

const std::array<char32_t, 256>& gpt2_byte_to_unicode() {
  static const std::array<char32_t, 256> table = make_byte_table();
  return table;
}

std::string gpt2_bytes_to_unicode(std::string_view bytes) {
  const auto& t = gpt2_byte_to_unicode();
  std::string s;
  s.reserve(bytes.size() * 2);
  for (const char c : bytes) append_utf8(s, t[static_cast<unsigned char>(c)]);
  return s;
}

std::optional<std::string> gpt2_unicode_to_bytes(std::string_view token) {
  static const std::array<int16_t, kTableEnd> inv = make_inverse_table();
  if (!io::is_valid_utf8(token)) return std::nullopt;
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const char32_t c = next_code_point(token, i);
    if (c >= kTableEnd || inv[c] < 0) return std::nullopt;
    bytes += static_cast<char>(inv[c]);
  }
  return bytes;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  split_any_bytes(text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

// ---- the tokenizer ----------------------------------------------------------------------------

struct Gpt2BpeTokenizer::Impl {
  std::vector<std::string> tokens;  // id -> vocab.json's spelling
  std::vector<std::string> bytes;   // id -> its bytes
  StringMap<int32_t> ids;           // spelling -> id
  std::array<int32_t, 256> byte_id{};
  bool missing_bytes = false;  // some byte has no token (never so in GPT-2's vocabulary)
  std::vector<std::pair<std::string, std::string>> merge_list;
  // (left id, right id) -> (rank, merged id); a pair listed twice keeps its last rank.
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  std::vector<AddedToken> added;
  std::vector<char> special;  // id -> 1 for a special added token
  Options options;
  int32_t unk_id = -1, eot_id = -1;

  mutable std::mutex mutex;
  mutable StringMap<std::vector<int32_t>> cache;
  mutable size_t cache_bytes = 0;  // estimated: kCacheEntryBytes per entry, its key and its ids

  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // ---- building ----

  // tokens (spelling, id) and the added tokens not among them: ids exactly 0..N-1, each once.
  void set_vocab(std::vector<std::pair<std::string, int64_t>> entries, const std::string& where) {
    const int64_t n = static_cast<int64_t>(entries.size());
    if (n == 0) throw DataError(fmt::format("{}: the vocabulary is empty", where));
    if (n > std::numeric_limits<int32_t>::max())
      throw DataError(fmt::format("{}: {} tokens is more than ids can number", where, n));
    tokens.assign(static_cast<size_t>(n), {});
    std::vector<char> seen(static_cast<size_t>(n), 0);
    for (auto& [tok, id] : entries) {
      if (id < 0 || id >= n)
        throw DataError(
            fmt::format("{}: token {}: id {} is out of range (the {} ids must be 0..{}, each once)", where,
                        json::quote(tok), id, n, n - 1));
      if (seen[id])
        throw DataError(fmt::format("{}: id {} is given to both {} and {} (each id must be used once)", where,
                                    id, json::quote(tokens[id]), json::quote(tok)));
      seen[id] = 1;
      tokens[id] = std::move(tok);
    }
    bytes.resize(tokens.size());
    ids.reserve(tokens.size());
    byte_id.fill(-1);
    for (size_t id = 0; id < tokens.size(); ++id) {
      ids.emplace(tokens[id], static_cast<int32_t>(id));
      std::optional<std::string> b = gpt2_unicode_to_bytes(tokens[id]);
      // A token outside the byte table (an added token such as "<|endoftext|>" is inside it, as
      // printable ASCII) stands for its own UTF-8, as the ByteLevel decoder has it.
      bytes[id] = b ? std::move(*b) : tokens[id];
      if (b && bytes[id].size() == 1)
        byte_id[static_cast<unsigned char>(bytes[id][0])] = static_cast<int32_t>(id);
    }
    missing_bytes = std::find(byte_id.begin(), byte_id.end(), -1) != byte_id.end();
  }

  // A byte without a token, where there is no unk_token, is refused (the rule of Tokenizer for a
  // tokenizer without <unk>; `tokenizers` drops it silently): DataError naming where, the line and
  // the byte. `stretch` is a part of `text`.
  void refuse_missing_bytes(std::string_view text, std::string_view stretch, const std::string& where) const {
    for (size_t i = 0; i < stretch.size(); ++i) {
      const auto b = static_cast<unsigned char>(stretch[i]);
      if (byte_id[b] >= 0) continue;
      const size_t at = static_cast<size_t>(stretch.data() - text.data()) + i;
      const std::string_view before = text.substr(0, at);
      const size_t line_start = before.rfind('\n');
      throw DataError(
          fmt::format("{}: line {}, byte {} of the line: byte 0x{:02X} ({}) has no token in the gpt2 "
                      "tokenizer's vocabulary, "
                      "which has no unk_token either",
                      where, 1 + std::count(before.begin(), before.end(), '\n'),
                      at - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1, b,
                      printable_label(std::string_view(&stretch[i], 1))));
    }
  }

  int32_t find(std::string_view tok) const {
    const auto it = ids.find(tok);
    return it == ids.end() ? -1 : it->second;
  }

  // One merge; `where` names its line or key in messages.
  void add_merge(std::string a, std::string b, const std::function<std::string()>& where) {
    if (a.empty() || b.empty() || a.find_first_of(" \r\n") != std::string::npos ||
        b.find_first_of(" \r\n") != std::string::npos)
      throw DataError(fmt::format("{}: expected two symbols separated by one space, got {} and {}", where(),
                                  json::quote(a), json::quote(b)));
    if (a.starts_with("#version"))  // only from tokenizer.json: merges.txt skips such a line
      throw DataError(
          fmt::format("{}: a merge of {} cannot be written to merges.txt, whose readers skip lines that "
                      "start with #version",
                      where(), json::quote(a)));
    const int32_t ia = find(a), ib = find(b);

    if (ia < 0) throw DataError(fmt::format("{}: {} is not in the vocabulary", where(), json::quote(a)));
    if (ib < 0) throw DataError(fmt::format("{}: {} is not in the vocabulary", where(), json::quote(b)));
    const int32_t merged = find(a + b);
    if (merged < 0)
      throw DataError(fmt::format("{}: the merge of {} and {}, {}, is not in the vocabulary", where(),
                                  json::quote(a), json::quote(b), json::quote(a + b)));
    merges[key(ia, ib)] = {static_cast<int32_t>(merge_list.size()), merged};
    merge_list.emplace_back(std::move(a), std::move(b));
  }

  void parse_merges_txt(std::string_view text, const std::string& name) {
    size_t line_no = 0;
    for (size_t at = 0; at < text.size();) {
      size_t end = text.find('\n', at);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(at, end - at);
      at = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.starts_with("#version")) continue;
      const size_t space = line.find(' ');
      auto where = [&] { return fmt::format("{}:{}", name, line_no); };
      if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
        throw DataError(fmt::format("{}: expected two symbols separated by one space, got {}", where(),
                                    json::quote(line)));
      add_merge(std::string(line.substr(0, space)), std::string(line.substr(space + 1)), where);
    }
    merges.rehash(0);
  }

  void set_added(std::vector<AddedToken> list, const std::string& where) {
    special.assign(tokens.size(), 0);
    for (const AddedToken& t : list) {
      if (t.content.empty()) throw DataError(fmt::format("{}: an added token is empty", where));
      if (t.id < 0 || static_cast<size_t>(t.id) >= tokens.size() || tokens[t.id] != t.content)
        throw DataError(fmt::format(
            "{}: added token {} with id {}: the vocabulary has {} there", where, json::quote(t.content), t.id,
            t.id >= 0 && static_cast<size_t>(t.id) < tokens.size() ? json::quote(tokens[t.id])
                                                                   : std::string("no such id")));
      if (t.special) special[t.id] = 1;
      if (t.content == kEndOfText && t.special) eot_id = t.id;
    }
    added = std::move(list);
  }

  // What vocab.json + merges.txt imply: "<|endoftext|>" special where the vocabulary has it.
  std::vector<AddedToken> default_added() const {
    const int32_t id = find(kEndOfText);
    if (id < 0) return {};
    return {AddedToken{std::string(kEndOfText), id, true}};
  }

  void set_options(Options o, const std::string& where) {
    if (!o.unk_token.empty()) {
      unk_id = find(o.unk_token);
      if (unk_id < 0)
        throw DataError(
            fmt::format("{}: unk_token {} is not in the vocabulary", where, json::quote(o.unk_token)));
    }
    options = std::move(o);
  }

  // ---- encoding ----

  // Added tokens cut out of `text`, leftmost first, then longest: stretch(text between), token(id).
  template <class Stretch, class Token>
  void split_added(std::string_view text, Stretch&& stretch, Token&& token) const {
    if (added.empty()) {
      stretch(text);
      return;
    }
    std::vector<size_t> next(added.size(), 0);  // where each occurs next at or after `at`
    std::vector<char> known(added.size(), 0);
    size_t at = 0;
    while (at <= text.size()) {
      size_t best = std::string_view::npos, best_len = 0, best_k = 0;
      for (size_t k = 0; k < added.size(); ++k) {
        if (!known[k] || (next[k] != std::string_view::npos && next[k] < at)) {
          next[k] = text.find(added[k].content, at);
          known[k] = 1;
        }
        const size_t p = next[k], len = added[k].content.size();
        if (p < best || (p == best && p != std::string_view::npos && len > best_len)) {
          best = p;
          best_len = len;
          best_k = k;
        }
      }
      if (best == std::string_view::npos) {
        stretch(text.substr(at));
        return;
      }
      stretch(text.substr(at, best - at));
      token(added[best_k].id);
      at = best + best_len;
    }
  }

  struct Symbol {
    int32_t id, prev, next, len;
  };
  struct Merge {
    int32_t pos, rank, id;
    // The heap's top is the largest: the smallest rank, then the leftmost.
    bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Merge> heap;
    std::vector<int32_t> ids;
    bool unknown = false;
  };

  const std::pair<int32_t, int32_t>* merge_of(int32_t a, int32_t b) const {
    const auto it = merges.find(key(a, b));
    return it == merges.end() ? nullptr : &it->second;
  }

  // The ids of one piece into s.ids: its bytes as symbols, then the merges by rank (tokenizers'
  // Word::merge_all, with the same queue order and the same check for stale entries).
  void merge_piece(std::string_view piece, Scratch& s, UnknownTokens* unknown) const {
    s.ids.clear();
    s.unknown = false;
    if (options.ignore_merges)
      if (const int32_t id = find(gpt2_bytes_to_unicode(piece)); id >= 0) {
        s.ids.push_back(id);
        return;
      }
    auto& sym = s.symbols;
    sym.clear();
    auto push = [&](int32_t id, int32_t len) {
      const auto n = static_cast<int32_t>(sym.size());
      if (n > 0) sym.back().next = n;
      sym.push_back({id, n - 1, -1, len});
    };
    int32_t pending_unk = 0;  // bytes of an unk symbol not yet pushed
    for (const char c : piece) {
      const int32_t id = byte_id[static_cast<unsigned char>(c)];
      if (id >= 0) {
        if (pending_unk > 0) push(unk_id, std::exchange(pending_unk, 0));
        push(id, 1);
        continue;
      }
      s.unknown = true;
      if (unknown) unknown->add(printable_label(std::string_view(&c, 1)));
      // Without an unk_token, encode() has refused the text already, but for the " " that
      // add_prefix_space adds: dropped, as tokenizers drops it.
      if (unk_id < 0) continue;
      if (pending_unk > 0 && !options.fuse_unk) push(unk_id, std::exchange(pending_unk, 0));
      ++pending_unk;
    }
    if (pending_unk > 0) push(unk_id, pending_unk);

    auto& heap = s.heap;  // a binary heap by Merge::operator<: the top is the next merge
    heap.clear();
    for (size_t i = 0; i + 1 < sym.size(); ++i)
      if (const auto* m = merge_of(sym[i].id, sym[i + 1].id))
        heap.push_back({static_cast<int32_t>(i), m->first, m->second});
    std::make_heap(heap.begin(), heap.end());
    auto push_merge = [&](int32_t pos, const std::pair<int32_t, int32_t>& m) {
      heap.push_back({pos, m.first, m.second});
      std::push_heap(heap.begin(), heap.end());
    };
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Merge top = heap.back();
      heap.pop_back();
      Symbol& cur = sym[top.pos];
      if (cur.len == 0 || cur.next < 0) continue;
      const int32_t right_pos = cur.next;
      const Symbol right = sym[right_pos];
      const auto* m = merge_of(cur.id, right.id);
      if (!m || m->second != top.id) continue;  // stale: one side has been merged since
      cur.id = top.id;
      cur.len += right.len;
      cur.next = right.next;
      sym[right_pos].len = 0;
      if (right.next >= 0) sym[right.next].prev = top.pos;
      if (cur.prev >= 0)
        if (const auto* mp = merge_of(sym[cur.prev].id, cur.id)) push_merge(cur.prev, *mp);
      if (cur.next >= 0)
        if (const auto* mn = merge_of(cur.id, sym[cur.next].id)) push_merge(top.pos, *mn);
    }
    for (const Symbol& x : sym)
      if (x.len > 0) s.ids.push_back(x.id);
  }

  void encode_piece(std::string_view piece, Scratch& s, std::vector<int32_t>& out,
                    UnknownTokens* unknown) const {
    if (piece.size() == 1) {  // a byte is its token (with ignore_merges too)
      if (const int32_t id = byte_id[static_cast<unsigned char>(piece[0])]; id >= 0) {
        out.push_back(id);
        return;
      }
    }
    const bool cacheable = piece.size() <= kCacheMaxPiece;
    if (cacheable) {
      std::lock_guard lock(mutex);
      if (const auto it = cache.find(piece); it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    merge_piece(piece, s, unknown);
    out.insert(out.end(), s.ids.begin(), s.ids.end());
    if (cacheable && !s.unknown) {  // pieces with unknown bytes are merged again, to be counted again
      std::lock_guard lock(mutex);
      const size_t bytes = kCacheEntryBytes + piece.size() + s.ids.size() * sizeof(int32_t);
      if (cache.size() >= kCacheMaxWords || cache_bytes + bytes > kCacheMaxMemory) {
        cache.clear();
        cache_bytes = 0;
      }
      if (cache.emplace(std::string(piece), s.ids).second) cache_bytes += bytes;
    }
  }

  void encode_stretch(std::string_view text, Scratch& s, std::vector<int32_t>& out,
                      UnknownTokens* unknown) const {
    if (text.empty()) return;
    std::string prefixed;
    if (options.add_prefix_space && text.front() != ' ') {
      prefixed.reserve(text.size() + 1);
      prefixed += ' ';
      prefixed += text;
      text = prefixed;
    }
    auto emit = [&](std::string_view piece) { encode_piece(piece, s, out, unknown); };
    if (options.use_regex)
      split_any_bytes(text, emit);
    else
      emit(text);
  }
};

// ---- construction -----------------------------------------------------------------------------

Gpt2BpeTokenizer::Gpt2BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gpt2BpeTokenizer::Gpt2BpeTokenizer(Gpt2BpeTokenizer&&) noexcept = default;
Gpt2BpeTokenizer& Gpt2BpeTokenizer::operator=(Gpt2BpeTokenizer&&) noexcept = default;
Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;

namespace {

std::vector<std::pair<std::string, int64_t>> vocab_entries(const Json& v, const std::string& where) {
  if (!v.is_object())
    throw DataError(fmt::format("{}: expected a JSON object of token -> id, got {}", where, v.type_name()));
  std::vector<std::pair<std::string, int64_t>> entries;
  entries.reserve(v.size());
  for (const auto& [tok, id] : v.items()) {
    if (!id.is_number_integer())
      throw DataError(fmt::format("{}: token {}: the id must be a whole number, got {}", where,
                                  json::quote(tok), id.dump()));
    entries.emplace_back(tok, id_value(id));
  }
  return entries;
}

}  // namespace

Gpt2BpeTokenizer Gpt2BpeTokenizer::from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                                const std::string& vocab_name,
                                                const std::string& merges_name) {
  auto impl = std::make_unique<Impl>();
  impl->set_vocab(vocab_entries(parse_json(vocab_json, vocab_name), vocab_name), vocab_name);
  impl->parse_merges_txt(merges_txt, merges_name);
  impl->set_added(impl->default_added(), vocab_name);
  return Gpt2BpeTokenizer(std::move(impl));
}

Gpt2BpeTokenizer Gpt2BpeTokenizer::from_tokenizer_json_string(std::string_view text,
                                                              const std::string& name) {
  const Json root = parse_json(text, name);
  if (!root.is_object())
    throw DataError(fmt::format("{}: expected a JSON object, got {}", name, root.type_name()));
  const Json* model = member(root, "model");
  if (!model || !model->is_object()) throw DataError(fmt::format("{}: no \"model\" object", name));
  const std::string m = name + ": model";
  if (const Json* type = member(*model, "type"); type && *type != "BPE")
    throw DataError(
        fmt::format("{}.type is {}: only \"BPE\" (GPT-2's byte-level BPE) is supported", m, type->dump()));
  auto refuse = [&](const char* key, const char* why) {
    throw DataError(fmt::format("{}.{}: {} is not supported ({})", m, key, member(*model, key)->dump(), why));
  };
  if (const Json* d = member(*model, "dropout"); d && !d->is_null())
    refuse("dropout", "tokenizing is deterministic");
  if (flag(*model, "byte_fallback", m)) refuse("byte_fallback", "byte-level BPE has every byte");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const Json* p = member(*model, key); p && !p->is_null() && *p != "") refuse(key, "GPT-2 has none");

  const Json* vocab = member(*model, "vocab");
  if (!vocab) throw DataError(fmt::format("{}: no \"vocab\"", m));
  auto entries = vocab_entries(*vocab, m + ".vocab");

  // added_tokens: [{"id", "content", "special", "lstrip", "rstrip", "single_word", "normalized"}]
  std::vector<AddedToken> added;
  if (const Json* list = member(root, "added_tokens"); list && !list->is_null()) {
    if (!list->is_array()) throw DataError(fmt::format("{}: added_tokens: expected an array", name));
    StringMap<int64_t> in_vocab;
    for (const auto& [tok, id] : entries) in_vocab.emplace(tok, id);
    for (size_t i = 0; i < list->size(); ++i) {
      const Json& t = (*list)[i];
      const std::string where = fmt::format("{}: added_tokens[{}]", name, i);
      const Json* content = t.is_object() ? member(t, "content") : nullptr;
      const Json* id = t.is_object() ? member(t, "id") : nullptr;
      if (!content || !content->is_string() || !id || !id->is_number_integer())
        throw DataError(
            fmt::format("{}: expected an object with a string \"content\" and an integer \"id\"", where));
      for (const char* key : {"lstrip", "rstrip", "single_word"})
        if (flag(t, key, where))
          throw DataError(
              fmt::format("{}.{}: true is not supported (GPT-2's added tokens match literally)", where, key));
      const int64_t i64 = id_value(*id);
      const std::string c = content->get<std::string>();
      if (const auto it = in_vocab.find(c); it != in_vocab.end()) {
        if (it->second != i64)
          throw DataError(fmt::format("{}: {} has id {} but model.vocab gives it {}", where, json::quote(c),
                                      i64, it->second));
      } else {
        entries.emplace_back(c, i64);
        in_vocab.emplace(c, i64);
      }
      if (i64 < 0 || i64 > std::numeric_limits<int32_t>::max())
        throw DataError(fmt::format("{}: id {} is out of range", where, i64));
      const Json* special = member(t, "special");
      added.push_back(
          {c, static_cast<int32_t>(i64), special && special->is_boolean() && special->get<bool>()});
    }
  }

  Options options;
  if (const Json* n = member(root, "normalizer"); n && !n->is_null())
    throw DataError(fmt::format("{}: normalizer {} is not supported (GPT-2 has none)", name, n->dump()));
  {
    // Without the ByteLevel pre-tokenizer the model would see characters, not bytes.
    const std::string where = name + ": pre_tokenizer";
    const Json* p = member(root, "pre_tokenizer");
    const Json* type = p && p->is_object() ? member(*p, "type") : nullptr;
    if (!type || *type != "ByteLevel")
      throw DataError(fmt::format("{}: {} is not supported (GPT-2's is ByteLevel)", where,
                                  type ? type->dump()
                                  : p  ? p->dump()
                                       : "none"));
    options.add_prefix_space = flag(*p, "add_prefix_space", where);
    const Json* regex = member(*p, "use_regex");
    options.use_regex = !regex || regex->is_null() || flag(*p, "use_regex", where);
  }
  options.ignore_merges = flag(*model, "ignore_merges", m);
  options.fuse_unk = flag(*model, "fuse_unk", m);
  if (const Json* u = member(*model, "unk_token"); u && !u->is_null()) {
    if (!u->is_string())
      throw DataError(fmt::format("{}.unk_token: expected a string, got {}", m, u->dump()));
    options.unk_token = u->get<std::string>();
  }

  auto impl = std::make_unique<Impl>();
  impl->set_vocab(std::move(entries), m + ".vocab");
  const Json* merges = member(*model, "merges");
  if (!merges || !merges->is_array()) throw DataError(fmt::format("{}.merges: expected an array", m));
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& e = (*merges)[i];
    auto where = [&] { return fmt::format("{}.merges[{}]", m, i); };
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        throw DataError(
            fmt::format("{}: expected two symbols separated by one space, got {}", where(), json::quote(s)));
      impl->add_merge(s.substr(0, space), s.substr(space + 1), where);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      impl->add_merge(e[0].get<std::string>(), e[1].get<std::string>(), where);
    } else {
      throw DataError(fmt::format("{}: expected \"a b\" or [\"a\", \"b\"], got {}", where(), e.dump()));
    }
  }
  impl->merges.rehash(0);
  impl->set_added(std::move(added), name + ": added_tokens");
  impl->set_options(std::move(options), m);
  return Gpt2BpeTokenizer(std::move(impl));
}

Gpt2BpeTokenizer Gpt2BpeTokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt) {
  auto read = [](const std::string& path) {
    try {
      return io::read_file(path);
    } catch (const std::runtime_error& e) {
      throw DataError(e.what());
    }
  };
  return from_strings(read(vocab_json), read(merges_txt), vocab_json, merges_txt);
}

Gpt2BpeTokenizer Gpt2BpeTokenizer::from_tokenizer_json(const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const std::runtime_error& e) {
    throw DataError(e.what());
  }
  return from_tokenizer_json_string(text, path);
}

Gpt2BpeTokenizer Gpt2BpeTokenizer::from_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  std::error_code ec;
  if (fs::exists(d / "vocab.json", ec) && fs::exists(d / "merges.txt", ec))
    return from_files((d / "vocab.json").string(), (d / "merges.txt").string());
  if (fs::exists(d / "tokenizer.json", ec)) return from_tokenizer_json((d / "tokenizer.json").string());
  throw DataError(fmt::format(
      "{}: no GPT-2 tokenizer here (expected vocab.json and merges.txt, or tokenizer.json)", dir));
}

// ---- the checkpoint's metadata ----------------------------------------------------------------

void Gpt2BpeTokenizer::save(io::Metadata& md, const std::string& prefix) const {
  md[prefix + "gpt2_vocab"] = vocab_json();
  md[prefix + "gpt2_merges"] = merges_txt();
  if (impl_->added != impl_->default_added()) {
    Json list = Json::array();
    for (const AddedToken& t : impl_->added)
      list.push_back(Json{{"id", t.id}, {"content", t.content}, {"special", t.special}});
    md[prefix + "gpt2_added_tokens"] = list.dump();
  }
  if (impl_->options != Options{}) {
    const Options& o = impl_->options;
    md[prefix + "gpt2_options"] = Json{
        {"add_prefix_space", o.add_prefix_space},
        {"use_regex", o.use_regex},
        {"ignore_merges", o.ignore_merges},
        {"unk_token", o.unk_token},
        {"fuse_unk", o.fuse_unk}}.dump();
  }
}

Gpt2BpeTokenizer Gpt2BpeTokenizer::load(const io::Metadata& md, const std::string& prefix,
                                        const std::string& path) {
  auto get = [&](const std::string& key) -> const std::string& {
    const auto it = md.find(key);
    if (it == md.end())
      throw io::SafetensorsError(fmt::format(
          "checkpoint {}: __metadata__ has no \"{}\" (the gpt2 tokenizer's vocabulary)", path, key));
    return it->second;
  };
  const std::string vk = prefix + "gpt2_vocab", mk = prefix + "gpt2_merges",
                    ak = prefix + "gpt2_added_tokens", ok = prefix + "gpt2_options";
  const std::string& vocab = get(vk);
  const std::string& merges = get(mk);
  try {
    auto impl = std::make_unique<Impl>();
    const std::string vname = fmt::format("__metadata__ \"{}\"", vk);
    impl->set_vocab(vocab_entries(parse_json(vocab, vname), vname), vname);
    impl->parse_merges_txt(merges, fmt::format("__metadata__ \"{}\"", mk));
    std::vector<AddedToken> added = impl->default_added();
    if (const auto it = md.find(ak); it != md.end()) {
      const std::string where = fmt::format("__metadata__ \"{}\"", ak);
      const Json list = parse_json(it->second, where);
      added.clear();
      try {
        for (const Json& t : list.get_ref<const Json::array_t&>()) {
          const int64_t id = json::to_int64(t.at("id"));
          if (id < 0 || id > std::numeric_limits<int32_t>::max()) throw std::out_of_range("id out of range");
          added.push_back(
              {t.at("content").get<std::string>(), static_cast<int32_t>(id), t.at("special").get<bool>()});
        }
      } catch (const std::exception& e) {
        throw DataError(
            fmt::format("{}: expected [{{\"id\", \"content\", \"special\"}}, ...]: {}", where, e.what()));
      }
    }
    impl->set_added(std::move(added), fmt::format("__metadata__ \"{}\"", ak));
    Options options;
    if (const auto it = md.find(ok); it != md.end()) {
      const std::string where = fmt::format("__metadata__ \"{}\"", ok);
      const Json o = parse_json(it->second, where);
      try {
        options.add_prefix_space = o.at("add_prefix_space").get<bool>();
        options.use_regex = o.at("use_regex").get<bool>();
        options.ignore_merges = o.at("ignore_merges").get<bool>();
        options.unk_token = o.at("unk_token").get<std::string>();
        options.fuse_unk = o.at("fuse_unk").get<bool>();
      } catch (const std::exception& e) {
        throw DataError(fmt::format("{}: {}", where, e.what()));
      }
    }
    impl->set_options(std::move(options), fmt::format("__metadata__ \"{}\"", ok));
    return Gpt2BpeTokenizer(std::move(impl));
  } catch (const DataError& e) {
    throw io::SafetensorsError(fmt::format("checkpoint {}: {}", path, e.what()));
  }
}

// ---- files ------------------------------------------------------------------------------------

std::string Gpt2BpeTokenizer::vocab_json() const {
  std::string s = "{";
  for (size_t id = 0; id < impl_->tokens.size(); ++id)
    s += fmt::format("{}{}:{}", id ? "," : "", Json(impl_->tokens[id]).dump(), id);
  s += "}";
  return s;
}

std::string Gpt2BpeTokenizer::merges_txt() const {
  std::string s(kMergesHeader);
  s += '\n';
  for (const auto& [a, b] : impl_->merge_list) {
    s += a;
    s += ' ';
    s += b;
    s += '\n';
  }
  return s;
}

void Gpt2BpeTokenizer::write_files(const std::string& dir) const {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const Impl& m = *impl_;
  const Options& o = m.options;
  auto write = [&](const char* file, std::string_view text) {
    io::write_file_atomic((fs::path(dir) / file).string(), text);
  };

  // tokenizer.json, in the layout tokenizers 0.20 saves (merges as "a b" strings, which every
  // version reads; no symbol has a space).
  Json added = Json::array();
  for (const AddedToken& t : m.added)
    added.push_back(Json{{"id", t.id},
                         {"content", t.content},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", t.special}});
  const Json byte_level{{"type", "ByteLevel"},
                        {"add_prefix_space", o.add_prefix_space},
                        {"trim_offsets", true},
                        {"use_regex", o.use_regex}};
  Json merges = Json::array();
  for (const auto& [a, b] : m.merge_list) merges.push_back(a + " " + b);
  const Json model_options{{"type", "BPE"},
                           {"dropout", nullptr},
                           {"unk_token", o.unk_token.empty() ? Json(nullptr) : Json(o.unk_token)},
                           {"continuing_subword_prefix", nullptr},
                           {"end_of_word_suffix", nullptr},
                           {"fuse_unk", o.fuse_unk},
                           {"byte_fallback", false},
                           {"ignore_merges", o.ignore_merges}};
  std::string model = model_options.dump();
  model.pop_back();  // the vocabulary in id order, then the merges, as tokenizers writes them
  model += ",\"vocab\":" + vocab_json() + ",\"merges\":" + merges.dump() + "}";
  const std::string tokenizer_json = fmt::format(
      "{{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":{},\"normalizer\":null,"
      "\"pre_tokenizer\":{},\"post_processor\":{},\"decoder\":{},\"model\":{}}}\n",
      added.dump(), byte_level.dump(), byte_level.dump(), byte_level.dump(), model);

  // tokenizer_config.json and special_tokens_map.json as transformers 4.46's save_pretrained
  // writes them for a GPT2TokenizerFast, except clean_up_tokenization_spaces false (decode gives
  // the text back) and no model_max_length (the model's config has n_positions).
  Json decoder = Json::object();
  for (const AddedToken& t : m.added)
    decoder[std::to_string(t.id)] =
        Json{{"content", t.content}, {"lstrip", false},      {"normalized", false},
             {"rstrip", false},      {"single_word", false}, {"special", t.special}};
  const Json eot = m.eot_id >= 0 ? Json(std::string(kEndOfText)) : Json(nullptr);
  const Json unk = !o.unk_token.empty() ? Json(o.unk_token) : eot;
  const Json config{{"add_bos_token", false},
                    {"add_prefix_space", o.add_prefix_space},
                    {"added_tokens_decoder", decoder},
                    {"bos_token", eot},
                    {"clean_up_tokenization_spaces", false},
                    {"eos_token", eot},
                    {"errors", "replace"},
                    {"pad_token", nullptr},
                    {"tokenizer_class", "GPT2Tokenizer"},
                    {"unk_token", unk}};
  Json specials = Json::object();
  if (!eot.is_null()) specials["bos_token"] = specials["eos_token"] = eot;
  if (!unk.is_null()) specials["unk_token"] = unk;

  write("vocab.json", vocab_json());
  write("merges.txt", merges_txt());
  write("tokenizer.json", tokenizer_json);
  write("tokenizer_config.json", config.dump(2) + "\n");
  write("special_tokens_map.json", specials.dump(2) + "\n");
}

// ---- the Tokenizer interface ------------------------------------------------------------------

int64_t Gpt2BpeTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->tokens.size());
}

SpecialIds Gpt2BpeTokenizer::specials() const {
  SpecialIds s;
  s.bos = s.eos = impl_->eot_id;
  s.unk = impl_->unk_id;
  return s;
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(std::string_view text, UnknownTokens* unknown,
                                              const std::string& where) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  Impl::Scratch scratch;
  const bool refuse = impl_->missing_bytes && impl_->unk_id < 0;
  impl_->split_added(
      text,
      [&](std::string_view stretch) {
        if (refuse) impl_->refuse_missing_bytes(text, stretch, where);
        impl_->encode_stretch(stretch, scratch, out, unknown);
      },
      [&](int32_t id) { out.push_back(id); });
  return out;
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw std::out_of_range(fmt::format("gpt2 tokenizer: id {} outside [0, {})", id, vocab_size()));
    if (!impl_->special[id]) s += impl_->bytes[id];
  }
  return s;
}

std::string Gpt2BpeTokenizer::label(int32_t id) const {
  return printable_label(token_bytes(id));
}

const std::string& Gpt2BpeTokenizer::token(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw std::out_of_range(fmt::format("gpt2 tokenizer: id {} outside [0, {})", id, vocab_size()));
  return impl_->tokens[id];
}

const std::string& Gpt2BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw std::out_of_range(fmt::format("gpt2 tokenizer: id {} outside [0, {})", id, vocab_size()));
  return impl_->bytes[id];
}

int32_t Gpt2BpeTokenizer::token_id(std::string_view token) const {
  return impl_->find(token);
}

const std::vector<std::pair<std::string, std::string>>& Gpt2BpeTokenizer::merges() const {
  return impl_->merge_list;
}
const std::vector<Gpt2BpeTokenizer::AddedToken>& Gpt2BpeTokenizer::added_tokens() const {
  return impl_->added;
}
const Gpt2BpeTokenizer::Options& Gpt2BpeTokenizer::options() const {
  return impl_->options;
}

size_t Gpt2BpeTokenizer::cached_words() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->cache.size();
}

}  // namespace tg::nn
