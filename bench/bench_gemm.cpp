// GEMM benchmark: every selected arch and OpenBLAS on square, Transformer-layer and attention shapes;
// the bf16 GEMM (ops::gemm_bf16) of every arch on the layer and attention shapes; the int8-weight
// products (ops::gemm_int8) of every arch on the decoding shapes.
//
// Work is 2*M*N*K flops per matrix (times the batch). A Transformer linear layer (M,K,N) runs
// C = A B forward and two GEMMs backward: dA = dC B^T (trans_b) and dB = A^T dC (trans_a), so
// each layer shape gives three cases. Attention runs one small GEMM per (batch, head):
// scores = Q K^T (M=N=32 queries/keys, K=64 head dim, B transposed) and out = P V (M=32, N=64, K=32).
#include <fmt/core.h>

#include <algorithm>
#include <map>

#include "bench/bench.hpp"
#include "bench/peak.hpp"

#if defined(TG_HAVE_OPENBLAS)
#include <cblas.h>
#endif

namespace tg::bench {
namespace {

struct GemmCase {
  std::string kernel;
  int64_t M, N, K;
  bool ta, tb;
  int64_t batch = 1;

  std::string shape() const {
    return fmt::format("{}M{} N{} K{} {}{}", batch > 1 ? fmt::format("{}x ", batch) : "", M, N, K,
                       ta ? 't' : 'n', tb ? 't' : 'n');
  }
  double flops() const { return 2.0 * static_cast<double>(M * N * K * batch); }
  // The scalar reference is a triple loop: minutes on the big shapes, so it only runs on small ones.
  bool small() const { return std::max({M, N, K}) <= 256; }
};

std::vector<GemmCase> gemm_cases(bool quick) {
  std::vector<GemmCase> cases;
  for (int64_t n : {64, 128, 256, 512, 1024, 2048})
    if (!quick || n == 64 || n == 256) cases.push_back({"gemm square", n, n, n, false, false});
  const int64_t layers[][3] = {{2048, 256, 256}, {2048, 256, 1024}, {2048, 1024, 256}, {4096, 512, 512}};
  for (const auto& mkn : layers) {
    const int64_t M = mkn[0], K = mkn[1], N = mkn[2];
    if (quick && !(M == 2048 && K == 256 && N == 256)) continue;
    cases.push_back({"gemm linear.fwd", M, N, K, false, false});
    cases.push_back({"gemm linear.dA", M, K, N, false, true});  // [M,K] = dC[M,N] B[K,N]^T
    cases.push_back({"gemm linear.dB", K, N, M, true, false});  // [K,N] = A[M,K]^T dC[M,N]
  }
  // The language model's products as nn's linear calls them (weight [out, in]): forward x W^T (nt),
  // input gradient dY W (nn), weight gradient dY^T x (tn, K = the tokens); GPT-2 124M's four
  // layer shapes (in -> out) at 256 tokens, `lm train --init-from`'s batch 4 x 64, and its output
  // layer (768 -> 50,257: linear_cross_entropy's three products, one chunk of 256 rows).
  const int64_t lm[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50257}};
  for (const auto& io : lm) {
    const int64_t R = 256, in = io[0], out = io[1];
    if (quick && !(in == 768 && out == 768)) continue;
    cases.push_back({"gemm lm.fwd", R, out, in, false, true});
    cases.push_back({"gemm lm.dx", R, in, out, false, false});
    cases.push_back({"gemm lm.dw", out, in, R, true, false});
  }
  // One decoding step (lm sample, batch 1): one row against each of GPT-2's weights [out, in] and
  // its tied head [50257, 768], B read once per call (fp32 B: 2 bytes per flop; a bf16 B, the "bf16"
  // rows, which take gemm_bf16's few-row path: 1 byte per flop; an int8 B, the "int8" rows, ops::gemm_int8:
  // half a byte per flop). The same B every repetition: the
  // block weights (2.4-9.4 MB) come from the last-level cache here, the head (154 MB) from memory.
  const int64_t decode[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50257}};
  for (const auto& io : decode)
    if (!quick || io[0] == 3072) cases.push_back({"gemm decode", 1, io[1], io[0], false, true});
  cases.push_back({"gemm attn.qk", 32, 32, 64, false, true, 512});
  if (!quick) cases.push_back({"gemm attn.pv", 32, 64, 32, false, false, 512});
  // The same two products at bench_train's config M (64 x 8 heads, length 64, d_head 32)
  if (!quick) cases.push_back({"gemm attnM.qk", 64, 64, 32, false, true, 512});
  if (!quick) cases.push_back({"gemm attnM.pv", 64, 32, 64, false, false, 512});
  return cases;
}

// Operands of one case, stored as the kernels read them (A is K x M when transposed, etc.), in
// fp32 and (for the bf16 GEMM) rounded to bf16.
struct Operands {
  ops::Gemm g;
  Buffer A, B, C;
  std::vector<ops::bf16> A16, B16;
  explicit Operands(const GemmCase& c)
      : g(ops::gemm_desc(c.M, c.N, c.K, c.ta, c.tb, 1.0f, 0.0f, c.batch)),
        A(random_buffer(static_cast<size_t>(c.M * c.K * c.batch), 1)),
        B(random_buffer(static_cast<size_t>(c.K * c.N * c.batch), 2)),
        C(static_cast<size_t>(c.M * c.N * c.batch), 0.0f),
        A16(A.size()),
        B16(B.size()) {
    ops::ref::table().f32_to_bf16(A16.data(), A.data(), static_cast<int64_t>(A.size()));
    ops::ref::table().f32_to_bf16(B16.data(), B.data(), static_cast<int64_t>(B.size()));
  }
};

// A bf16 GEMM implementation as benchmarked: a table's gemm_bf16 and the operands' storage.
struct Bf16Impl {
  std::string name;  // "avx512 bf16" (bf16 operands), "avx512 bf16f" (fp32), "avx512 bf16w" (widen)
  ops::Arch arch;
  ops::Bf16Path path;
  bool bf16_operands;
  void run(Operands& x) const {
    const ops::KernelTable& t = ops::kernels(arch, path);
    if (bf16_operands)
      t.gemm_bf16(x.C.data(), ops::operand(x.A16.data()), ops::operand(x.B16.data()), x.g);
    else
      t.gemm_bf16(x.C.data(), ops::operand(x.A.data()), ops::operand(x.B.data()), x.g);
  }
};

// Per arch: bf16 operands on the arch's bf16 path (dot where the CPU has it); where it has it, also
// fp32 operands rounded while packing (the training case: fp32 master weights) and the widen path
// (what a CPU without the bf16 instructions runs); where it has AMX, both operand kinds on its tiles.
std::vector<Bf16Impl> bf16_impls(const std::vector<ops::Arch>& archs) {
  std::vector<Bf16Impl> out;
  for (ops::Arch a : archs) {
    if (a == ops::Arch::scalar) continue;
    const std::string n = ops::arch_name(a);
    const bool dot = ops::has_bf16_dot(a);
    const ops::Bf16Path best = dot ? ops::Bf16Path::dot : ops::Bf16Path::widen;
    out.push_back({n + " bf16", a, best, true});
    if (dot) {
      out.push_back({n + " bf16f", a, best, false});
      out.push_back({n + " bf16w", a, ops::Bf16Path::widen, true});
    }
    if (ops::has_bf16_path(a, ops::Bf16Path::amx)) {  // AMX tiles: bf16 and fp32 operands
      out.push_back({n + " amx bf16", a, ops::Bf16Path::amx, true});
      out.push_back({n + " amx bf16f", a, ops::Bf16Path::amx, false});
    }
  }
  return out;
}

#if defined(TG_HAVE_OPENBLAS)
// The same contract through CBLAS, one call per batch entry (cblas has no strided batch).
void openblas_gemm(float* C, const float* A, const float* B, const ops::Gemm& g) {
  for (int64_t b = 0; b < g.batch; ++b)
    cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(g.M), static_cast<int>(g.N), static_cast<int>(g.K), g.alpha,
                A + b * g.stride_a, static_cast<int>(g.lda), B + b * g.stride_b, static_cast<int>(g.ldb),
                g.beta, C + b * g.stride_c, static_cast<int>(g.ldc));
}
#endif

using GemmFn = void (*)(float*, const float*, const float*, const ops::Gemm&);

// One small awkward size per transpose combination plus a batched one, with alpha and beta != 0
// so the whole contract is checked, against the scalar reference.
Validation validate(const std::string& impl, GemmFn fn) {
  const GemmCase small[] = {{"", 37, 29, 45, false, false},
                            {"", 37, 29, 45, false, true},
                            {"", 37, 29, 45, true, false},
                            {"", 33, 17, 65, true, true},
                            {"", 9, 13, 31, false, true, 5}};
  Validation v{impl, "gemm", 0.0};
  for (const GemmCase& c : small) {
    Operands x(c);
    x.g.alpha = 1.5f, x.g.beta = 0.5f;
    x.C = random_buffer(x.C.size(), 3);
    Buffer ref = x.C;
    ops::ref::table().gemm(ref.data(), x.A.data(), x.B.data(), x.g);
    fn(x.C.data(), x.A.data(), x.B.data(), x.g);
    v.max_err = std::max(v.max_err, max_err(x.C.data(), ref.data(), ref.size(), 1e-4, 1e-4));
  }
  return v;
}

// The bf16 GEMM against the scalar bf16 reference, as validate() does for fp32.
Validation validate_bf16(const Bf16Impl& impl) {
  const GemmCase small[] = {{"", 37, 29, 45, false, false},
                            {"", 37, 29, 45, false, true},
                            {"", 37, 29, 45, true, false},
                            {"", 33, 17, 65, true, true},
                            {"", 9, 13, 31, false, true, 5}};
  Validation v{impl.name, "gemm_bf16", 0.0};
  for (const GemmCase& c : small) {
    Operands x(c);
    x.g.alpha = 1.5f, x.g.beta = 0.5f;
    x.C = random_buffer(x.C.size(), 3);
    Buffer ref = x.C;
    ops::ref::table().gemm_bf16(ref.data(), ops::operand(x.A16.data()), ops::operand(x.B16.data()), x.g);
    impl.run(x);
    v.max_err = std::max(v.max_err, max_err(x.C.data(), ref.data(), ref.size(), 1e-4, 1e-4));
  }
  return v;
}

template <class F>
Result time_case(const GemmCase& c, const std::string& impl, int threads, const TimingOptions& t, F&& call) {
  Result r;
  r.kernel = c.kernel;
  r.shape = c.shape();
  r.impl = impl;
  r.threads = threads;
  r.work = c.flops();
  r.time = measure(call, t);
  return r;
}

Result time_gemm(const GemmCase& c, const std::string& impl, int threads, GemmFn fn, const TimingOptions& t) {
  Operands x(c);
  return time_case(c, impl, threads, t, [&] { fn(x.C.data(), x.A.data(), x.B.data(), x.g); });
}

// An int8 weight (ops::Int8Rows) of a decoding case: op(B) = B^T, B's N rows quantized.
struct Int8Operands {
  std::vector<int8_t> q;
  std::vector<float> scale;
  explicit Int8Operands(const Operands& x)
      : q(static_cast<size_t>(ops::int8_bytes(x.g.N, x.g.K))), scale(static_cast<size_t>(x.g.N)) {
    ops::quantize_int8_rows(q.data(), scale.data(), x.B.data(), x.g.N, x.g.K);
  }
  ops::Int8Rows rows() const { return {q.data(), scale.data()}; }
};

// gemm_int8 of one arch against the scalar reference on small decoding-like products (B^T).
Validation validate_int8(ops::Arch a) {
  const GemmCase small[] = {
      {"", 1, 29, 45, false, true}, {"", 4, 37, 65, false, true}, {"", 3, 17, 33, true, true}};
  Validation v{std::string(ops::arch_name(a)) + " int8", "gemm_int8", 0.0};
  for (const GemmCase& c : small) {
    Operands x(c);
    const Int8Operands b(x);
    x.g.alpha = 1.5f, x.g.beta = 0.5f;
    x.C = random_buffer(x.C.size(), 3);
    Buffer ref = x.C;
    ops::ref::table().gemm_int8(ref.data(), x.A.data(), b.rows(), x.g);
    ops::kernels(a).gemm_int8(x.C.data(), x.A.data(), b.rows(), x.g);
    v.max_err = std::max(v.max_err, max_err(x.C.data(), ref.data(), ref.size(), 1e-4, 1e-4));
  }
  return v;
}

// The bf16 GEMM runs on the Transformer shapes (layers and attention), not the squares.
bool bf16_case(const GemmCase& c) {
  return c.kernel != "gemm square";
}

}  // namespace

std::string openblas_info() {
#if defined(TG_HAVE_OPENBLAS)
  // DYNAMIC_ARCH builds pick their kernels at load time from the CPU model; a model newer than the
  // library falls back to "Prescott" (SSE3), so the core name is part of any OpenBLAS number.
  return std::string(openblas_get_config()) + "; core " + openblas_get_corename();
#else
  return "";
#endif
}

std::vector<GemmShape> bf16_gemm_shapes(const Options& o) {
  std::vector<GemmShape> out;
  if (!o.bf16) return out;
  for (const GemmCase& c : gemm_cases(o.quick))
    if (o.selected(c.kernel, c.shape()) && bf16_case(c))
      out.push_back({c.kernel, c.shape(), c.M, c.N, c.K, c.ta, c.tb, c.batch});
  return out;
}

std::vector<Result> run_gemm(const Options& o, const std::vector<Result>& machine,
                             std::vector<Validation>& val) {
  std::vector<GemmCase> cases;
  for (const GemmCase& c : gemm_cases(o.quick))
    if (o.selected(c.kernel, c.shape())) cases.push_back(c);
  std::vector<Result> out;
  if (cases.empty()) return out;

  std::vector<ops::Arch> archs;
  for (ops::Arch a : o.archs) {
    val.push_back(validate(ops::arch_name(a), ops::kernels(a).gemm));
    if (val.back().ok()) archs.push_back(a);
  }
  std::vector<Bf16Impl> bf16;
  for (const Bf16Impl& impl : o.bf16 ? bf16_impls(archs) : std::vector<Bf16Impl>{}) {
    val.push_back(validate_bf16(impl));
    if (val.back().ok()) bf16.push_back(impl);
  }
  // int8 weights (lm sample --int8) on the decoding cases, every SIMD arch
  std::vector<ops::Arch> int8_archs;
  if (std::any_of(cases.begin(), cases.end(), [](const GemmCase& c) { return c.kernel == "gemm decode"; }))
    for (ops::Arch a : archs) {
      if (a == ops::Arch::scalar) continue;
      val.push_back(validate_int8(a));
      if (val.back().ok()) int8_archs.push_back(a);
    }
  // Ours first, OpenBLAS after: both keep their idle threads spinning for a while after a call,
  // so alternating them would make each pay for the other's spinning threads.
  for (int threads : o.threads) {
    ops::set_num_threads(threads);
    for (ops::Arch a : archs)
      for (const GemmCase& c : cases) {
        // The scalar reference is single-threaded and slow: one thread, small shapes.
        if (a == ops::Arch::scalar && (threads > 1 || !c.small())) continue;
        out.push_back(time_gemm(c, ops::arch_name(a), threads, ops::kernels(a).gemm, o.timing));
        out.back().of_peak =
            out.back().rate(out.back().time.median) / peak_flops(machine, out.back().impl, threads);
      }
    // bf16: %peak of the dot-product loop on the dot path, of the FMA loop on the widen path
    for (const Bf16Impl& impl : bf16)
      for (const GemmCase& c : cases) {
        if (!bf16_case(c)) continue;
        Operands x(c);
        out.push_back(time_case(c, impl.name, threads, o.timing, [&] { impl.run(x); }));
        const std::string arch = ops::arch_name(impl.arch);
        out.back().of_peak = out.back().rate(out.back().time.median) /
                             (impl.path != ops::Bf16Path::widen
                                  ? peak_bf16_flops(machine, bf16_peak_impl(impl.arch, impl.path), threads)
                                  : peak_flops(machine, arch, threads));
      }
    // int8 weights: %peak of the FMA loop (the products are fp32 FMAs on widened values)
    for (ops::Arch a : int8_archs)
      for (const GemmCase& c : cases) {
        if (c.kernel != "gemm decode") continue;
        Operands x(c);
        const Int8Operands b(x);
        const ops::KernelTable& t = ops::kernels(a);
        const std::string name = std::string(ops::arch_name(a)) + " int8";
        out.push_back(time_case(c, name, threads, o.timing,
                                [&] { t.gemm_int8(x.C.data(), x.A.data(), b.rows(), x.g); }));
        out.back().of_peak =
            out.back().rate(out.back().time.median) / peak_flops(machine, ops::arch_name(a), threads);
      }
  }
  ops::set_num_threads(0);

#if defined(TG_HAVE_OPENBLAS)
  if (o.blas) {
    val.push_back(validate("openblas", openblas_gemm));
    std::map<std::string, double> blas_rate;  // key + threads -> GFLOP/s
    if (val.back().ok())
      for (int threads : o.threads) {
        openblas_set_num_threads(threads);
        for (const GemmCase& c : cases) {
          out.push_back(time_gemm(c, "openblas", threads, openblas_gemm, o.timing));
          blas_rate[fmt::format("{} {}", out.back().key(), threads)] =
              out.back().rate(out.back().time.median);
        }
      }
    for (Result& r : out)
      if (auto it = blas_rate.find(fmt::format("{} {}", r.key(), r.threads));
          it != blas_rate.end() && r.impl != "openblas" && r.impl.find("bf16") == std::string::npos &&
          r.impl.find("int8") == std::string::npos) {
        r.vs_ref = r.rate(r.time.median) / it->second;
        r.ref_name = "openblas";
      }
  }
#endif
  // Rows grouped by case then threads, so an arch, OpenBLAS and the ratios read side by side.
  std::vector<Result> sorted;
  for (const GemmCase& c : cases)
    for (int threads : o.threads)
      for (const Result& r : out)
        if (r.kernel == c.kernel && r.shape == c.shape() && r.threads == threads) sorted.push_back(r);
  return sorted;
}

}  // namespace tg::bench
