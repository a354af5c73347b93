// bench_load: how the time to load a checkpoint grows with its header, through what
// `translate eval --model FILE` does with the file's bytes: parse_safetensors (the header and the
// data), parse_checkpoint (metadata, weights against the config), a model built from the config
// and load_weights. Hostile headers of n keys must cost O(n) (the hand-written JSON parser this
// replaced was O(n^2): 160,000 keys took 37 s); the time per key printed for n = 10k, 100k, 1M
// shows it. A benchmark: it measures and prints, it asserts nothing. Its command line follows the
// programs' conventions (apps/cli.hpp): a bad one exits with status 2, naming the option.
//
//   ninja -C build bench/bench_load
//   build/bench/bench_load                        # 10k, 100k, 1M keys and tensors, medians of 5 (~1 min)
//   build/bench/bench_load --sizes 10000,160000 --reps 3
//   build/bench/bench_load --write DIR            # also write the files, e.g. for translate eval --model
//   build/bench/bench_load --compare-json         # + the same headers through simdjson's DOM, if built with
//   it
//
// Cases (each a valid tiny checkpoint, d_model 8, plus n of something):
//   keys     n extra metadata keys "k<i>": "v": loads (parse_checkpoint keeps them as `extra`)
//   tensors  n extra zero-size tensors "extra.<i>": parses, then load_weights refuses them
//   real     no extras: the header of a realistic model (d_model 64, 6+6 layers, vocabularies of
//            16000 tokens in the metadata), for scale
// --compare-json times the header text alone through tg::json::parse (nlohmann, strict, building
// the document) and simdjson 3.0's DOM plus a walk refusing duplicate keys (what a loader on it
// would have to add), to back the choice of library in io/json.hpp.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "apps/cli.hpp"
#include "bench/timing.hpp"
#include "io/json.hpp"
#include "io/safetensors.hpp"
#include "nn/family/transformer_family.hpp"
#include "nn/tokenizers/vocab_tokenizer.hpp"
#include "nn/transformer.hpp"

#ifdef TG_HAVE_SIMDJSON
#include <simdjson.h>

#endif

namespace {

using namespace tg;
using namespace tg::nn;
using bench::seconds_since;
using clock_type = std::chrono::steady_clock;

// The first line of /proc/cpuinfo's "<key> : value" for the first CPU.
std::string cpuinfo(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(key) && line.find(':') != std::string::npos) {
      const std::string v = line.substr(line.find(':') + 1);
      return v.substr(v.find_first_not_of(' '));
    }
  return "?";
}
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five;
  in >> one >> five;
  return fmt::format("{} (1 min), {} (5 min)", one, five);
}

TransformerConfig config(int64_t d_model, int64_t layers, int64_t vocab) {
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = vocab;
  c.d_model = d_model;
  c.heads = 2;
  c.enc_layers = c.dec_layers = layers;
  c.d_ff = 4 * d_model;
  c.dropout = 0.0f;
  c.max_len = 64;
  return c;
}

CheckpointInfo info_for(const TransformerConfig& c) {
  CheckpointInfo info;
  info.config = c;
  std::vector<std::string> tokens = {"<pad>", "<bos>", "<eos>", "<unk>"};
  for (int64_t i = 4; i < c.src_vocab; ++i) tokens.push_back(fmt::format("tok{}", i));
  info.src = info.tgt = std::make_shared<VocabTokenizer>(TokenizerKind::word, Vocab::from_tokens(tokens));
  return info;
}

// A checkpoint's bytes, with `extra_keys` more metadata keys and `extra_tensors` more zero-size
// tensors, written by save_checkpoint's own writer.
std::string checkpoint_bytes(const TransformerConfig& c, int64_t extra_keys, int64_t extra_tensors) {
  const Transformer model(c, 1);
  const std::string tmp = (std::filesystem::temp_directory_path() / "bench_load_tmp.safetensors").string();
  save_checkpoint(tmp, model, info_for(c));
  io::TensorFile f = io::read_safetensors(tmp);
  std::filesystem::remove(tmp);
  for (int64_t i = 0; i < extra_keys; ++i) f.metadata.emplace(fmt::format("k{}", i), "v");
  for (int64_t i = 0; i < extra_tensors; ++i)
    f.tensors.emplace_back(fmt::format("extra.{}", i), Tensor::zeros({0}));
  return io::serialize_safetensors(f.tensors, f.metadata);
}

std::string_view header_of(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return std::string_view(bytes).substr(8, n);
}

struct Load {
  double parse = 0, checkpoint = 0, weights = 0;
  std::string outcome;
};

// What translate eval does with the bytes; stops at the first error, as it does.
Load load_once(const std::string& bytes) {
  Load r;
  double* stage = &r.parse;  // the stage being timed
  auto t0 = clock_type::now();
  auto next = [&](double* s) {
    *stage = seconds_since(t0);
    stage = s;
    t0 = clock_type::now();
  };
  try {
    io::TensorFile f = io::parse_safetensors(
        std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()), "bench.safetensors");
    next(&r.checkpoint);
    const Checkpoint ck = parse_checkpoint(std::move(f), "bench.safetensors");
    next(&r.weights);
    Transformer model(ck.info.config, 0);
    load_weights(model, ck.file, "bench.safetensors");
    next(&r.weights);
    r.outcome = "loaded";
  } catch (const io::SafetensorsError& e) {
    *stage = seconds_since(t0);
    const std::string what = e.what();
    r.outcome =
        "refused: " + what.substr(0, std::min<size_t>(what.size(), 60)) + (what.size() > 60 ? "..." : "");
  }
  return r;
}

#ifdef TG_HAVE_SIMDJSON
// simdjson's DOM keeps duplicate keys: each object's keys sorted and compared with their neighbours
// (no allocation beyond one reused buffer per depth).
void check_duplicates(simdjson::dom::element e, std::vector<std::vector<std::string_view>>& keys,
                      size_t depth) {
  if (e.is_array()) {
    for (simdjson::dom::element x : e.get_array()) check_duplicates(x, keys, depth + 1);
  } else if (e.is_object()) {
    if (keys.size() <= depth) keys.resize(depth + 1);
    keys[depth].clear();
    for (simdjson::dom::key_value_pair kv : e.get_object()) {
      keys[depth].push_back(kv.key);
      check_duplicates(kv.value, keys, depth + 1);
    }
    std::sort(keys[depth].begin(), keys[depth].end());
    if (std::adjacent_find(keys[depth].begin(), keys[depth].end()) != keys[depth].end())
      throw std::runtime_error("simdjson: duplicate key");
  }
}
// Median seconds to parse `text` with simdjson's DOM (a padded copy first: simdjson reads up to 64
// bytes past the end), with or without the duplicate-key walk.
double simdjson_seconds(std::string_view text, int reps, bool duplicates) {
  simdjson::dom::parser parser;
  if (parser.allocate(text.size(), 64)) throw std::runtime_error("simdjson: allocate failed");
  std::vector<std::vector<std::string_view>> keys;
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
    const simdjson::padded_string padded(text);
    simdjson::dom::element doc;
    if (const auto err = parser.parse(padded).get(doc))
      throw std::runtime_error(simdjson::error_message(err));
    if (duplicates) check_duplicates(doc, keys, 0);
    t.push_back(seconds_since(t0));
  }
  return bench::stats_of(t).median;
}
#endif

double nlohmann_seconds(std::string_view text, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
    const json::Json doc = json::parse(text);
    t.push_back(seconds_since(t0));
  }
  return bench::stats_of(t).median;
}

int measure(const std::vector<int64_t>& sizes, int reps, const std::string& write_dir, bool compare) {
#ifndef TG_HAVE_SIMDJSON
  if (compare) throw cli::UsageError("--compare-json: built without simdjson (libsimdjson-dev)");
#endif

  fmt::print("bench_load: {} (family {} model {}), {} logical CPUs; load average {}\n", cpuinfo("model name"),
             cpuinfo("cpu family"), cpuinfo("model"), std::thread::hardware_concurrency(), load_average());
  fmt::print("medians of {} loads from memory (read_file excluded); per key = total / n\n\n", reps);
  fmt::print("{:<8} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9}  {}\n", "case", "n", "header", "parse_st",
             "parse_ck", "weights", "total", "per key", "outcome");

  struct Case {
    std::string kind;
    int64_t n;
    std::string bytes;
  };
  const TransformerConfig tiny = config(8, 1, 7);
  std::vector<std::pair<std::string, std::string>> headers;  // for --compare-json
  auto run = [&](const Case& c) {
    std::vector<double> parse, ck, weights, total;
    std::string outcome;
    for (int r = 0; r < reps; ++r) {
      const Load l = load_once(c.bytes);
      parse.push_back(l.parse);
      ck.push_back(l.checkpoint);
      weights.push_back(l.weights);
      total.push_back(l.parse + l.checkpoint + l.weights);
      outcome = l.outcome;
    }
    const double t = bench::stats_of(total).median;
    fmt::print("{:<8} {:>9} {:>6.1f} MB {:>8.3f} s {:>8.3f} s {:>8.3f} s {:>8.3f} s {:>6.0f} ns  {}\n",
               c.kind, c.n, static_cast<double>(header_of(c.bytes).size()) / 1e6,
               bench::stats_of(parse).median, bench::stats_of(ck).median, bench::stats_of(weights).median, t,
               c.n ? t / static_cast<double>(c.n) * 1e9 : 0.0, outcome);
    std::fflush(stdout);
    if (!write_dir.empty()) {
      std::filesystem::create_directories(write_dir);
      const std::string path = fmt::format("{}/{}_{}.safetensors", write_dir, c.kind, c.n);
      std::ofstream(path, std::ios::binary)
          .write(c.bytes.data(), static_cast<std::streamsize>(c.bytes.size()));
    }
    if (compare) headers.emplace_back(fmt::format("{} {}", c.kind, c.n), std::string(header_of(c.bytes)));
  };
  for (const char* kind : {"keys", "tensors"})
    for (const int64_t n : sizes) {
      const bool keys = std::string_view(kind) == "keys";
      run({kind, n, checkpoint_bytes(tiny, keys ? n : 0, keys ? 0 : n)});
    }
  run({"real", 0, checkpoint_bytes(config(64, 6, 16000), 0, 0)});

  if (compare) {
#ifdef TG_HAVE_SIMDJSON
    fmt::print(
        "\nthe header text alone (medians of {}): a strict parse into a document, duplicate keys refused\n"
        "(nlohmann: tg::json::parse; simdjson: DOM + sorted keys per object), and simdjson's parse alone\n",
        reps);
    fmt::print("{:<16} {:>7} {:>14} {:>14} {:>7} {:>16}\n", "header", "MB", "nlohmann DOM", "simdjson DOM",
               "ratio", "simdjson parse");
    for (const auto& [name, text] : headers) {
      const double nl = nlohmann_seconds(text, reps), sj = simdjson_seconds(text, reps, true),
                   parse_only = simdjson_seconds(text, reps, false);
      fmt::print("{:<16} {:>7.2f} {:>12.4f} s {:>12.4f} s {:>6.1f}x {:>14.4f} s\n", name,
                 static_cast<double>(text.size()) / 1e6, nl, sj, nl / sj, parse_only);
    }
#endif
  }
  fmt::print("\nload average at the end: {}\n", load_average());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program app("Checkpoint loading time against the size of the header.", "bench_load");
  cli::style(app, "[options]");
  std::vector<int64_t> sizes = {10'000, 100'000, 1'000'000};
  int reps = 5;
  std::string write_dir;
  bool compare = false;
  cli::add_list(app, "--sizes", sizes, "numbers of keys and of tensors, each >= 1")
      .check(cli::int_range(1))
      .default_str("10000,100000,1000000");
  cli::add_int(app, "--reps", reps, "timed loads per case; the median is reported", 1, 1000);
  cli::add_text(app, "--write", write_dir, "also write each file to this directory", "DIR");
  cli::add_flag(app, "--compare-json", compare, "also time the header text through nlohmann and simdjson");
  return cli::run(app, argc, argv, [&] { return measure(sizes, reps, write_dir, compare); });
}
