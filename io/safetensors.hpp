// safetensors files: named tensors plus string metadata, the format PyTorch users exchange.
//
// Layout (https://github.com/huggingface/safetensors):
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   a UTF-8 JSON object: {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
//             ..., "__metadata__": {"<key>": "<string>", ...}}  (may be padded with trailing spaces)
//   the data  tensors back to back, row-major little-endian; offsets are relative to the data start,
//             cover it exactly (no holes, no overlap) and e - b = numel * dtype size
//
// The reader validates all of that and throws SafetensorsError naming the file and the problem;
// nothing is returned from a file that fails any check. Supported dtypes: F32, and F16, BF16, F64
// converted to float32 on load. The writer writes F32 only, pads the header to 8 bytes with
// spaces like the reference writer, and writes atomically (io/file.hpp write_file_atomic).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "autograd/tensor.hpp"

namespace tg::io {

struct SafetensorsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Metadata = std::map<std::string, std::string>;

struct TensorFile {
  NamedTensors tensors;  // in data order (sorted by offset), float32
  Metadata metadata;
  const Tensor* find(std::string_view name) const;  // nullptr if absent
};

// Headers above this are refused (the reference implementation's limit).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

TensorFile read_safetensors(const std::string& path);
// Parses an in-memory file; `name` is used in error messages.
TensorFile parse_safetensors(std::span<const unsigned char> bytes, const std::string& name);

// The file's bytes (header + data) for these tensors, in the given order. Names must be unique,
// non-empty and not "__metadata__".
std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata = {});
void write_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});

// Reads metadata `key` of checkpoint `path` and hands its value to `fn`. A missing key and any
// exception from `fn` become one SafetensorsError naming the file and the key; `missing_hint` says,
// after a missing key, what the file might be instead.
void parse_metadata(const Metadata& md, const std::string& path, const char* key, const char* missing_hint,
                    const std::function<void(const std::string&)>& fn);

}  // namespace tg::io
