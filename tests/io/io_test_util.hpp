// Helpers for the I/O tests: scratch files under a per-process temporary directory.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace tg::testing {

inline std::filesystem::path scratch_path() {
  return std::filesystem::temp_directory_path() / fmt::format("tapegrad_io_test_{}", ::getpid());
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

}  // namespace tg::testing
