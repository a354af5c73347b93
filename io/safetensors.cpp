#include "io/safetensors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>
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

// Reads a non-negative integer from a JSON value, naming `what` when it is not one.
uint64_t non_negative(const json::Value& v, const std::string& file, const std::string& what) {
  int64_t i = 0;
  try {
    i = v.as_int64();
  } catch (const std::exception& e) {
    bad(file, fmt::format("{}: {}", what, e.what()));
  }
  if (i < 0) bad(file, fmt::format("{} is negative ({})", what, i));
  return static_cast<uint64_t>(i);
}

Entry parse_entry(const std::string& file, const std::string& name, const json::Value& v) {
  const std::string where = fmt::format("tensor \"{}\"", name);
  if (name.empty()) bad(file, "a tensor has an empty name");
  if (!v.is_object()) bad(file, fmt::format("{}: expected an object, got {}", where, v.type_name()));
  for (const auto& [k, _] : v.as_object())
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      bad(file, fmt::format("{}: unknown field \"{}\"", where, k));
  const json::Value* dtype = v.find("dtype");
  const json::Value* shape = v.find("shape");
  const json::Value* offsets = v.find("data_offsets");
  if (!dtype || !shape || !offsets) bad(file, fmt::format("{}: needs dtype, shape and data_offsets", where));
  if (!dtype->is_string()) bad(file, fmt::format("{}: dtype must be a string", where));

  Entry e{name, nullptr, {}, 0, 0};
  for (const DType& d : kDTypes)
    if (dtype->as_string() == d.name) e.dtype = &d;
  if (!e.dtype)
    bad(file, fmt::format("{}: unsupported dtype \"{}\" (supported: F32, F16, BF16, F64)", where,
                          dtype->as_string()));

  if (!shape->is_array()) bad(file, fmt::format("{}: shape must be an array", where));
  // numel * size must fit in the file, so overflow past 2^62 is an error long before it wraps.
  uint64_t bytes = static_cast<uint64_t>(e.dtype->size);
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  for (const json::Value& d : shape->as_array()) {
    const uint64_t n = non_negative(d, file, where + " shape dimension");
    if (n != 0 && bytes > kLimit / n) bad(file, fmt::format("{}: shape {} overflows", where, shape->dump()));
    bytes *= n;
    e.shape.push_back(static_cast<int64_t>(n));
  }
  if (!offsets->is_array() || offsets->as_array().size() != 2)
    bad(file, fmt::format("{}: data_offsets must be [begin, end]", where));
  e.begin = non_negative(offsets->as_array()[0], file, where + " data_offsets begin");
  e.end = non_negative(offsets->as_array()[1], file, where + " data_offsets end");
  if (e.end < e.begin)
    bad(file, fmt::format("{}: data_offsets [{}, {}] end before begin", where, e.begin, e.end));
  if (e.end - e.begin != bytes)
    bad(file, fmt::format("{}: data_offsets [{}, {}] hold {} bytes but shape {} x {} needs {}", where,
                          e.begin, e.end, e.end - e.begin, shape_str(e.shape), e.dtype->name, bytes));
  return e;
}

}  // namespace

TensorFile parse_safetensors(std::span<const unsigned char> bytes, const std::string& file) {
  if (bytes.size() < 8)
    bad(file, fmt::format("file is {} bytes, too short for the 8-byte header length", bytes.size()));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes)
    bad(file, fmt::format("header length {} is over the {}-byte limit", n, kMaxHeaderBytes));
  if (n > bytes.size() - 8)
    bad(file, fmt::format("header length {} exceeds the file size ({} bytes after the length)", n,
                          bytes.size() - 8));

  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  json::Value header;
  try {
    header = json::parse(text, 8);
  } catch (const json::ParseError& e) {
    bad(file, fmt::format("header: {}", e.what()));
  }
  if (!header.is_object()) bad(file, fmt::format("header must be a JSON object, got {}", header.type_name()));

  TensorFile out;
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.as_object()) {
    if (name == "__metadata__") {
      if (!v.is_object()) bad(file, "__metadata__ must be an object of strings");
      for (const auto& [k, s] : v.as_object()) {
        if (!s.is_string())
          bad(file, fmt::format("__metadata__ value of \"{}\" must be a string, got {}", k, s.type_name()));
        out.metadata[k] = s.as_string();
      }
      continue;
    }
    entries.push_back(parse_entry(file, name, v));
  }

  // The tensors must tile [0, data size) exactly: sorted by offset, each starts where the last ended.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_size = bytes.size() - 8 - n;
  uint64_t at = 0;
  std::string prev = "the start of the data";
  for (const Entry& e : entries) {
    if (e.begin < at)
      bad(file, fmt::format("tensor \"{}\" data_offsets [{}, {}] overlap {} (ends at {})", e.name, e.begin,
                            e.end, prev, at));
    if (e.begin > at)
      bad(file,
          fmt::format("hole of {} bytes in the data before tensor \"{}\" (offsets [{}, {}], {} ends at {})",
                      e.begin - at, e.name, e.begin, e.end, prev, at));
    if (e.end > data_size)
      bad(file, fmt::format("tensor \"{}\" data_offsets [{}, {}] out of range: the data is {} bytes", e.name,
                            e.begin, e.end, data_size));
    at = e.end;
    prev = fmt::format("tensor \"{}\"", e.name);
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
  } catch (const std::runtime_error& e) {
    throw SafetensorsError(fmt::format("safetensors: {}", e.what()));
  }
  return parse_safetensors(std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()),
                           path);
}

std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata) {
  json::Value header = json::Value::object();
  if (!metadata.empty()) {
    json::Value md = json::Value::object();
    for (const auto& [k, v] : metadata) {
      if (!is_valid_utf8(k) || !is_valid_utf8(v))
        throw SafetensorsError(fmt::format("safetensors: metadata \"{}\" is not valid UTF-8", k));
      md.set(k, json::Value::string(v));
    }
    header.set("__metadata__", std::move(md));
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__" || !is_valid_utf8(name))
      throw SafetensorsError(fmt::format("safetensors: invalid tensor name \"{}\"", name));
    if (!seen.insert(name).second)
      throw SafetensorsError(fmt::format("safetensors: duplicate tensor name \"{}\"", name));
    json::Value shape = json::Value::array();
    for (int64_t d : t.shape()) shape.push(json::Value::integer(d));
    const uint64_t size = static_cast<uint64_t>(t.numel()) * 4;
    json::Value entry = json::Value::object();
    entry.set("dtype", json::Value::string("F32"));
    entry.set("shape", std::move(shape));
    entry.set("data_offsets",
              json::Value::array({json::Value::integer(static_cast<int64_t>(offset)),
                                  json::Value::integer(static_cast<int64_t>(offset + size))}));
    header.set(name, std::move(entry));
    offset += size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  std::string out(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  out += text;
  out.reserve(out.size() + offset);
  for (const auto& [name, t] : tensors)
    out.append(reinterpret_cast<const char*>(t.data()), static_cast<size_t>(t.numel()) * 4);
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

}  // namespace tg::io
