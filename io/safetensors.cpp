#include "io/safetensors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <new>
#include <utility>
#include <vector>

#include "io/file.hpp"
#include "io/json.hpp"
#include "io/utf8.hpp"

namespace tg::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; so is this code");

const Tensor* TensorFile::find(std::string_view name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

namespace {

[[noreturn]] void bad(const std::string& file, const std::string& problem) {
  throw SafetensorsError(fmt::format("safetensors: {}: {}", file, problem));
}

struct DType {
  const char* name;
  int size;
};
constexpr DType kDTypes[] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}};

// IEEE half -> float: rebias the exponent (15 -> 127); subnormal halves become normal floats.
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float f = std::ldexp(static_cast<float>(man), -24);
    return sign ? -f : f;
  }
  const uint32_t bits =
      exp == 0x1F ? (sign | 0x7F800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
  return std::bit_cast<float>(bits);
}

void convert(const unsigned char* src, const DType& dt, float* dst, int64_t n) {
  const std::string_view name = dt.name;
  if (name == "F32") {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else if (name == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, src + 8 * i, 8);
      dst[i] = static_cast<float>(d);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = name == "BF16" ? std::bit_cast<float>(static_cast<uint32_t>(h) << 16) : half_to_float(h);
    }
  }
}

struct Entry {
  std::string name;
  const DType* dtype;
  Shape shape;
  uint64_t begin, end;
};

// A shape for a message: at most 8 dimensions written out (a hostile one can have millions).
std::string shape_summary(const std::vector<uint64_t>& dims) {
  constexpr size_t kShown = 8;
  std::string s = "[";
  for (size_t i = 0; i < dims.size() && i < kShown; ++i) s += fmt::format("{}{}", i ? ", " : "", dims[i]);
  if (dims.size() > kShown) s += fmt::format(", ... ({} dimensions)", dims.size());
  return s + "]";
}

// Reads the header as it is parsed (json::sax_parse), checking its structure on the way instead of
// building a document: memory and time linear in the header (a 100 MB header of a million tensors
// never becomes a million nested JSON objects), and nothing nests deeper than the schema's three
// levels (header object, tensor object, shape or offsets array): a fourth is refused at its bracket.
//   {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, "__metadata__": {"k": "v"}}
class HeaderReader {
 public:
  HeaderReader(const std::string& file, const json::Cursor& cursor, Metadata& metadata)
      : file_(file), cursor_(cursor), metadata_(metadata) {}

  std::vector<Entry> take_entries() { return std::move(entries_); }

  void start_object() {
    switch (state_) {
      case State::start:
        state_ = State::top;
        return;
      case State::top_value:
        if (key_ == "__metadata__") {
          state_ = State::metadata;
        } else {
          state_ = State::tensor;
          tensor_.seen = 0;  // clear() keeps the buffers for the next tensor
          tensor_.dtype.clear();
          tensor_.dims.clear();
          tensor_.offsets.clear();
        }
        return;
      default:
        unexpected("object");
    }
  }
  void start_array() {
    if (state_ == State::field_value && field_ == kShape) {
      state_ = State::shape;
    } else if (state_ == State::field_value && field_ == kOffsets) {
      state_ = State::offsets;
    } else {
      unexpected("array");
    }
  }
  void value(json::Json&& v) {
    switch (state_) {
      case State::metadata_value:
        if (!v.is_string()) unexpected(v.type_name());
        metadata_value_->second = std::move(v.get_ref<std::string&>());
        state_ = State::metadata;
        return;
      case State::field_value:
        if (field_ != kDType || !v.is_string()) unexpected(v.type_name());
        tensor_.dtype = std::move(v.get_ref<std::string&>());
        state_ = State::tensor;
        return;
      case State::shape:
        tensor_.dims.push_back(non_negative(v, "shape dimension"));
        return;
      case State::offsets:
        if (tensor_.offsets.size() == 2) bad(file_, where() + ": data_offsets must be [begin, end]");
        tensor_.offsets.push_back(
            non_negative(v, tensor_.offsets.empty() ? "data_offsets begin" : "data_offsets end"));
        return;
      default:
        unexpected(v.type_name());
    }
  }
  void key(std::string& k) {
    switch (state_) {
      case State::top:
        if (k == "__metadata__" && std::exchange(seen_metadata_, true)) duplicate(k);
        if (k.empty()) bad(file_, "a tensor has an empty name");
        key_ = std::move(k);
        state_ = State::top_value;
        return;
      case State::metadata: {
        auto [it, inserted] = metadata_.emplace(std::move(k), std::string());
        if (!inserted) duplicate(it->first);
        metadata_value_ = it;
        state_ = State::metadata_value;
        return;
      }
      case State::tensor: {
        int f = -1;
        for (int i = 0; i < 3; ++i)
          if (k == kFields[i]) f = i;
        if (f < 0) bad(file_, fmt::format("{}: unknown field \"{}\"", where(), k));
        if (tensor_.seen & (1u << f)) duplicate(k);
        tensor_.seen |= 1u << f;
        field_ = f;
        state_ = State::field_value;
        return;
      }
      default:  // not reached: nlohmann only reports keys inside objects
        bad(file_, "header: unexpected key");
    }
  }
  void end_array() {
    if (state_ == State::offsets && tensor_.offsets.size() != 2)
      bad(file_, where() + ": data_offsets must be [begin, end]");
    state_ = State::tensor;
  }
  void end_object() {
    if (state_ == State::tensor) entries_.push_back(finish_tensor());
    state_ = state_ == State::top ? State::done : State::top;
  }

 private:
  enum class State {
    start,
    top,
    top_value,
    metadata,
    metadata_value,
    tensor,
    field_value,
    shape,
    offsets,
    done
  };
  static constexpr const char* kFields[] = {"dtype", "shape", "data_offsets"};
  static constexpr int kDType = 0, kShape = 1, kOffsets = 2;

  struct Tensor {  // the fields of the tensor being read
    unsigned seen = 0;
    std::string dtype;
    std::vector<uint64_t> dims, offsets;
  };

  std::string where() const { return fmt::format("tensor \"{}\"", key_); }

  [[noreturn]] void duplicate(const std::string& k) const {
    bad(file_,
        fmt::format("header: invalid JSON: duplicate key {} at byte {}", json::quote(k), cursor_.last()));
  }

  // A value of the wrong type where the schema expects something else (type: nlohmann's name).
  [[noreturn]] void unexpected(const char* type) const {
    switch (state_) {
      case State::start:
        bad(file_, fmt::format("header must be a JSON object, got {}", type));
      case State::top_value:
        if (key_ == "__metadata__") bad(file_, "__metadata__ must be an object of strings");
        bad(file_, fmt::format("{}: expected an object, got {}", where(), type));
      case State::metadata_value:
        bad(file_, fmt::format("__metadata__ value of {} must be a string, got {}",
                               json::quote(metadata_value_->first), type));
      case State::field_value:
        bad(file_, field_ == kDType   ? where() + ": dtype must be a string"
                   : field_ == kShape ? where() + ": shape must be an array"
                                      : where() + ": data_offsets must be [begin, end]");
      case State::shape:
        bad(file_, fmt::format("{} shape dimension: json: expected an integer, got {}", where(), type));
      case State::offsets:
        bad(file_, fmt::format("{} data_offsets: json: expected an integer, got {}", where(), type));
      default:
        bad(file_, fmt::format("header: unexpected {}", type));
    }
  }

  // A non-negative integer, naming `what` when it is not one.
  uint64_t non_negative(const json::Json& v, const char* what) const {
    int64_t i = 0;
    try {
      i = json::to_int64(v);
    } catch (const std::runtime_error& e) {
      bad(file_, fmt::format("{} {}: {}", where(), what, e.what()));
    }
    if (i < 0) bad(file_, fmt::format("{} {} is negative ({})", where(), what, i));
    return static_cast<uint64_t>(i);
  }

  Entry finish_tensor() {
    if (tensor_.seen != 7u) bad(file_, where() + ": needs dtype, shape and data_offsets");
    Entry e{{}, nullptr, {}, tensor_.offsets[0], tensor_.offsets[1]};
    for (const DType& d : kDTypes)
      if (tensor_.dtype == d.name) e.dtype = &d;
    if (!e.dtype)
      bad(file_, fmt::format("{}: unsupported dtype {} (supported: F32, F16, BF16, F64)", where(),
                             json::quote(tensor_.dtype)));
    // numel * size must fit in the file, so overflow past 2^62 is an error long before it wraps.
    uint64_t bytes = static_cast<uint64_t>(e.dtype->size);
    constexpr uint64_t kLimit = uint64_t{1} << 62;
    for (const uint64_t n : tensor_.dims) {
      if (n != 0 && bytes > kLimit / n)
        bad(file_, fmt::format("{}: shape {} overflows", where(), shape_summary(tensor_.dims)));
      bytes *= n;
    }
    e.shape.assign(tensor_.dims.begin(), tensor_.dims.end());
    if (e.end < e.begin)
      bad(file_, fmt::format("{}: data_offsets [{}, {}] end before begin", where(), e.begin, e.end));
    if (e.end - e.begin != bytes)
      bad(file_,
          fmt::format("{}: data_offsets [{}, {}] hold {} bytes but shape {} x {} needs {}", where(), e.begin,
                      e.end, e.end - e.begin, shape_summary(tensor_.dims), e.dtype->name, bytes));
    e.name = std::move(key_);
    return e;
  }

  const std::string& file_;
  const json::Cursor& cursor_;
  Metadata& metadata_;
  State state_ = State::start;
  std::string key_;  // the current top-level key: a tensor name or "__metadata__"
  int field_ = -1;
  Tensor tensor_;
  Metadata::iterator metadata_value_;
  bool seen_metadata_ = false;
  std::vector<Entry> entries_;
};

}  // namespace

TensorFile parse_safetensors(std::span<const unsigned char> bytes, const std::string& file) {
  if (bytes.size() < 8)
    bad(file, fmt::format("file is {} bytes, too short for the 8-byte header length", bytes.size()));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  // A file of another kind (a text, a PyTorch .bin) has a nonsense length here: say so, rather than
  // leave the reader with only a number. A safetensors header is a JSON object, so it opens with
  // '{' (the format requires it as the header's first byte).
  const char* const not_safetensors =
      bytes.size() > 8 && bytes[8] != '{'
          ? "; this is not a safetensors file (byte 8 starts its JSON header, and is not '{')"
          : "";
  if (n > kMaxHeaderBytes)
    bad(file,
        fmt::format("header length {} is over the {}-byte limit{}", n, kMaxHeaderBytes, not_safetensors));
  if (n > bytes.size() - 8)
    bad(file, fmt::format("header length {} exceeds the file size ({} bytes after the length){}", n,
                          bytes.size() - 8, not_safetensors));

  TensorFile out;
  json::Cursor cursor(std::string_view(reinterpret_cast<const char*>(bytes.data() + 8), n));
  HeaderReader reader(file, cursor, out.metadata);
  try {
    json::sax_parse(cursor, reader);
  } catch (const json::ParseError& e) {
    bad(file, fmt::format("header: {}", e.what()));
  }
  std::vector<Entry> entries = reader.take_entries();

  // Duplicate tensor names: adjacent once sorted by name (O(n log n), no copies of the names).
  std::vector<const Entry*> by_name(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) by_name[i] = &entries[i];
  std::sort(by_name.begin(), by_name.end(), [](const Entry* a, const Entry* b) { return a->name < b->name; });
  for (size_t i = 1; i < by_name.size(); ++i)
    if (by_name[i]->name == by_name[i - 1]->name)
      bad(file, fmt::format("header: invalid JSON: duplicate key {} (two tensors of that name)",
                            json::quote(by_name[i]->name)));

  // The tensors must tile [0, data size) exactly: sorted by offset, each starts where the last ended.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_size = bytes.size() - 8 - n;
  uint64_t at = 0;
  const Entry* prev = nullptr;
  auto previous = [&] { return prev ? fmt::format("tensor \"{}\"", prev->name) : "the start of the data"; };
  for (const Entry& e : entries) {
    if (e.begin < at)
      bad(file, fmt::format("tensor \"{}\" data_offsets [{}, {}] overlap {} (ends at {})", e.name, e.begin,
                            e.end, previous(), at));
    if (e.begin > at)
      bad(file,
          fmt::format("hole of {} bytes in the data before tensor \"{}\" (offsets [{}, {}], {} ends at {})",
                      e.begin - at, e.name, e.begin, e.end, previous(), at));
    if (e.end > data_size)
      bad(file, fmt::format("tensor \"{}\" data_offsets [{}, {}] out of range: the data is {} bytes", e.name,
                            e.begin, e.end, data_size));
    at = e.end;
    prev = &e;
  }
  if (at != data_size)
    bad(file, fmt::format("{} trailing bytes after the last tensor (data is {} bytes, tensors cover {})",
                          data_size - at, data_size, at));

  const unsigned char* data = bytes.data() + 8 + n;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape);
    convert(data + e.begin, *e.dtype, t.data(), t.numel());
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

TensorFile read_safetensors(const std::string& path) {
  std::string bytes;
  try {
    bytes = read_file(path);
    return parse_safetensors(std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()),
                             path);
  } catch (const SafetensorsError&) {
    throw;
  } catch (const std::bad_alloc&) {
    // The file's bytes, then as much again for its tensors: say so rather than "std::bad_alloc".
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    bytes = std::string();
    throw SafetensorsError(
        fmt::format("safetensors: {}: out of memory loading it ({:.1f} MB on disk, about "
                    "twice that in memory while it loads)",
                    path, ec ? 0.0 : static_cast<double>(size) / 1e6));
  } catch (const std::runtime_error& e) {
    throw SafetensorsError(fmt::format("safetensors: {}", e.what()));
  }
}

namespace {

// The 8-byte header length and the header, padded with spaces so the data starts 8-byte aligned;
// `data_size` receives the size of the data that follows it.
std::string header_bytes(const NamedTensors& tensors, const Metadata& metadata, uint64_t& data_size) {
  json::Json header = json::Json::object();
  if (!metadata.empty()) {
    json::Json& md = header["__metadata__"] = json::Json::object();
    for (const auto& [k, v] : metadata) {
      if (!is_valid_utf8(k) || !is_valid_utf8(v))
        throw SafetensorsError(fmt::format("safetensors: metadata \"{}\" is not valid UTF-8", k));
      md[k] = v;
    }
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__" || !is_valid_utf8(name))
      throw SafetensorsError(fmt::format("safetensors: invalid tensor name \"{}\"", name));
    const uint64_t size = static_cast<uint64_t>(t.numel()) * 4;
    const auto [it, inserted] = header.emplace(
        name, json::Json{{"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {offset, offset + size}}});
    if (!inserted) throw SafetensorsError(fmt::format("safetensors: duplicate tensor name \"{}\"", name));
    offset += size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  data_size = offset;
  return out + text;
}

std::string_view data_of(const Tensor& t) {
  return {reinterpret_cast<const char*>(t.data()), static_cast<size_t>(t.numel()) * 4};
}

}  // namespace

std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata) {
  uint64_t data_size = 0;
  std::string out = header_bytes(tensors, metadata, data_size);
  out.reserve(out.size() + data_size);
  for (const auto& [name, t] : tensors) out += data_of(t);
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  // Written from the tensors themselves: no copy of the file in memory.
  uint64_t data_size = 0;
  const std::string header = header_bytes(tensors, metadata, data_size);
  std::vector<std::string_view> parts = {header};
  for (const auto& [name, t] : tensors) parts.push_back(data_of(t));
  write_file_atomic(path, parts);
}

void parse_metadata(const Metadata& md, const std::string& path, const char* key, const char* missing_hint,
                    const std::function<void(const std::string&)>& fn) {
  const auto it = md.find(key);
  if (it == md.end())
    throw SafetensorsError(
        fmt::format("checkpoint {}: __metadata__ has no \"{}\" ({})", path, key, missing_hint));
  try {
    fn(it->second);
  } catch (const SafetensorsError&) {
    throw;
  } catch (const std::exception& e) {
    throw SafetensorsError(fmt::format("checkpoint {}: __metadata__ \"{}\": {}", path, key, e.what()));
  }
}

}  // namespace tg::io
