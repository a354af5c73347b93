// Runs tools/bench_torch_kernels.py (PyTorch's softmax and layernorm on the same shapes, threads,
// timing and byte counting; its bf16 and fp32 matmul on the bf16 GEMM's shapes) and sets
// ours/PyTorch on our rows.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

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

// Runs the script and parses what it prints: {"torch_version": "..", "results": [{...}, ...]};
// sets `version`.
nlohmann::json run_script(const std::string& cmd, std::string& version) {
  int status = 0;
  const std::string text = run_command(cmd, status);
  if (status != 0)
    throw std::runtime_error(fmt::format("bench_kernels: the PyTorch script failed ({} {}): {}",
                                         WIFEXITED(status) ? "exit status" : "wait status",
                                         WIFEXITED(status) ? WEXITSTATUS(status) : status, cmd));
  try {
    nlohmann::json doc = nlohmann::json::parse(text);
    version = doc.at("torch_version").get<std::string>();
    return doc;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format(
        "bench_kernels: the PyTorch script's output is not what it should be ({}): {}", e.what(), cmd));
  }
}

// The timing fields every result of the script has.
void read_timing(const nlohmann::json& obj, Result& r) {
  r.threads = obj.at("threads").get<int>();
  r.time.median = obj.at("median_s").get<double>();
  r.time.min = obj.at("min_s").get<double>();
  r.time.max = obj.at("max_s").get<double>();
  r.time.reps = obj.at("reps").get<int>();
  r.time.inner = obj.at("calls_per_rep").get<int64_t>();
}

[[noreturn]] void unexpected(const nlohmann::json& obj, const std::string& why) {
  throw std::runtime_error(
      fmt::format("bench_kernels: unexpected result from the PyTorch script ({}): {}", why, obj.dump()));
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
  const nlohmann::json doc = run_script(cmd, version);
  std::map<std::string, double> bf16_rate;  // "kernel shape threads" -> GFLOP/s
  for (const nlohmann::json& obj : doc.value("results", nlohmann::json::array())) {
    Result r;
    int64_t M = 0, N = 0, K = 0, batch = 0;
    std::string op, dtype;
    try {
      M = obj.at("m").get<int64_t>(), N = obj.at("n").get<int64_t>(), K = obj.at("k").get<int64_t>();
      batch = obj.at("batch").get<int64_t>();
      op = obj.at("op").get<std::string>(), dtype = obj.at("dtype").get<std::string>();
      r.work = obj.at("flops").get<double>();
      read_timing(obj, r);
    } catch (const nlohmann::json::exception& e) {
      unexpected(obj, e.what());
    }
    const GemmShape* c = nullptr;
    for (const GemmShape& x : cases)
      if (x.M == M && x.N == N && x.K == K && x.batch == batch && op.size() == 2 && x.ta == (op[0] == 't') &&
          x.tb == (op[1] == 't'))
        c = &x;
    r.impl = "torch " + dtype;
    if (!c || r.time.median <= 0 || r.work != 2.0 * static_cast<double>(M * N * K * batch) ||
        (dtype != "bf16" && dtype != "fp32"))
      unexpected(obj, "not a GEMM case that was asked for");
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
  const nlohmann::json doc = run_script(cmd, version);

  std::map<std::string, double> torch_rate;  // "kernel shape threads" -> GB/s
  for (const nlohmann::json& obj : doc.value("results", nlohmann::json::array())) {
    Result r;
    int64_t rows = 0, cols = 0;
    try {
      r.kernel = obj.at("kernel").get<std::string>();
      r.shape = obj.at("shape").get<std::string>();
      r.work = obj.at("bytes").get<double>();
      rows = obj.at("rows").get<int64_t>(), cols = obj.at("cols").get<int64_t>();
      read_timing(obj, r);
    } catch (const nlohmann::json::exception& e) {
      unexpected(obj, e.what());
    }
    r.impl = "torch";
    r.flops = false;
    if (r.kernel.empty() || r.time.median <= 0 || r.work != rowwise_bytes(r.kernel, rows, cols))
      unexpected(obj, "bytes do not match the shape");
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

std::vector<Result> run_torch_attention(const Options& o, std::vector<Result>& ours, std::string& version) {
  std::vector<Result> out;
  std::vector<AttentionShape> cases;  // the selected ones, in attention_shapes' order
  for (const AttentionShape& s : attention_shapes(o.quick))
    for (const Result& r : ours)
      if (r.shape == s.text()) {
        cases.push_back(s);
        break;
      }
  if (cases.empty()) {
    version = "not run (no attention case selected)";
    return out;
  }
  if (!torch_wanted(o, version)) return out;
  std::string list;  // BxHxTxSxDxCxP, C = c (causal) or n, P the dropout probability
  for (const AttentionShape& s : cases)
    list += fmt::format("{}{}x{}x{}x{}x{}x{}x{}", list.empty() ? "" : ",", s.B, s.H, s.T, s.S, s.d,
                        s.causal ? 'c' : 'n', s.dropout);
  const std::string threads = join(o.threads, [](int t) { return std::to_string(t); });
  const std::string cmd = fmt::format(
      "{} {} --threads {} --kernels '' --attention {} --attention-dtypes {} --reps {} --warmup {} "
      "--min-sample {}",
      shell_quote(o.python), shell_quote(o.torch_script), threads, list, o.bf16 ? "fp32,bf16" : "fp32",
      o.timing.reps, o.timing.warmup_s, o.timing.min_sample_s);
  const nlohmann::json doc = run_script(cmd, version);
  std::map<std::string, double> fp32_rate;  // "kernel shape threads" -> GFLOP/s
  for (const nlohmann::json& obj : doc.value("results", nlohmann::json::array())) {
    Result r;
    int64_t index = -1;
    std::string dtype;
    try {
      r.kernel = obj.at("kernel").get<std::string>();
      index = obj.at("case").get<int64_t>();
      dtype = obj.at("dtype").get<std::string>();
      r.work = obj.at("flops").get<double>();
      read_timing(obj, r);
    } catch (const nlohmann::json::exception& e) {
      unexpected(obj, e.what());
    }
    if (index < 0 || index >= static_cast<int64_t>(cases.size()) || (dtype != "fp32" && dtype != "bf16") ||
        (r.kernel != "attention.fwd" && r.kernel != "attention.fwd+bwd") || r.time.median <= 0 ||
        r.work != attention_flops(r.kernel, cases[static_cast<size_t>(index)]))
      unexpected(obj, "not an attention case that was asked for");
    r.shape = cases[static_cast<size_t>(index)].text();
    r.impl = "torch " + dtype;
    if (dtype == "fp32") fp32_rate[fmt::format("{} {}", r.key(), r.threads)] = r.rate(r.time.median);
    out.push_back(r);
  }
  for (Result& r : ours)
    if (auto it = fp32_rate.find(fmt::format("{} {}", r.key(), r.threads)); it != fp32_rate.end()) {
      r.vs_ref = r.rate(r.time.median) / it->second;
      r.ref_name = "torch fp32";
    }
  return out;
}

}  // namespace tg::bench
