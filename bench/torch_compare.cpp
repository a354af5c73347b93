// Runs tools/bench_torch_kernels.py (PyTorch's softmax and layernorm on the same shapes, threads,
// timing and byte counting; its bf16 and fp32 matmul on the bf16 GEMM's shapes) and sets
// ours/PyTorch on our rows.
#include <fmt/core.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <map>
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

// The value of "key" in a flat JSON object (the script writes no nested objects inside results).
std::string json_field(const std::string& obj, const std::string& key) {
  size_t at = obj.find("\"" + key + "\"");
  if (at == std::string::npos) return "";
  at = obj.find(':', at);
  if (at == std::string::npos) return "";
  at = obj.find_first_not_of(" \n\t", at + 1);
  if (at == std::string::npos) return "";
  if (obj[at] == '"') return obj.substr(at + 1, obj.find('"', at + 1) - at - 1);
  return obj.substr(at, obj.find_first_of(",}\n", at) - at);
}

std::vector<std::string> json_objects(const std::string& text, const std::string& array) {
  std::vector<std::string> objs;
  size_t at = text.find("\"" + array + "\"");
  if (at == std::string::npos) return objs;
  const size_t end = text.find(']', at);
  while ((at = text.find('{', at)) < end) {
    const size_t close = text.find('}', at);
    objs.push_back(text.substr(at, close - at + 1));
    at = close;
  }
  return objs;
}

// Whether the torch script should run (o.torch, or whether o.python imports torch); sets `version`
// to the reason when not.
bool torch_wanted(const Options& o, std::string& version) {
  if (o.torch == 0) {
    version = "not run (--no-torch)";
    return false;
  }
  if (o.torch < 0 &&
      std::system((shell_quote(o.python) + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0) {
    version = "not run (" + o.python + " cannot import torch)";
    return false;
  }
  return true;
}

std::string run_script(const std::string& cmd) {
  int status = 0;
  std::string text = run_command(cmd, status);
  if (status != 0)
    throw std::runtime_error(fmt::format("bench_kernels: the PyTorch script failed ({} {}): {}",
                                         WIFEXITED(status) ? "exit status" : "wait status",
                                         WIFEXITED(status) ? WEXITSTATUS(status) : status, cmd));
  return text;
}

}  // namespace

std::vector<Result> run_torch_gemm(const Options& o, const std::vector<GemmShape>& cases,
                                   std::vector<Result>& ours, std::string& version) {
  std::vector<Result> out;
  if (cases.empty() || !torch_wanted(o, version)) return out;
  std::string list;  // MxNxKxOPxBATCH
  for (const GemmShape& c : cases)
    list += fmt::format("{}{}x{}x{}x{}{}x{}", list.empty() ? "" : ",", c.M, c.N, c.K, c.ta ? 't' : 'n',
                        c.tb ? 't' : 'n', c.batch);
  const std::string threads = join(o.threads, [](int t) { return std::to_string(t); });
  const std::string cmd = fmt::format(
      "{} {} --threads {} --kernels '' --gemm {} --gemm-dtypes bf16,fp32 --reps {} --warmup {} --min-sample "
      "{}",
      shell_quote(o.python), shell_quote(o.torch_script), threads, list, o.timing.reps, o.timing.warmup_s,
      o.timing.min_sample_s);
  const std::string text = run_script(cmd);
  version = json_field(text, "torch_version");
  std::map<std::string, double> bf16_rate;  // "kernel shape threads" -> GFLOP/s
  for (const std::string& obj : json_objects(text, "results")) {
    const int64_t M = std::atoll(json_field(obj, "m").c_str()), N = std::atoll(json_field(obj, "n").c_str()),
                  K = std::atoll(json_field(obj, "k").c_str()),
                  batch = std::atoll(json_field(obj, "batch").c_str());
    const std::string op = json_field(obj, "op"), dtype = json_field(obj, "dtype");
    const GemmShape* c = nullptr;
    for (const GemmShape& x : cases)
      if (x.M == M && x.N == N && x.K == K && x.batch == batch && op.size() == 2 && x.ta == (op[0] == 't') &&
          x.tb == (op[1] == 't'))
        c = &x;
    Result r;
    r.impl = "torch " + dtype;
    r.threads = std::atoi(json_field(obj, "threads").c_str());
    r.work = std::atof(json_field(obj, "flops").c_str());
    r.time.median = std::atof(json_field(obj, "median_s").c_str());
    r.time.min = std::atof(json_field(obj, "min_s").c_str());
    r.time.max = std::atof(json_field(obj, "max_s").c_str());
    r.time.reps = std::atoi(json_field(obj, "reps").c_str());
    r.time.inner = std::atoll(json_field(obj, "calls_per_rep").c_str());
    if (!c || r.time.median <= 0 || r.work != 2.0 * static_cast<double>(M * N * K * batch) ||
        (dtype != "bf16" && dtype != "fp32"))
      throw std::runtime_error("bench_kernels: unexpected GEMM result from the PyTorch script: " + obj);
    r.kernel = c->kernel;
    r.shape = c->shape;
    if (dtype == "bf16") bf16_rate[fmt::format("{} {}", r.key(), r.threads)] = r.rate(r.time.median);
    out.push_back(r);
  }
  for (Result& r : ours)
    if (auto it = bf16_rate.find(fmt::format("{} {}", r.key(), r.threads));
        it != bf16_rate.end() && r.impl.find("bf16") != std::string::npos) {
      r.vs_ref = r.rate(r.time.median) / it->second;
      r.ref_name = "torch bf16";
    }
  return out;
}

std::vector<Result> run_torch(const Options& o, std::vector<Result>& ours, std::string& version) {
  std::vector<Result> out;
  if (!torch_wanted(o, version)) return out;
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
  const std::string text = run_script(cmd);
  version = json_field(text, "torch_version");

  std::map<std::string, double> torch_rate;  // "kernel shape threads" -> GB/s
  for (const std::string& obj : json_objects(text, "results")) {
    Result r;
    r.kernel = json_field(obj, "kernel");
    r.shape = json_field(obj, "shape");
    r.impl = "torch";
    r.threads = std::atoi(json_field(obj, "threads").c_str());
    r.flops = false;
    r.work = std::atof(json_field(obj, "bytes").c_str());
    r.time.median = std::atof(json_field(obj, "median_s").c_str());
    r.time.min = std::atof(json_field(obj, "min_s").c_str());
    r.time.max = std::atof(json_field(obj, "max_s").c_str());
    r.time.reps = std::atoi(json_field(obj, "reps").c_str());
    r.time.inner = std::atoll(json_field(obj, "calls_per_rep").c_str());
    const int64_t rows = std::atoll(json_field(obj, "rows").c_str()),
                  cols = std::atoll(json_field(obj, "cols").c_str());
    if (r.kernel.empty() || r.time.median <= 0 || r.work != rowwise_bytes(r.kernel, rows, cols))
      throw std::runtime_error("bench_kernels: unexpected result from the PyTorch script: " + obj);
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
