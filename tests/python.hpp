// The Python interpreter the tests run scripts with (PyTorch parity, numpy/torch interop).
//
// /usr/bin/python3 by default: Debian's python3-torch is importable only there. TAPEGRAD_TEST_PYTHON
// replaces it with another interpreter command, e.g. a virtualenv with PyTorch 2.x, or
// "/usr/bin/python3 -S" (no site packages) to see what a machine without numpy and torch reports.
#pragma once

#include <cstdlib>
#include <map>
#include <string>

namespace tg::testing {

inline std::string python() {
  const char* p = std::getenv("TAPEGRAD_TEST_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

// Whether python() can import `module` (asked once per module and process).
inline bool python_can_import(const std::string& module) {
  static std::map<std::string, bool> cache;
  auto it = cache.find(module);
  if (it == cache.end())
    it = cache
             .emplace(module,
                      std::system((python() + " -c 'import " + module + "' >/dev/null 2>&1").c_str()) == 0)
             .first;
  return it->second;
}

// The reason a case skips for want of a module.
inline std::string python_lacks(const std::string& module, const std::string& debian_package) {
  return python() + " cannot import " + module + " (apt-get install " + debian_package +
         ", or set TAPEGRAD_TEST_PYTHON)";
}

// The Hugging Face venv's interpreter (tools/setup_hf.sh: transformers and tokenizers over Debian's
// torch): TAPEGRAD_HF_PYTHON, else ~/.cache/tapegrad-hf/bin/python.
inline std::string hf_python() {
  if (const char* p = std::getenv("TAPEGRAD_HF_PYTHON"); p && *p) return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/tapegrad-hf/bin/python";
}

// Whether hf_python() can import `module` (asked once per module and process).
inline bool hf_python_can_import(const std::string& module) {
  static std::map<std::string, bool> cache;
  auto it = cache.find(module);
  if (it == cache.end())
    it = cache
             .emplace(module,
                      std::system(
                          ("'" + hf_python() + "' -c 'import " + module + "' >/dev/null 2>&1").c_str()) == 0)
             .first;
  return it->second;
}

inline std::string hf_python_lacks(const std::string& module) {
  return hf_python() + " cannot import " + module + " (run tools/setup_hf.sh, or set TAPEGRAD_HF_PYTHON)";
}

}  // namespace tg::testing
