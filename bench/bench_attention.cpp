// Fused attention (ops::attention_forward / attention_backward) in GFLOP/s on every arch, beside
// the arch's FMA peak and PyTorch's scaled_dot_product_attention on the same shapes (torch_compare.cpp);
// where an arch's bf16 table has bf16 products for it (ops::AttentionBf16: AVX512_BF16), also with
// those ("<arch> bf16" rows, against the bf16 dot-product loop's peak; validated against the
// reference within 2% of each output's largest value).
//
// Work counts the model's multiply-adds, 2 flops each, over the (query, key) pairs a query may see
// (a causal head: about half of T x S): "attention.fwd" the two products (Q K^T, P V), "fwd+bwd"
// those and backward's four (dV, dP, dQ, dK), three times the forward. The fused backward also
// computes Q K^T again (it never stores P): that product is a cost, not counted as work.
// tools/bench_torch_kernels.py counts PyTorch's flops with the same formula.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "bench/bench.hpp"
#include "bench/peak.hpp"

namespace tg::bench {

std::string AttentionShape::text() const {
  return fmt::format("B{} H{} T{} S{} d{}{}{}", B, H, T, S, d, causal ? " causal" : "",
                     dropout > 0 ? fmt::format(" p{}", dropout) : "");
}

double attention_flops(const std::string& kernel, const AttentionShape& s) {
  double pairs = 0;  // (query, key) pairs a query sees, summed over the queries of one head
  for (int64_t t = 0; t < s.T; ++t)
    pairs += static_cast<double>(s.causal ? std::clamp<int64_t>(t + 1 + s.S - s.T, 0, s.S) : s.S);
  const double fwd = 2.0 * 2.0 * pairs * static_cast<double>(s.d * s.B * s.H);
  if (kernel == "attention.fwd") return fwd;
  if (kernel == "attention.fwd+bwd") return 3.0 * fwd;
  throw std::invalid_argument("attention_flops: unknown kernel '" + kernel + "'");
}

// The training shapes: bench_train's config M (encoder self-attention, the decoder's causal one,
// with its dropout 0.1; and each of the two alone), lm's small model (4 heads of 64, 128 tokens)
// and GPT-2 124M's heads at block 64 and 1024 (batch 4, causal).
std::vector<AttentionShape> attention_shapes(bool quick) {
  if (quick) return {{64, 8, 64, 64, 32, false, 0.0f}};
  return {
      {64, 8, 64, 64, 32, false, 0.0f},   // config M's encoder (without its dropout)
      {64, 8, 64, 64, 32, true, 0.1f},    // its decoder's self-attention
      {64, 8, 64, 64, 32, true, 0.0f},    // the two apart: what the causal mask costs,
      {64, 8, 64, 64, 32, false, 0.1f},   // what the dropout costs
      {32, 4, 128, 128, 64, true, 0.0f},  // lm small
      {4, 12, 64, 64, 64, true, 0.0f},    // GPT-2, block 64
      {4, 12, 1024, 1024, 64, true, 0.0f},
  };
}

namespace {

const char* const kKernels[] = {"attention.fwd", "attention.fwd+bwd"};

// q [B, T, H d] and kv [B, S, 2 H d] (K then V): the layout of a model's projections, heads read in
// place; out, dout [B, T, H d]; the gradients laid out as their sources.
struct Problem {
  AttentionShape s;
  Buffer q, kv, out, dout, dq, dkv;
  ops::Attention a;
  explicit Problem(const AttentionShape& shape, const ops::AttentionBf16* bf16 = nullptr)
      : s(shape),
        q(random_buffer(static_cast<size_t>(s.B * s.T * s.H * s.d), 21)),
        kv(random_buffer(static_cast<size_t>(s.B * s.S * 2 * s.H * s.d), 22)),
        out(static_cast<size_t>(s.B * s.T * s.H * s.d), 0.0f),
        dout(random_buffer(out.size(), 23)),
        dq(q.size(), 0.0f),
        dkv(kv.size(), 0.0f) {
    const int64_t hd = s.H * s.d;
    a.B = s.B, a.H = s.H, a.T = s.T, a.S = s.S, a.d_head = s.d;
    a.q = q.data(), a.k = kv.data(), a.v = kv.data() + hd;
    a.ldq = hd, a.ldk = a.ldv = 2 * hd;
    a.q_batch = s.T * hd, a.kv_batch = s.S * 2 * hd;
    a.scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    a.causal = s.causal;
    a.bf16 = bf16;
    if (s.dropout > 0) {
      a.seed = 42;
      a.drop_below = ops::dropout_threshold(s.dropout);
      a.drop_scale = ops::dropout_scale(s.dropout);
    }
  }
};

void run(const std::string& name, const ops::KernelTable& k, Problem& p) {
  k.attention_forward(p.out.data(), p.a);
  if (name == "attention.fwd+bwd")  // the gradients accumulate (they stay finite while timed)
    k.attention_backward(p.dq.data(), p.dkv.data(), p.dkv.data() + p.s.H * p.s.d, p.dout.data(), p.a);
}

// The table an implementation runs on: the arch's own (fp32 products), or with bf16 its bf16 table
// (the dot path), whose attention_bf16 the problem's Attention points to.
struct AttentionImpl {
  ops::Arch arch;
  const ops::AttentionBf16* bf16 = nullptr;
  std::string name() const { return std::string(ops::arch_name(arch)) + (bf16 ? " bf16" : ""); }
  const ops::KernelTable& table() const { return ops::kernels(arch); }
};

// An awkward small case (odd sizes, a causal offset, dropout) against the reference: fp32 products
// to 1e-4, bf16 ones to 2% of each output's largest value (their rounding).
Validation validate(const std::string& name, const AttentionImpl& impl) {
  const AttentionShape s{2, 3, 13, 17, 20, true, 0.1f};
  Problem mine(s, impl.bf16), ref(s);
  run(name, impl.table(), mine);
  run(name, ops::ref::table(), ref);
  Validation v{impl.name(), name, 0.0};
  // bf16: the largest error over 2% of the largest value (passes at <= 1, as max_err; NaN fails)
  auto err = [&](const Buffer& got, const Buffer& want) {
    if (!impl.bf16) return max_err(got.data(), want.data(), got.size(), 1e-4, 1e-4);
    double diff = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = std::abs(static_cast<double>(got[i]) - want[i]);
      diff = std::isnan(d) ? INFINITY : std::max(diff, d);
      scale = std::max(scale, static_cast<double>(std::abs(want[i])));
    }
    return diff == 0 ? 0.0 : diff / (0.02 * scale);
  };
  v.max_err = impl.bf16 ? err(mine.out, ref.out) : max_err(mine.out.data(), ref.out.data(), mine.out.size());
  if (name == "attention.fwd+bwd")
    v.max_err = std::max({v.max_err, err(mine.dq, ref.dq), err(mine.dkv, ref.dkv)});
  return v;
}

}  // namespace

std::vector<Result> run_attention(const Options& o, const std::vector<Result>& machine,
                                  std::vector<Validation>& val) {
  std::vector<AttentionImpl> impls;
  for (ops::Arch arch : o.archs) {
    if (arch == ops::Arch::scalar) continue;  // the reference: minutes per call on these shapes
    impls.push_back({arch});
    if (o.bf16 && ops::has_bf16_path(arch, ops::Bf16Path::dot))
      if (const ops::AttentionBf16* b = ops::kernels(arch, ops::Bf16Path::dot).attention_bf16)
        impls.push_back({arch, b});
  }
  std::vector<std::pair<std::string, AttentionImpl>> valid;  // (kernel, impl) pairs that passed
  for (const char* name : kKernels) {
    bool any = false;
    for (const AttentionShape& s : attention_shapes(o.quick)) any = any || o.selected(name, s.text());
    if (!any) continue;
    for (const AttentionImpl& impl : impls) {
      val.push_back(validate(name, impl));
      if (val.back().ok()) valid.push_back({name, impl});
    }
  }
  std::vector<Result> out;
  for (const char* name : kKernels)
    for (const AttentionShape& s : attention_shapes(o.quick)) {
      if (!o.selected(name, s.text())) continue;
      for (int threads : o.threads)
        for (const auto& [kernel, impl] : valid) {
          if (kernel != name) continue;
          Problem p(s, impl.bf16);
          ops::set_num_threads(threads);
          Result r;
          r.kernel = name;
          r.shape = s.text();
          r.impl = impl.name();
          r.threads = threads;
          r.work = attention_flops(name, s);
          const ops::KernelTable& k = impl.table();
          r.time = measure([&, name = name] { run(name, k, p); }, o.timing);
          const std::string arch = ops::arch_name(impl.arch);
          r.of_peak =
              r.rate(r.time.median) /
              (impl.bf16 ? peak_bf16_flops(machine, bf16_peak_impl(impl.arch, ops::Bf16Path::dot), threads)
                         : peak_flops(machine, arch, threads));
          out.push_back(r);
        }
    }
  ops::set_num_threads(0);
  return out;
}

}  // namespace tg::bench
