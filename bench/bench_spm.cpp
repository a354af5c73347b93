// bench_spm: SentencePiece (nn/tokenizers/spm.*) training time and encoding speed on a text file.
//
//   bench_spm FILE [VOCAB [TRAIN_BYTES...]]
//
// For BPE and unigram, lm layout: trains a model of VOCAB pieces (default 4000) on the first
// TRAIN_BYTES of FILE (default 1000000 and the whole file; each time printed), then encodes the
// whole file with the model trained on the first size three times (the median and each run in MB/s,
// with omp_get_max_threads() threads; the CPU time of each run beside it, which says more than the
// wall time on a machine others load), once with the library called on each line
// (encode_by_library, the specification, one thread), and checks that both give the same ids.
// A text of 10 MB with no download (Debian's copyright files; the README's licence text is 237 KB):
//   find /usr/share/doc -name copyright -type f | sort | xargs cat | head -c 10000000 > ten.txt
//   OMP_NUM_THREADS=2 build/bench/bench_spm ten.txt
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "io/file.hpp"
#include "nn/tokenizers/spm.hpp"

namespace {

// The CPU time of the process (all threads): on a machine others load, wall time says little.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tg::nn;
  if (argc < 2) {
    fmt::print(stderr, "usage: bench_spm FILE [VOCAB [TRAIN_BYTES...]]\n");
    return 2;
  }
  const std::string text = tg::io::read_file(argv[1]);
  const int64_t vocab = argc > 2 ? std::atoll(argv[2]) : 4000;
  std::vector<size_t> sizes;
  for (int i = 3; i < argc; ++i) sizes.push_back(static_cast<size_t>(std::atoll(argv[i])));
  if (sizes.empty()) sizes = {1000000, text.size()};
  fmt::print("bench_spm: {} ({:.2f} MB), vocab {}, {} threads, {}\n", argv[1], text.size() / 1e6, vocab,
             omp_get_max_threads(), cpu_name());
  for (const SpmType type : {SpmType::bpe, SpmType::unigram}) {
    const char* name = type == SpmType::bpe ? "bpe" : "unigram";
    std::vector<SpmTokenizer> models;
    for (const size_t n : sizes) {
      const std::string_view part[] = {std::string_view(text).substr(0, std::min(n, text.size()))};
      const auto t0 = std::chrono::steady_clock::now();
      models.push_back(SpmTokenizer::train(part, {type, vocab, SpmLayout::lm, 0}));
      fmt::print("{} train on {:.2f} MB: {:.2f} s\n", name, part[0].size() / 1e6, seconds_since(t0));
    }
    const SpmTokenizer& tok = models.front();
    std::vector<double> runs, cpu;
    std::vector<int32_t> ids;
    for (int r = 0; r < 3; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_seconds();
      ids = tok.encode(text);
      runs.push_back(seconds_since(t0));
      cpu.push_back(cpu_seconds() - c0);
    }
    std::vector<double> sorted = runs;
    std::sort(sorted.begin(), sorted.end());
    const double mb = text.size() / 1e6;
    fmt::print(
        "{} encode {:.2f} MB: median {:.3f} s = {:.1f} MB/s (runs {:.3f} {:.3f} {:.3f} s; CPU time {:.3f} "
        "{:.3f} {:.3f} s), {} tokens, {:.2f} bytes per token\n",
        name, mb, sorted[1], mb / sorted[1], runs[0], runs[1], runs[2], cpu[0], cpu[1], cpu[2], ids.size(),
        static_cast<double>(text.size()) / static_cast<double>(ids.size()));
    const auto t0 = std::chrono::steady_clock::now();
    const auto reference = tok.encode_by_library(text);
    const double t = seconds_since(t0);
    fmt::print("{} encode_by_library (the library on each line): {:.3f} s = {:.1f} MB/s; same ids: {}\n",
               name, t, mb / t, reference == ids ? "yes" : "NO");
    if (reference != ids) return 1;
  }
  return 0;
}
