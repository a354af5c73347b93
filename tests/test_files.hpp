// Helpers for the tests that read and write files: scratch files under a per-process temporary
// directory, and the tiny model, batch and checkpoint metadata of the checkpoint tests
// (tests/nn/test_checkpoint.cpp, tests/apps/test_faults.cpp).
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.hpp"
#include "nn/data.hpp"
#include "nn/family/transformer_family.hpp"
#include "nn/transformer.hpp"
#include "tests/test_util.hpp"

namespace tg::testing {

inline std::filesystem::path scratch_path() {
  return std::filesystem::temp_directory_path() / fmt::format("tapegrad_test_{}", ::getpid());
}

inline std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::create_directories(scratch_path());
    return scratch_path();
  }();
  return dir;
}

// Removes the scratch directory when the test program exits.
inline const struct ScratchCleanup {
  ~ScratchCleanup() {
    std::error_code ec;
    std::filesystem::remove_all(scratch_path(), ec);
  }
} scratch_cleanup;

inline std::string scratch(const std::string& name) {
  return (scratch_dir() / name).string();
}

inline std::string write_bytes(const std::string& name, std::string_view bytes) {
  const std::string path = scratch(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A safetensors file from a header text and raw data bytes.
inline std::string safetensors_bytes(std::string_view header, std::string_view data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out += data;
  return out;
}

// A model small enough to save and load in no time: d_model 8, vocabularies 7 / 6, one layer each.
inline nn::TransformerConfig tiny_config() {
  nn::TransformerConfig c;
  c.src_vocab = 7, c.tgt_vocab = 6;  // the vocabularies of tiny_metadata()
  c.d_model = 8, c.heads = 2, c.d_ff = 16, c.enc_layers = c.dec_layers = 1;
  c.dropout = 0.0f, c.max_len = 32;
  return c;
}

// A two-pair batch for tiny_config(), to give an optimizer some state.
inline nn::Batch tiny_batch() {
  const std::vector<nn::EncodedPair> pairs = {{{4, 5, 6}, {4, 5}}, {{5}, {5, 4, 4}}};
  const std::vector<int64_t> idx = {0, 1};
  return nn::make_batch(pairs, idx);
}

// Valid checkpoint metadata for tiny_config() with word vocabularies, for tests that change a key.
inline io::Metadata tiny_metadata() {
  return {{"format", nn::kCheckpointFormat},
          {"config", nn::config_to_json(tiny_config())},
          {"tokenizer", "word"},
          {"src_vocab", R"(["<pad>","<bos>","<eos>","<unk>","a","b","c"])"},
          {"tgt_vocab", R"(["<pad>","<bos>","<eos>","<unk>","x","y"])"}};
}

}  // namespace tg::testing
