// Precision (autograd/precision.hpp): the scope, and each op that honours it (linear, matmul,
// attention_probs, attention_context) in bf16 against fp32, forward and backward.
//
// The tolerance. bf16 keeps 8 significant bits, so rounding x to bf16 (nearest) gives x(1 + d) with
// |d| <= u = 2^-8. A product of two rounded operands is then a b (1 + d_a)(1 + d_b): relative error
// at most 2u + u^2, and the products of two bf16 values are exact in fp32. Summing K of them in fp32
// (either run) adds at most about K 2^-24 times the sum of |terms|, for each run. So every element
// of C = op(A) op(B) in bf16 differs from the fp32 one by at most
//     eps(K) (|op(A)| |op(B)|)_ij,   eps(K) = 2u + u^2 + 2 K 2^-24  (+ a 1% margin for the fp32
// rounding of the bound's own inputs),
// a worst case, not a statistical estimate. A product whose inputs already differ (dQ = scale dS K in
// attention_probs' backward, where dS comes from P, which the bf16 forward changed) adds that
// difference carried through the product, bounded to first order below.
// Each check also requires the largest error to be at least 1% of its bound: the bf16 products ran
// (an fp32 product would give 0 here), so the test cannot pass by never rounding. The cases force
// bf16 products where the CPU has no bf16 dot unit (set_bf16_products_everywhere: the widen path,
// the same rounding), so they run, and check the rule, on every machine.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "autograd/precision.hpp"
#include "helpers.hpp"

using namespace tg;
using tg::testing::randn;

namespace {

constexpr double kU = 1.0 / 256;  // bf16 unit roundoff, 2^-8

double eps_of(int64_t K) {
  return (2 * kU + kU * kU + 2.0 * static_cast<double>(K) * std::ldexp(1.0, -24)) * 1.01;
}

// |op(A)| |op(B)| for row-major A [M, K] (or [K, M] when ta) and B [K, N] (or [N, K] when tb).
std::vector<double> abs_product(const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool ta,
                                bool tb) {
  std::vector<double> c(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += std::abs(double(ta ? A[k * M + i] : A[i * K + k])) *
             std::abs(double(tb ? B[j * K + k] : B[k * N + j]));
      c[static_cast<size_t>(i * N + j)] = s;
    }
  return c;
}

// Checks |got - want| <= bound elementwise and that the largest ratio shows bf16 rounding happened.
void check_within(const char* what, const Tensor& got, const Tensor& want, const std::vector<double>& bound) {
  REQUIRE(got.numel() == want.numel());
  REQUIRE(static_cast<size_t>(got.numel()) == bound.size());
  double worst = 0;
  int64_t bad = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double d = std::abs(double(got.data()[i]) - want.data()[i]);
    const double b = bound[static_cast<size_t>(i)];
    if (d > b && bad < 0) bad = i;
    if (b > 0) worst = std::max(worst, d / b);
  }
  INFO(std::string(what), ": first element over its bound ", bad, ", largest error / bound ", worst);
  CHECK(bad < 0);
  CHECK(worst > 0.01);
}

// Gradients of sum(f(inputs) * r) for a fixed r (so dy = r in both precisions), with the forward
// in precision p and backward run outside the scope.
struct Run {
  Tensor y;
  std::vector<Tensor> grads;
};
template <class F>
Run run_in(Precision p, const std::vector<Tensor>& inputs, const Tensor& r, F&& f) {
  for (Tensor t : inputs) t.zero_grad();  // a handle: clears the input's gradient
  Run out;
  {
    const PrecisionScope scope(p);
    out.y = f();
  }
  backward(sum(mul(out.y, r)));
  for (const Tensor& t : inputs) out.grads.push_back(t.grad().clone());
  return out;
}

// Precision::bf16 rounds the products for the test's duration, also on a CPU without a bf16
// dot-product unit (the widen path: the same rounding).
struct Bf16Everywhere {
  Bf16Everywhere() { set_bf16_products_everywhere(true); }
  ~Bf16Everywhere() { set_bf16_products_everywhere(false); }
  Bf16Everywhere(const Bf16Everywhere&) = delete;
  Bf16Everywhere& operator=(const Bf16Everywhere&) = delete;
};

// The two runs each bound test compares: f in bf16 (lo) and in fp32 (hi), bf16 products forced
// (Bf16Everywhere) so the bf16 run rounds on every machine.
struct Runs {
  Run lo, hi;
};
template <class F>
Runs bf16_and_fp32(const std::vector<Tensor>& inputs, const Tensor& r, F&& f) {
  const Bf16Everywhere bf16;
  Run lo = run_in(Precision::bf16, inputs, r, f);
  return {std::move(lo), run_in(Precision::fp32, inputs, r, f)};
}

// The bound on one output of a run (y or an input's gradient), and the formula it bounds.
struct Bound {
  const char* what;
  std::vector<double> bound;
};

// check_within for y (bounds[0]) and then the inputs' gradients in order (bounds[1], ...).
void check_within(const Runs& runs, const std::vector<Bound>& bounds) {
  REQUIRE(bounds.size() <= runs.lo.grads.size() + 1);
  check_within(bounds[0].what, runs.lo.y, runs.hi.y, bounds[0].bound);
  for (size_t i = 1; i < bounds.size(); ++i)
    check_within(bounds[i].what, runs.lo.grads[i - 1], runs.hi.grads[i - 1], bounds[i].bound);
}

}  // namespace

TEST_CASE("precision.scope_restores") {
  CHECK(compute_precision() == Precision::fp32);
  {
    const PrecisionScope a(Precision::bf16);
    CHECK(compute_precision() == Precision::bf16);
    {
      const PrecisionScope b(Precision::fp32);
      CHECK(compute_precision() == Precision::fp32);
    }
    CHECK(compute_precision() == Precision::bf16);
  }
  CHECK(compute_precision() == Precision::fp32);
  try {
    const PrecisionScope a(Precision::bf16);
    throw std::runtime_error("leaving the scope by an exception");
  } catch (const std::runtime_error&) {
  }
  CHECK(compute_precision() == Precision::fp32);
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK(parse_precision("fp32") == Precision::fp32);
  CHECK(std::string(precision_name(Precision::bf16)) == "bf16");
  CHECK(testing::error_of([] { parse_precision("fp16"); }) == "precision must be fp32 or bf16, got 'fp16'");
}

TEST_CASE("precision.linear_bf16_within_bound") {
  Generator gen(11);
  const int64_t R = 12, in = 70, out = 9;
  const Tensor x = randn({3, 4, in}, gen), w = randn({out, in}, gen), b = randn({out}, gen);
  const Tensor r = randn({3, 4, out}, gen, false);
  const Runs runs = bf16_and_fp32({x, w, b}, r, [&] { return linear(x, w, b); });
  auto bound = [](std::vector<double> v, int64_t K) {
    for (double& e : v) e *= eps_of(K);
    return v;
  };
  check_within(runs, {{"y = x w^T + b", bound(abs_product(x.data(), w.data(), R, out, in, false, true), in)},
                      {"dx = dy w", bound(abs_product(r.data(), w.data(), R, in, out, false, false), out)},
                      {"dw = dy^T x", bound(abs_product(r.data(), x.data(), out, in, R, true, false), R)}});
  // dbias: a reduction, fp32 in both
  CHECK(testing::max_abs_diff(runs.lo.grads[2], runs.hi.grads[2]) == 0.0);
}

TEST_CASE("precision.matmul_bf16_within_bound") {
  Generator gen(12);
  const int64_t Bt = 2, M = 5, K = 37, N = 6;
  // a [2, M, K] @ b^T with b [N, K] (trans_b): the batch folds into one product per batch entry.
  const Tensor a = randn({Bt, M, K}, gen), b = randn({N, K}, gen);
  const Tensor r = randn({Bt, M, N}, gen, false);
  const Runs runs = bf16_and_fp32({a, b}, r, [&] { return matmul(a, b, false, true); });
  std::vector<double> by, bda, bdb(static_cast<size_t>(N * K), 0.0);
  for (int64_t i = 0; i < Bt; ++i) {
    const auto y = abs_product(a.data() + i * M * K, b.data(), M, N, K, false, true);
    const auto da = abs_product(r.data() + i * M * N, b.data(), M, K, N, false, false);
    const auto db = abs_product(r.data() + i * M * N, a.data() + i * M * K, N, K, M, true, false);
    for (double v : y) by.push_back(v * eps_of(K));
    for (double v : da) bda.push_back(v * eps_of(N));
    // db sums the batch entries in fp32: each entry's bound adds.
    for (size_t j = 0; j < db.size(); ++j) bdb[j] += db[j] * eps_of(M * Bt);
  }
  check_within(runs, {{"y = a b^T", by}, {"da = dy b", bda}, {"db = dy^T a", bdb}});
}

TEST_CASE("precision.attention_context_bf16_within_bound") {
  Generator gen(13);
  const int64_t B = 2, H = 2, T = 5, S = 7, dh = 8, d = H * dh;
  // P is an input here (rows of positive weights), so both runs see the same P.
  const Tensor p = testing::randu({B, H, T, S}, 0.0f, 0.3f, gen), v = randn({B, S, d}, gen);
  const Tensor r = randn({B, T, d}, gen, false);
  const Runs runs = bf16_and_fp32({p, v}, r, [&] { return attention_context(p, v, {.d_head = dh}); });
  // Per (b, h): O_h = P_h V_h (K = S), dP_h = dO_h V_h^T (K = dh), dV_h = P_h^T dO_h (K = T); V, O,
  // dO, dV are column blocks of width dh in rows of width d. Each (t, s, j) of a head is a term of
  // all three products: eps(K) |term| adds to the bound on its element of each.
  std::vector<double> bo(static_cast<size_t>(B * T * d)), bdp(static_cast<size_t>(B * H * T * S)),
      bdv(static_cast<size_t>(B * S * d));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t j = 0; j < dh; ++j) {
            const auto io = static_cast<size_t>((b * T + t) * d + h * dh + j);   // O[b, t, h, j], dO too
            const auto ip = static_cast<size_t>(((b * H + h) * T + t) * S + s);  // P[b, h, t, s], dP too
            const auto iv = static_cast<size_t>((b * S + s) * d + h * dh + j);   // V[b, s, h, j], dV too
            bo[io] += eps_of(S) * std::abs(p.data()[ip] * v.data()[iv]);
            bdp[ip] += eps_of(dh) * std::abs(r.data()[io] * v.data()[iv]);
            bdv[iv] += eps_of(T) * std::abs(p.data()[ip] * r.data()[io]);
          }
  check_within(runs, {{"O = P V", bo}, {"dP = dO V^T", bdp}, {"dV = P^T dO", bdv}});
}

// attention_probs: S = scale Q K^T then a softmax. With |dS_ij| <= m_i on row i (the product bound),
// softmax moves P_ij by a factor within exp(+-2 m_i), so |dP_ij| <= P_ij (exp(2 m_i) - 1). The
// backward dQ = scale dS' K, dS' = P (G - c), c = sum_j G_j P_j (G = the upstream gradient r): the
// fp32 dS' and the bf16 run's differ through P by at most |dP_j| |G_j - c| + P_j sum_k |G_k| |dP_k|
// (to first order; the 1% margin covers the rest), and the product adds its own eps(K) |dS'| |K|.
TEST_CASE("precision.attention_probs_bf16_within_bound") {
  Generator gen(14);
  const int64_t B = 2, H = 2, T = 5, S = 7, dh = 8, d = H * dh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const Tensor q = randn({B, T, d}, gen), k = randn({B, S, d}, gen);
  const Tensor r = randn({B, H, T, S}, gen, false);
  const Runs runs = bf16_and_fp32(
      {q, k}, r, [&] { return attention_probs(q, k, {.heads = H, .d_head = dh, .scale = scale}); });
  const float* P = runs.hi.y.data();
  std::vector<double> bp(static_cast<size_t>(B * H * T * S)), dsp(bp.size()), ds(bp.size());
  const auto Q = [&](int64_t b, int64_t t, int64_t h, int64_t j) {
    return double(q.data()[(b * T + t) * d + h * dh + j]);
  };
  const auto Kv = [&](int64_t b, int64_t s, int64_t h, int64_t j) {
    return double(k.data()[(b * S + s) * d + h * dh + j]);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const size_t row = static_cast<size_t>(((b * H + h) * T + t) * S);
        double m = 0;
        for (int64_t s = 0; s < S; ++s) {
          double a = 0;
          for (int64_t j = 0; j < dh; ++j) a += std::abs(Q(b, t, h, j) * Kv(b, s, h, j));
          m = std::max(m, scale * a * eps_of(dh));
        }
        double c = 0, gdp = 0;
        for (int64_t s = 0; s < S; ++s) {
          bp[row + s] = P[row + s] * std::expm1(2 * m);
          c += r.data()[row + s] * P[row + s];
          gdp += std::abs(r.data()[row + s]) * bp[row + s];
        }
        for (int64_t s = 0; s < S; ++s) {
          ds[row + s] = P[row + s] * (r.data()[row + s] - c);
          dsp[row + s] = bp[row + s] * std::abs(r.data()[row + s] - c) + P[row + s] * gdp;
        }
      }
  // dQ[b, t, h*dh + j] = scale sum_s dS[t, s] K[s, j]; dK[b, s, h*dh + j] = scale sum_t dS[t, s] Q[t, j].
  // Each (t, s, j) of a head is a term of both: scale (dsp + eps(K) |dS|) times |K| or |Q| adds to
  // the bound on its element of each.
  std::vector<double> bdq(static_cast<size_t>(B * T * d)), bdk(static_cast<size_t>(B * S * d));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s < S; ++s) {
          const auto is = static_cast<size_t>(((b * H + h) * T + t) * S + s);  // dS[b, h, t, s]
          for (int64_t j = 0; j < dh; ++j) {
            bdq[static_cast<size_t>((b * T + t) * d + h * dh + j)] +=
                scale * (dsp[is] + eps_of(S) * std::abs(ds[is])) * std::abs(Kv(b, s, h, j));
            bdk[static_cast<size_t>((b * S + s) * d + h * dh + j)] +=
                scale * (dsp[is] + eps_of(T) * std::abs(ds[is])) * std::abs(Q(b, t, h, j));
          }
        }
  check_within(runs,
               {{"P = softmax(scale Q K^T)", bp}, {"dQ = scale dS K", bdq}, {"dK = scale dS^T Q", bdk}});
}

// A node runs its backward in the precision of its forward, whatever the scope at backward time.
TEST_CASE("precision.backward_uses_the_forward_precision") {
  const Bf16Everywhere bf16;
  Generator gen(15);
  Tensor x = randn({6, 40}, gen), w = randn({5, 40}, gen);
  const Tensor r = randn({6, 5}, gen, false);
  const auto grads = [&](Precision fwd, Precision bwd) {
    x.zero_grad(), w.zero_grad();
    Tensor y;
    {
      const PrecisionScope s(fwd);
      y = linear(x, w, {});
    }
    const PrecisionScope s(bwd);
    backward(sum(mul(y, r)));
    return std::vector<Tensor>{x.grad().clone(), w.grad().clone()};
  };
  const auto bb = grads(Precision::bf16, Precision::bf16), bf = grads(Precision::bf16, Precision::fp32);
  const auto ff = grads(Precision::fp32, Precision::fp32), fb = grads(Precision::fp32, Precision::bf16);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(testing::max_abs_diff(bb[i], bf[i]) == 0.0);  // bf16 forward: bf16 backward, scope or not
    CHECK(testing::max_abs_diff(ff[i], fb[i]) == 0.0);  // fp32 forward: fp32 backward
    CHECK(testing::max_abs_diff(bb[i], ff[i]) > 0.0);   // and the two precisions do differ
  }
}

// Without a bf16 dot-product unit (the widen path: forced here with the scalar table, which every
// build has; also where the unit is measured slower than the fp32 GEMM, ops::bf16_speedup),
// bf16 products would cost as much as fp32 ones or more, so Precision::bf16 runs the fp32
// products: the same bits.
TEST_CASE("precision.bf16_falls_back_to_fp32_without_a_dot_unit") {
  const ops::Arch was = ops::active_arch();
  ops::set_arch(ops::Arch::scalar);
  const bool active = bf16_products_active();
  const Precision effective = effective_precision(Precision::bf16);
  const std::string report = products_report(Precision::bf16);
  Generator gen(16);
  const Tensor x = randn({6, 40}, gen), w = randn({5, 40}, gen);
  const Tensor r = randn({6, 5}, gen, false);
  const auto f = [&] { return linear(x, w, {}); };
  const Run lo = run_in(Precision::bf16, {x, w}, r, f), hi = run_in(Precision::fp32, {x, w}, r, f);
  ops::set_arch(was);
  CHECK_FALSE(active);
  CHECK(effective == Precision::fp32);
  CHECK(report == "fp32 products (bf16 asked; no bf16 dot-product unit)");
  CHECK(testing::max_abs_diff(lo.y, hi.y) == 0.0);
  CHECK(testing::max_abs_diff(lo.grads[0], hi.grads[0]) == 0.0);
  CHECK(testing::max_abs_diff(lo.grads[1], hi.grads[1]) == 0.0);
}

// Decoding against bf16 weights (Bf16WeightCache): under Precision::bf16, without a tape, a product
// of up to 4 rows against a linear layer's weight reads the cache's bf16 copy, made once, on every
// CPU (no Bf16Everywhere here: it pays by bytes, not by a dot-product unit); the result is within
// the bf16 bound of the fp32 one and rounding did happen. Anything else (5 rows, a tape, fp32, no
// cache) leaves the cache empty and gives what it gives without one. Scopes nest; clear() drops the
// copies.
TEST_CASE("precision.bf16_weight_cache_for_decoding") {
  Generator gen(17);
  const int64_t in = 70, out = 9, hidden = 40;
  const Tensor w = randn({out, in}, gen), b = randn({out}, gen);
  const Tensor w2 = randn({out, hidden}, gen), b2 = randn({out}, gen);
  const Tensor x = randn({1, 3, in}, gen), h = randn({3, hidden}, gen);
  const auto both = [&](const Tensor& xs, const Tensor& hs) {
    return std::pair{linear(xs, w, b), gelu_linear(hs, w2, b2, GeluApprox::tanh)};
  };
  std::pair<Tensor, Tensor> fp32, plain;
  {
    const NoGradGuard no_grad;
    fp32 = both(x, h);
    const PrecisionScope bf16(Precision::bf16);
    plain = both(x, h);  // no cache: whatever Precision::bf16 does on this CPU
  }
  Bf16WeightCache cache;
  std::pair<Tensor, Tensor> cached, again;
  {
    const NoGradGuard no_grad;
    const PrecisionScope bf16(Precision::bf16);
    const Bf16WeightScope use(cache);
    cached = both(x, h);
    CHECK(cache.bytes() == (out * in + out * hidden) * 2);
    again = both(x, h);
    CHECK(cache.bytes() == (out * in + out * hidden) * 2);  // copies made once
  }
  CHECK(testing::max_abs_diff(cached.first, again.first) == 0.0);
  CHECK(testing::max_abs_diff(cached.second, again.second) == 0.0);
  {  // nested scopes: the inner cache while it lives, then the outer one again; clear() empties it
    const NoGradGuard no_grad;
    const PrecisionScope bf16(Precision::bf16);
    const Bf16WeightScope use(cache);
    Bf16WeightCache inner;
    {
      const Bf16WeightScope use_inner(inner);
      const Tensor y = linear(x, w, b);
      CHECK(testing::max_abs_diff(y, cached.first) == 0.0);
    }
    CHECK(inner.bytes() == out * in * 2);
    cache.clear();
    CHECK(cache.bytes() == 0);
    const Tensor y = linear(x, w, b);
    CHECK(cache.bytes() == out * in * 2);
    CHECK(inner.bytes() == out * in * 2);
    CHECK(testing::max_abs_diff(y, cached.first) == 0.0);
  }
  std::vector<double> bound = abs_product(x.data(), w.data(), 3, out, in, false, true);
  for (double& e : bound) e *= eps_of(in);
  check_within("y = x w^T + b from the bf16 copy", cached.first, fp32.first, bound);
  // gelu_linear: the same bound on gelu(h) w2^T, gelu(h) recomputed here
  Tensor a = gelu(h, GeluApprox::tanh);
  std::vector<double> bound2 = abs_product(a.data(), w2.data(), 3, out, hidden, false, true);
  for (double& e : bound2) e *= eps_of(hidden);
  check_within("y = gelu(h) w2^T + b2 from the bf16 copy", cached.second, fp32.second, bound2);

  // Not used: 5 rows, a tape, fp32 compute, and after the scope.
  const Tensor x5 = randn({5, in}, gen);
  Bf16WeightCache unused;
  Tensor five, taped, in_fp32, want5;
  {
    const NoGradGuard no_grad;
    const PrecisionScope bf16(Precision::bf16);
    want5 = linear(x5, w, b);
    const Bf16WeightScope use(unused);
    five = linear(x5, w, b);
  }
  {
    const PrecisionScope bf16(Precision::bf16);
    const Bf16WeightScope use(unused);
    taped = linear(x, w, b);  // recorded: backward must see the products the forward ran
    const NoGradGuard no_grad;
    const PrecisionScope fp(Precision::fp32);
    in_fp32 = linear(x, w, b);
  }
  Tensor after;
  {
    const NoGradGuard no_grad;
    const PrecisionScope bf16(Precision::bf16);
    after = linear(x, w, b);
  }
  CHECK(unused.bytes() == 0);
  CHECK(testing::max_abs_diff(five, want5) == 0.0);
  CHECK(testing::max_abs_diff(taped, plain.first) == 0.0);
  CHECK(testing::max_abs_diff(in_fp32, fp32.first) == 0.0);
  CHECK(testing::max_abs_diff(after, plain.first) == 0.0);
}

// Decoding against int8 weights (Int8WeightCache): without a tape, a product of up to 4 rows against
// a linear layer's weight (linear, gelu_linear) reads the cache's int8 copy, quantized once, in fp32
// or under Precision::bf16 (int8 comes first): the result is the fp32 product with the dequantized
// weight (scale * q) up to the order of the sums. 5 rows or a tape leave the cache empty and give
// the fp32 result; Int8WeightScope(nullptr) turns an outer cache off; clear() drops the copies. A
// cache for every product (Products::all) serves 5 rows too.
TEST_CASE("precision.int8_weight_cache_for_decoding") {
  Generator gen(19);
  const int64_t in = 70, out = 9, hidden = 40;
  const Tensor w = randn({out, in}, gen), b = randn({out}, gen);
  const Tensor w2 = randn({out, hidden}, gen), b2 = randn({out}, gen);
  const Tensor x = randn({1, 3, in}, gen), h = randn({3, hidden}, gen);
  const auto dequantized = [](const Tensor& t) {
    const int64_t rows = t.size(0), cols = t.size(1);
    std::vector<int8_t> q(static_cast<size_t>(ops::int8_bytes(rows, cols)));
    std::vector<float> scale(static_cast<size_t>(rows));
    ops::quantize_int8_rows(q.data(), scale.data(), t.data(), rows, cols);
    Tensor d = Tensor::empty({rows, cols});
    for (int64_t i = 0; i < rows * cols; ++i)
      d.data()[i] = scale[i / cols] * q[static_cast<size_t>(ops::int8_offset(i / cols, i % cols, cols))];
    return d;
  };
  const Tensor wq = dequantized(w), w2q = dequantized(w2);
  Int8WeightCache cache;
  Tensor y, y2, y_bf16, want, want2, fp32;
  {
    const NoGradGuard no_grad;
    want = linear(x, wq, b);
    want2 = gelu_linear(h, w2q, b2, GeluApprox::tanh);
    fp32 = linear(x, w, b);
    const Int8WeightScope use(&cache);
    y = linear(x, w, b);
    y2 = gelu_linear(h, w2, b2, GeluApprox::tanh);
    CHECK(cache.bytes() == ops::int8_bytes(out, in) + ops::int8_bytes(out, hidden) + 2 * out * 4);
    const PrecisionScope bf16(Precision::bf16);
    Bf16WeightCache b16;
    const Bf16WeightScope use_b16(b16);
    y_bf16 = linear(x, w, b);
    CHECK(b16.bytes() == 0);
    CHECK(cache.bytes() ==
          ops::int8_bytes(out, in) + ops::int8_bytes(out, hidden) + 2 * out * 4);  // copies made once
  }
  CHECK(testing::max_abs_diff(y, want) < 1e-5);
  CHECK(testing::max_abs_diff(y2, want2) < 1e-5);
  CHECK(testing::max_abs_diff(y_bf16, y) == 0.0);
  CHECK(testing::max_abs_diff(y, fp32) > 0);                            // the weights did move
  CHECK_THROWS_AS(cache.quantized(w, in, out), std::invalid_argument);  // the copy has out rows
  CHECK_THROWS_AS(cache.quantized(w, out, in + 1), std::invalid_argument);

  const Tensor x5 = randn({5, in}, gen);
  Int8WeightCache unused;
  Tensor five, want5, taped, off;
  {
    const NoGradGuard no_grad;
    want5 = linear(x5, w, b);
    const Int8WeightScope use(&unused);
    five = linear(x5, w, b);
    const Int8WeightScope none(nullptr);
    off = linear(x, w, b);
  }
  {
    const Int8WeightScope use(&unused);
    taped = linear(x, w, b);  // recorded: the backward's products need the forward's weights
  }
  CHECK(unused.bytes() == 0);
  CHECK(testing::max_abs_diff(five, want5) == 0.0);
  CHECK(testing::max_abs_diff(off, fp32) == 0.0);
  CHECK(testing::max_abs_diff(taped, fp32) == 0.0);
  cache.clear();
  CHECK(cache.bytes() == 0);

  // Products::all (lm eval --int8): 5 rows read the int8 copy too, a tape still does not
  Int8WeightCache every(Int8WeightCache::Products::all);
  Tensor five8, taped8, want5q;
  {
    const NoGradGuard no_grad;
    want5q = linear(x5, wq, b);
    const Int8WeightScope use(&every);
    five8 = linear(x5, w, b);
  }
  {
    const Int8WeightScope use(&every);
    taped8 = linear(x5, w, b);
  }
  CHECK(every.bytes() == ops::int8_bytes(out, in) + out * 4);
  CHECK(testing::max_abs_diff(five8, want5q) < 1e-5);
  CHECK(testing::max_abs_diff(taped8, want5) == 0.0);
}

// Training against bf16 weights made once per step (Bf16WeightCache::Use::training): with bf16
// products on (Bf16Everywhere), linear, gelu_linear and linear_cross_entropy read their weights from
// the cache in the forward product and in backward's dx product. Rounding once equals rounding
// while packing, so the loss and every gradient equal the run without a cache bit for bit, and each
// weight is copied once although two products (and every chunk of the loss) read it. After the
// weights change, invalidate() makes the next step read the new values; without it the stale
// copies would be read (shown, so the test can fail both ways). Under fp32 products the cache is
// not used.
TEST_CASE("precision.bf16_weight_cache_for_training") {
  const Bf16Everywhere bf16;
  Generator gen(23);
  const int64_t N = 37, in = 70, hid = 40, V = 53;
  Tensor x = randn({N, in}, gen), w1 = randn({hid, in}, gen), b1 = randn({hid}, gen);
  Tensor w2 = randn({hid, hid}, gen), b2 = randn({hid}, gen), head = randn({V, hid}, gen);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % V);
  const std::vector<Tensor> params{x, w1, b1, w2, b2, head};
  struct Step {
    Tensor loss;
    std::vector<Tensor> grads;
  };
  const auto step = [&](Precision p, Bf16WeightCache* cache) {
    for (Tensor t : params) t.zero_grad();
    std::optional<Bf16WeightScope> use;
    if (cache) use.emplace(*cache);
    Step s;
    {
      const PrecisionScope scope(p);
      const Tensor h = linear(x, w1, b1);
      const Tensor h2 = gelu_linear(h, w2, b2, GeluApprox::tanh);
      s.loss = linear_cross_entropy(h2, head, Tensor(), targets, {.chunk_rows = 8});
      backward(s.loss);
    }
    for (const Tensor& t : params) s.grads.push_back(t.grad().clone());
    return s;
  };
  const auto same = [](const Step& a, const Step& b) {
    bool eq = testing::max_abs_diff(a.loss, b.loss) == 0.0;
    for (size_t i = 0; i < a.grads.size(); ++i)
      eq = eq && testing::max_abs_diff(a.grads[i], b.grads[i]) == 0.0;
    return eq;
  };
  const Step plain = step(Precision::bf16, nullptr);
  Bf16WeightCache cache(Bf16WeightCache::Use::training);
  const Step cached = step(Precision::bf16, &cache);
  CHECK(cache.bytes() == (hid * in + hid * hid + V * hid) * 2);
  CHECK(same(cached, plain));
  const Step fp32 = step(Precision::fp32, nullptr);
  CHECK_FALSE(same(fp32, plain));  // the products were rounded
  Bf16WeightCache unused(Bf16WeightCache::Use::training);
  CHECK(same(step(Precision::fp32, &unused), fp32));
  CHECK(unused.bytes() == 0);

  // An update (as an optimizer step would make): stale copies without invalidate(), new ones with it.
  for (int64_t i = 0; i < w1.numel(); ++i) w1.data()[i] *= 0.5f;
  for (int64_t i = 0; i < head.numel(); ++i) head.data()[i] += 0.25f;
  const Step updated = step(Precision::bf16, nullptr);
  CHECK_FALSE(same(step(Precision::bf16, &cache), updated));
  cache.invalidate();
  CHECK(same(step(Precision::bf16, &cache), updated));
  CHECK(cache.bytes() == (hid * in + hid * hid + V * hid) * 2);  // the same memory

  // Backward's dx = dy W reads the copy the forward made: with W changed between forward and
  // backward, x's gradient is the one of the unchanged W (without a cache: of the changed one).
  const auto dx_after_change = [&](Bf16WeightCache* c) {
    x.zero_grad(), w1.zero_grad(), b1.zero_grad();
    std::optional<Bf16WeightScope> use;
    if (c) c->invalidate(), use.emplace(*c);
    const PrecisionScope scope(Precision::bf16);
    const Tensor y = sum(linear(x, w1, b1));
    for (int64_t i = 0; i < w1.numel(); ++i) w1.data()[i] *= 2.0f;
    backward(y);
    for (int64_t i = 0; i < w1.numel(); ++i) w1.data()[i] *= 0.5f;  // exact: powers of two
    return x.grad().clone();
  };
  const Tensor dx_changed = dx_after_change(nullptr), dx_cached = dx_after_change(&cache);
  x.zero_grad(), w1.zero_grad(), b1.zero_grad();
  {
    const PrecisionScope scope(Precision::bf16);
    backward(sum(linear(x, w1, b1)));
  }
  CHECK(testing::max_abs_diff(dx_cached, x.grad()) == 0.0);
  CHECK(testing::max_abs_diff(dx_changed, x.grad()) > 0.0);

  // invalidate() drops the copies the last step did not use (only w1's was read since the one before)
  cache.invalidate();
  CHECK(cache.bytes() == hid * in * 2);
}

// linear under bf16 products saves x as a bf16 copy for dw = dy^T x, made once and read by the
// forward product too (functions_matmul.cpp). The products are those of rounding x while packing,
// bit for bit: y, dx and dw equal ops::gemm_bf16 on the fp32 operands. x's fp32 values are not
// kept: with x an intermediate (here mul_scalar's output) held by nothing else, the tape holds
// 2 bytes per value of x instead of 4. A product that stays fp32 (one row against W^T: the forward
// of a single token) still reads x in fp32, and the backward's dw reads the copy.
TEST_CASE("precision.linear_saves_bf16_activation") {
  const Bf16Everywhere bf16;
  Generator gen(29);
  const auto run = [&](int64_t R, int64_t in, int64_t out) {
    CAPTURE(R);
    Tensor x = randn({R, in}, gen).requires_grad_(), w = randn({out, in}, gen).requires_grad_();
    Tensor b = randn({out}, gen).requires_grad_();
    const Tensor dy = randn({R, out}, gen);
    Tensor y;
    {
      const PrecisionScope scope(Precision::bf16);
      y = linear(x, w, b);
      backward(y, dy);
    }
    // the same products with x rounded while packing (R >= 3: the forward runs in bf16 too)
    Tensor y_ref = Tensor::empty({R, out}), dw_ref = Tensor::empty({out, in}),
           dx_ref = Tensor::empty({R, in});
    ops::Gemm g = ops::gemm_desc(R, out, in, false, true);
    g.bias = b.data();
    if (R >= 3)
      ops::gemm_bf16(y_ref.data(), ops::operand(x.data()), ops::operand(w.data()), g);
    else
      ops::gemm(y_ref.data(), x.data(), w.data(), g);
    ops::gemm_bf16(dw_ref.data(), ops::operand(dy.data()), ops::operand(x.data()),
                   ops::gemm_desc(out, in, R, true, false));
    ops::gemm_bf16(dx_ref.data(), ops::operand(dy.data()), ops::operand(w.data()),
                   ops::gemm_desc(R, in, out, false, false));
    CHECK(testing::max_abs_diff(y, y_ref) == 0.0);
    CHECK(testing::max_abs_diff(w.grad(), dw_ref) == 0.0);
    CHECK(testing::max_abs_diff(x.grad(), dx_ref) == 0.0);
  };
  run(37, 70, 40);
  run(1, 33, 20);  // the forward's one row stays fp32 (ops::bf16_pays)
  run(2, 32, 17);

  // What the tape holds between forward and backward: x's bf16 copy instead of x.
  const int64_t R = 64, in = 128, out = 32;
  Tensor x = randn({R, in}, gen).requires_grad_(), w = randn({out, in}, gen).requires_grad_();
  const auto held_after_forward = [&](Precision p) {
    const PrecisionScope scope(p);
    Tensor y;
    const int64_t before = storage_pool_stats().live_bytes;
    {
      const Tensor h = mul_scalar(x, 0.5f);  // an intermediate only linear reads
      y = linear(h, w, Tensor());
    }
    const int64_t held = storage_pool_stats().live_bytes - before;
    backward(sum(y));
    return held;
  };
  const int64_t fp32 = held_after_forward(Precision::fp32), bf16_held = held_after_forward(Precision::bf16);
  // y and h (fp32) against y and h's copy (bf16): R * in * 2 bytes fewer. Exactly, because every
  // size here (8192, 4096, 2048 floats) is one of the storage pool's size classes (tensor.cpp).
  // With TAPEGRAD_BF16_ACTIVATIONS=packing (meson test autograd-bf16-packing) the tape holds h
  // itself, as in fp32, and the products above are the same.
  CHECK(fp32 - bf16_held == (bf16_activations_saved() ? R * in * 2 : 0));
}

// relu_dropout_linear = linear(relu_dropout(h)) in one op: under bf16 products (forced here, so the
// fused path runs on every CPU) it writes D(relu(h)) in bf16 only, in chunks, threads taking ranges
// of them; y and every gradient equal the two ops' bit for bit, and it draws from the generator what
// relu_dropout draws. 301 x 129 values: an odd count, more chunks than the threaded path needs, the
// last chunk partial; 37 x 70 one chunk; 2 rows keep the forward in fp32 (ops::bf16_pays), so the
// op is the two ops there; fp32 products and eval mode too.
TEST_CASE("precision.relu_dropout_linear_matches_linear_of_relu_dropout") {
  const Bf16Everywhere bf16;
  Generator gen(31);
  const auto run = [&](int64_t R, int64_t in, int64_t out, Precision prec, bool training) {
    CAPTURE(R);
    CAPTURE(static_cast<int>(prec));
    CAPTURE(training);
    Tensor h = randn({R, in}, gen), w = randn({out, in}, gen), b = randn({out}, gen);
    const Tensor dy = randn({R, out}, gen, false);
    const auto pass = [&](bool fused) {
      for (Tensor t : {h, w, b}) t.zero_grad();
      Generator drops(77);
      const PrecisionScope scope(prec);
      const Tensor y = fused ? relu_dropout_linear(h, 0.3f, training, drops, w, b)
                             : linear(relu_dropout(h, 0.3f, training, drops), w, b);
      backward(y, dy);
      return std::pair{std::vector<Tensor>{y.detach(), h.grad(), w.grad(), b.grad()}, drops.next_u64()};
    };
    const auto [fused, fused_next] = pass(true);
    const auto [apart, apart_next] = pass(false);
    for (size_t i = 0; i < fused.size(); ++i) {
      CAPTURE(i);
      CHECK(testing::max_abs_diff(fused[i], apart[i]) == 0.0);
    }
    CHECK(fused_next == apart_next);
    // dropout did drop some of the kept (positive) values: h's gradient is 0 on more than half
    int64_t zeros = 0;
    for (float v : h.grad().to_vector()) zeros += v == 0.0f;
    if (training) CHECK(zeros > R * in * 6 / 10);
  };
  for (Precision prec : {Precision::bf16, Precision::fp32}) {
    run(301, 129, 40, prec, true);
    run(37, 70, 40, prec, true);
    run(2, 32, 17, prec, true);
  }
  run(37, 70, 40, Precision::bf16, false);
}

// gelu_linear under bf16 products (forced here): its products round gelu(h) while packing, which
// gives linear(gelu(h))'s products on its bf16 copy of gelu(h): y and every gradient equal bit for
// bit, for both GELU forms (301 x 129 values, odd; 37 x 70; 2 rows, whose forward stays fp32). (Not
// for fp32 denormals just below 2^-126, which the dot paths' packing flushes: see linear.) Making
// gelu(h) straight into bf16 in chunks, as relu_dropout_linear does, measured the same GPT-2 step
// on a Zen 4 (2026-12-02): not kept.
TEST_CASE("precision.gelu_linear_bf16_matches_linear_of_gelu") {
  const Bf16Everywhere bf16;
  Generator gen(33);
  const PrecisionScope scope(Precision::bf16);
  for (const GeluApprox approx : {GeluApprox::none, GeluApprox::tanh})
    for (const auto& [R, in, out] :
         {std::tuple<int64_t, int64_t, int64_t>{301, 129, 40}, {37, 70, 40}, {2, 32, 17}}) {
      CAPTURE(R);
      CAPTURE(static_cast<int>(approx));
      Tensor h = randn({R, in}, gen), w = randn({out, in}, gen), b = randn({out}, gen);
      const Tensor dy = randn({R, out}, gen, false);
      const auto pass = [&](bool fused) {
        for (Tensor t : {h, w, b}) t.zero_grad();
        const Tensor y = fused ? gelu_linear(h, w, b, approx) : linear(gelu(h, approx), w, b);
        backward(y, dy);
        return std::vector<Tensor>{y.detach(), h.grad(), w.grad(), b.grad()};
      };
      const std::vector<Tensor> fused = pass(true), apart = pass(false);
      for (size_t i = 0; i < fused.size(); ++i) {
        CAPTURE(i);
        CHECK(testing::max_abs_diff(fused[i], apart[i]) == 0.0);
      }
    }
}

// The fused attention op (attention(), 8 or more queries) under bf16: its products run in bf16
// where the active kernels have bf16 products for it (ops::AttentionBf16: a CPU with AVX512_BF16),
// as the same ops::Attention with bf16 set computes them, and its backward follows the forward's
// precision whatever the scope is then; elsewhere (bf16 products forced on the widen path, or AMX)
// it keeps fp32 products, bit for bit. Which of the two runs here is the active table's; each is
// checked against the kernel called directly.
TEST_CASE("precision.fused_attention_follows_the_tables_bf16_products") {
  const Bf16Everywhere forced;  // Precision::bf16 is effective on every machine
  Generator gen(31);
  const int64_t B = 2, T = 12, H = 2, dh = 16, C = 3 * H * dh;
  Tensor x = randn({B, T, C}, gen).requires_grad_();
  const Tensor r = randn({B, T, H * dh}, gen);
  const AttentionSpec spec{.heads = H,
                           .d_head = dh,
                           .q_col = 0,
                           .k_col = H * dh,
                           .v_col = 2 * H * dh,
                           .scale = 0.25f,
                           .causal = true};
  const Run lo = run_in(Precision::bf16, {x}, r, [&] { return attention(x, x, spec); });
  const Run hi = run_in(Precision::fp32, {x}, r, [&] { return attention(x, x, spec); });

  // The kernel called directly on the same operands, with and without the table's bf16 products.
  ops::Attention a;
  a.B = B, a.H = H, a.T = a.S = T, a.d_head = dh, a.q = x.data(), a.k = x.data() + H * dh,
  a.v = x.data() + 2 * H * dh, a.ldq = a.ldk = a.ldv = C, a.q_batch = a.kv_batch = T * C, a.scale = 0.25f,
  a.causal = true, a.bf16 = ops::active().attention_bf16;
  std::vector<float> out(static_cast<size_t>(B * T * H * dh)), dx(static_cast<size_t>(x.numel()), 0.0f);
  ops::attention_forward(out.data(), a);
  ops::attention_backward(dx.data(), dx.data() + H * dh, dx.data() + 2 * H * dh, r.data(), a);
  CHECK(testing::max_abs_diff(lo.y, Tensor::from_data(lo.y.shape(), out)) == 0.0);
  CHECK(testing::max_abs_diff(lo.grads[0], Tensor::from_data(x.shape(), dx)) == 0.0);
  if (ops::active().attention_bf16) {
    CHECK(testing::max_abs_diff(lo.y, hi.y) > 0.0);  // rounded
  } else {
    CHECK(testing::max_abs_diff(lo.y, hi.y) == 0.0);
    CHECK(testing::max_abs_diff(lo.grads[0], hi.grads[0]) == 0.0);
  }
}
