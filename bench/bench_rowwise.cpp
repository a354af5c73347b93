// Row-wise and elementwise kernels in GB/s: softmax, layernorm, cross-entropy, GELU, Adam.
//
// Bytes per call count each tensor a call touches once, whether it is read, written or both
// (a `+=` gradient or Adam's in-place m and v count once): the traffic a perfect kernel cannot
// avoid. "fwd+bwd" is one forward call then one backward call, as a training step runs them: the
// backward stores dx (overwrite = true, the first contribution to that gradient, as in training).
// tools/bench_torch_kernels.py counts PyTorch's bytes with the same formulas.
#include <fmt/core.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <tuple>

#include "bench/bench.hpp"

namespace tg::bench {

double rowwise_bytes(const std::string& kernel, int64_t rows, int64_t cols) {
  const double n = static_cast<double>(rows * cols), r = static_cast<double>(rows),
               c = static_cast<double>(cols);
  double floats = 0;
  if (kernel == "softmax.fwd")
    floats = 2 * n;  // x, y
  else if (kernel == "softmax.fwd+bwd")
    floats = 2 * n + 3 * n;  // + y, dy, dx
  else if (kernel == "layernorm.fwd")
    floats = 2 * n + 2 * c + 2 * r;  // x, y, w, b, mean, rstd
  // backward: dy, x, dx; w, dw, db; mean, rstd
  else if (kernel == "layernorm.fwd+bwd")
    floats = (2 * n + 2 * c + 2 * r) + (3 * n + 3 * c + 2 * r);
  // forward: logits, targets, losses; backward: logits, targets, dlosses, dlogits (int32 = 4 bytes)
  else if (kernel == "cross_entropy.fwd+bwd")
    floats = (n + 2 * r) + (2 * n + 2 * r);
  // both at once: logits read and dlogits written over them; targets, dlosses, losses
  else if (kernel == "cross_entropy.fused")
    floats = 2 * n + 3 * r;
  else if (kernel == "gelu.fwd")
    floats = 2 * n;  // x, y
  else if (kernel == "gelu.bwd")
    floats = 3 * n;  // dy, x, dx
  else if (kernel == "adam")
    floats = 4 * n;  // param, m, v, grad
  else
    throw std::invalid_argument("rowwise_bytes: unknown kernel '" + kernel + "'");
  return floats * sizeof(float);
}

namespace {

// Every buffer a row-wise kernel may need, for one [rows, cols] problem.
struct Problem {
  int64_t rows, cols;
  size_t n;
  Buffer x, y, dy, dx, w, b, dw, db, mean, rstd, losses, dlosses, m, v;
  std::vector<int32_t> targets;
  ops::CrossEntropy ce;

  Problem(int64_t r, int64_t c)
      : rows(r),
        cols(c),
        n(static_cast<size_t>(r * c)),
        x(random_buffer(n, 11, -3.0f, 3.0f)),
        y(n, 0.0f),
        dy(random_buffer(n, 12)),
        dx(n, 0.0f),
        w(random_buffer(static_cast<size_t>(c), 13, 0.5f, 1.5f)),
        b(random_buffer(static_cast<size_t>(c), 14)),
        dw(static_cast<size_t>(c), 0.0f),
        db(static_cast<size_t>(c), 0.0f),
        mean(static_cast<size_t>(r)),
        rstd(static_cast<size_t>(r)),
        losses(static_cast<size_t>(r)),
        dlosses(random_buffer(static_cast<size_t>(r), 15, 0.0f, 1.0f)),
        m(random_buffer(n, 16)),
        v(random_buffer(n, 17, 0.0f, 1.0f)),
        targets(static_cast<size_t>(r)) {
    for (int64_t i = 0; i < r; ++i) targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % c);
    if (r > 2) targets[1] = -100;  // one ignored (padding) row, as in training
    ce.rows = r, ce.V = c, ce.ignore_index = -100, ce.label_smoothing = 0.1f;
  }
};

const char* const kKernels[] = {"softmax.fwd",
                                "softmax.fwd+bwd",
                                "layernorm.fwd",
                                "layernorm.fwd+bwd",
                                "cross_entropy.fwd+bwd",
                                "cross_entropy.fused",
                                "gelu.fwd",
                                "gelu.bwd",
                                "adam"};

// One call of benchmark kernel `name` with table k on problem p.
void run(const std::string& name, const ops::KernelTable& k, Problem& p) {
  const int64_t r = p.rows, c = p.cols;
  if (name == "softmax.fwd" || name == "softmax.fwd+bwd") {
    k.softmax_forward(p.y.data(), p.x.data(), r, c, {});
    if (name == "softmax.fwd+bwd") k.softmax_backward(p.dx.data(), p.dy.data(), p.y.data(), r, c, true);
  } else if (name == "layernorm.fwd" || name == "layernorm.fwd+bwd") {
    k.layernorm_forward(p.y.data(), p.mean.data(), p.rstd.data(), p.x.data(), p.w.data(), p.b.data(), r, c,
                        1e-5f);
    if (name == "layernorm.fwd+bwd")
      k.layernorm_backward(
          p.dx.data(), p.dw.data(), p.db.data(), p.dy.data(),
          {.inp = p.x.data(), .weight = p.w.data(), .mean = p.mean.data(), .rstd = p.rstd.data()}, r, c,
          true);
  } else if (name == "cross_entropy.fwd+bwd") {
    k.cross_entropy_forward(p.losses.data(), p.x.data(), p.targets.data(), p.ce);
    k.cross_entropy_backward(p.dx.data(), p.dlosses.data(), p.x.data(), p.targets.data(), p.ce);
  } else if (name == "cross_entropy.fused") {
    // in place over dx (x is the other kernels' input): dx holds its own previous output while timed,
    // the logits in validate()
    k.cross_entropy_fused(p.losses.data(), p.dx.data(), p.dlosses.data(), p.targets.data(), p.ce);
  } else if (name == "gelu.fwd") {
    k.gelu_forward(p.y.data(), p.x.data(), static_cast<int64_t>(p.n));
  } else if (name == "gelu.bwd") {
    k.gelu_backward(p.dx.data(), p.dy.data(), p.x.data(), static_cast<int64_t>(p.n));
  } else if (name == "adam") {
    ops::AdamParams ap;
    ap.weight_decay = 0.01f, ap.decoupled = true, ap.step = 10;
    // y is the parameter: the forward kernels overwrite it anyway, and x stays the other kernels' input
    k.adam_update(p.y.data(), p.m.data(), p.v.data(), p.dy.data(), static_cast<int64_t>(p.n), ap);
  } else {
    throw std::invalid_argument("bench_rowwise: unknown kernel '" + name + "'");
  }
}

// The outputs a kernel writes (and Adam's in-place state), compared against the reference.
std::vector<const Buffer*> outputs(const std::string& name, const Problem& p) {
  if (name == "softmax.fwd" || name == "gelu.fwd") return {&p.y};
  if (name == "softmax.fwd+bwd") return {&p.y, &p.dx};
  if (name == "layernorm.fwd") return {&p.y, &p.mean, &p.rstd};
  if (name == "layernorm.fwd+bwd") return {&p.y, &p.mean, &p.rstd, &p.dx, &p.dw, &p.db};
  if (name == "cross_entropy.fwd+bwd" || name == "cross_entropy.fused") return {&p.losses, &p.dx};
  if (name == "gelu.bwd") return {&p.dx};
  return {&p.y, &p.m, &p.v};  // adam
}

// An awkward small size (17 rows of 67: no multiple of any vector width) against the reference.
Validation validate(const std::string& name, ops::Arch arch) {
  Problem mine(17, 67), ref(17, 67);
  if (name == "cross_entropy.fused") mine.dx = mine.x, ref.dx = ref.x;  // the logits it overwrites
  run(name, ops::kernels(arch), mine);
  run(name, ops::ref::table(), ref);
  Validation v{ops::arch_name(arch), name, 0.0};
  const auto a = outputs(name, mine), b = outputs(name, ref);
  for (size_t i = 0; i < a.size(); ++i)
    v.max_err = std::max(v.max_err, max_err(a[i]->data(), b[i]->data(), a[i]->size()));
  return v;
}

std::vector<std::pair<int64_t, int64_t>> shapes(bool quick) {
  if (quick) return {{8192, 256}};
  return {{8192, 64}, {8192, 256}, {4096, 1024}, {1024, 4096}};
}

}  // namespace

std::vector<Result> run_rowwise(const Options& o, std::vector<Validation>& val) {
  std::vector<std::pair<std::string, ops::Arch>> valid;  // (kernel, arch) pairs that passed
  for (const char* name : kKernels) {
    bool any = false;
    for (auto [rows, cols] : shapes(o.quick)) any = any || o.selected(name, fmt::format("{}x{}", rows, cols));
    if (!any) continue;
    for (ops::Arch arch : o.archs) {
      val.push_back(validate(name, arch));
      if (val.back().ok()) valid.push_back({name, arch});
    }
  }
  std::vector<Result> out;
  // One problem per shape, shared by every kernel: the kernels' outputs and `+=` gradients only
  // drift while timed (they stay finite), and filling 14 buffers of 4M floats is not free.
  for (auto [rows, cols] : shapes(o.quick)) {
    const std::string shape = fmt::format("{}x{}", rows, cols);
    std::unique_ptr<Problem> p;
    for (const auto& [name, arch] : valid) {
      if (!o.selected(name, shape)) continue;
      if (!p) p = std::make_unique<Problem>(rows, cols);
      for (int threads : o.threads) {
        // The scalar reference is single-threaded: one thread is all it can use.
        if (arch == ops::Arch::scalar && threads > 1) continue;
        ops::set_num_threads(threads);
        Result r;
        r.kernel = name;
        r.shape = shape;
        r.impl = ops::arch_name(arch);
        r.threads = threads;
        r.flops = false;
        r.work = rowwise_bytes(name, rows, cols);
        const ops::KernelTable& k = ops::kernels(arch);
        r.time = measure([&, name = name] { run(name, k, *p); }, o.timing);
        out.push_back(r);
      }
    }
  }
  ops::set_num_threads(0);
  // Rows grouped by kernel, shape and threads, so the archs of one case read side by side.
  auto order = [&](const Result& r) {
    const auto all = shapes(o.quick);
    size_t kernel = 0, shape = 0;
    while (kernel < std::size(kKernels) && r.kernel != kKernels[kernel]) ++kernel;
    while (shape < all.size() && r.shape != fmt::format("{}x{}", all[shape].first, all[shape].second))
      ++shape;
    return std::tuple(kernel, shape, r.threads);
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const Result& a, const Result& b) { return order(a) < order(b); });
  return out;
}

}  // namespace tg::bench
