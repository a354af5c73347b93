// Runs tools/bench_torch_kernels.py (PyTorch's softmax and layernorm on the same shapes, threads,
// timing and byte counting) and sets ours/PyTorch on our rows.
#include <fmt/core.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "bench/bench.hpp"

namespace tg::bench {
namespace {

const std::set<std::string> kTorchKernels = {"softmax.fwd", "softmax.fwd+bwd", "layernorm.fwd",
                                             "layernorm.fwd+bwd"};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string run_command(const std::string& cmd, int& status) {
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("bench_kernels: cannot run '" + cmd + "'");
  std::string out;
  char buf[4096];
  while (size_t got = std::fread(buf, 1, sizeof buf, p)) out.append(buf, got);
  status = pclose(p);
  return out;
}

}  // namespace

std::vector<Result> run_torch(const Options& o, std::vector<Result>& ours, std::string& version) {
  std::vector<Result> out;
  if (o.torch == 0) {
    version = "not run (--no-torch)";
    return out;
  }
  if (o.torch < 0 &&
      std::system((shell_quote(o.python) + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0) {
    version = "not run (" + o.python + " cannot import torch)";
    return out;
  }
  std::set<std::string> kernels, shapes;
  for (const Result& r : ours)
    if (kTorchKernels.count(r.kernel)) kernels.insert(r.kernel), shapes.insert(r.shape);
  if (kernels.empty()) {
    version = "not run (no softmax/layernorm case selected)";
    return out;
  }
  const std::string threads = join(o.threads, [](int t) { return std::to_string(t); });
  auto same = [](const std::string& x) { return x; };
  const std::string cmd =
      fmt::format("{} {} --threads {} --shapes {} --kernels {} --reps {} --warmup {} --min-sample {}",
                  shell_quote(o.python), shell_quote(o.torch_script), threads, join(shapes, same),
                  shell_quote(join(kernels, same)), o.timing.reps, o.timing.warmup_s, o.timing.min_sample_s);
  int status = 0;
  const std::string text = run_command(cmd, status);
  if (status != 0)
    throw std::runtime_error(fmt::format("bench_kernels: the PyTorch script failed ({} {}): {}",
                                         WIFEXITED(status) ? "exit status" : "wait status",
                                         WIFEXITED(status) ? WEXITSTATUS(status) : status, cmd));
  // The script prints {"torch_version": "..", "results": [{"kernel": .., "shape": .., ...}, ...]}.
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
    version = doc.at("torch_version").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format(
        "bench_kernels: the PyTorch script's output is not what it should be ({}): {}", e.what(), cmd));
  }

  std::map<std::string, double> torch_rate;  // "kernel shape threads" -> GB/s
  for (const nlohmann::json& obj : doc.value("results", nlohmann::json::array())) {
    Result r;
    int64_t rows = 0, cols = 0;
    try {
      r.kernel = obj.at("kernel").get<std::string>();
      r.shape = obj.at("shape").get<std::string>();
      r.threads = obj.at("threads").get<int>();
      r.work = obj.at("bytes").get<double>();
      r.time.median = obj.at("median_s").get<double>();
      r.time.min = obj.at("min_s").get<double>();
      r.time.max = obj.at("max_s").get<double>();
      r.time.reps = obj.at("reps").get<int>();
      r.time.inner = obj.at("calls_per_rep").get<int64_t>();
      rows = obj.at("rows").get<int64_t>();
      cols = obj.at("cols").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(fmt::format(
          "bench_kernels: unexpected result from the PyTorch script ({}): {}", e.what(), obj.dump()));
    }
    r.impl = "torch";
    r.flops = false;
    if (r.kernel.empty() || r.time.median <= 0 || r.work != rowwise_bytes(r.kernel, rows, cols))
      throw std::runtime_error("bench_kernels: unexpected result from the PyTorch script: " + obj.dump());
    torch_rate[fmt::format("{} {}", r.key(), r.threads)] = r.rate(r.time.median);
    out.push_back(r);
  }
  for (Result& r : ours)
    if (auto it = torch_rate.find(fmt::format("{} {}", r.key(), r.threads)); it != torch_rate.end()) {
      r.vs_ref = r.rate(r.time.median) / it->second;
      r.ref_name = "torch";
    }
  return out;
}

}  // namespace tg::bench
