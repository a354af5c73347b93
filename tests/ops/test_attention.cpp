// Fused attention (ops::Attention) on every arch: forward and backward vs ops::ref on awkward
// sizes (d_head below, at and above the register tile's width, odd query and key counts, several
// row blocks), with the causal and key-padding masks, dropout, heads read from column blocks of
// wider rows, and the three gradients written into one buffer (self-attention's fused
// projection); the gradients also against central finite differences of the forward; a NaN score
// reaches its output row and no other. The products on a bf16 unit (Attention::bf16, the AVX512_BF16
// table): forward within the rounding's bound, backward close, and a NaN past a block's keys kept
// out of it.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "tests/ops/ops_test_util.hpp"

namespace {
using namespace tg::ops;
using tg::ops::test::check_close;
using tg::ops::test::fd_grad;

struct AttnCase {
  int64_t B, H, T, S, d;
  bool causal, pad, shared;  // shared: Q, K, V column blocks of one [B, T, .] source (T == S)
  float dropout;
  std::string name() const {
    return "B" + std::to_string(B) + " H" + std::to_string(H) + " T" + std::to_string(T) + " S" +
           std::to_string(S) + " d" + std::to_string(d) + (causal ? " causal" : "") + (pad ? " padded" : "") +
           (shared ? " shared" : "") + (dropout > 0 ? " dropout" : "");
  }
};

// The sources and the Attention over them: q_src [B, T, ldq] holds Q at column 1 (one spare column
// before it, one after), kv_src [B, S, ldk] holds K at column 2 and V after it; shared: one
// [B, T, 3 H d + 1] source with Q, K, V at columns 1, 1 + H d, 1 + 2 H d.
struct AttnData {
  std::vector<float> q_src, kv_src;
  std::vector<uint8_t> mask;
  Attention a;
  int64_t q_off = 0, k_off = 0, v_off = 0;

  AttnData(const AttnCase& c, uint32_t seed) {
    const int64_t hd = c.H * c.d;
    a.B = c.B, a.H = c.H, a.T = c.T, a.S = c.S, a.d_head = c.d;
    a.scale = 0.7f;
    a.causal = c.causal;
    if (c.shared) {
      const int64_t ld = 3 * hd + 1;
      kv_src = test::random_vec(c.B * c.T * ld, seed, -1.5f, 1.5f);
      q_off = 1, k_off = 1 + hd, v_off = 1 + 2 * hd;
      a.ldq = a.ldk = a.ldv = ld;
      a.q_batch = a.kv_batch = c.T * ld;
    } else {
      const int64_t ldq = hd + 2, ldk = 2 * hd + 3;
      q_src = test::random_vec(c.B * c.T * ldq, seed, -1.5f, 1.5f);
      kv_src = test::random_vec(c.B * c.S * ldk, seed + 1, -1.5f, 1.5f);
      q_off = 1, k_off = 2, v_off = 2 + hd;
      a.ldq = ldq, a.ldk = a.ldv = ldk;
      a.q_batch = c.T * ldq, a.kv_batch = c.S * ldk;
    }
    if (c.pad) {  // key s of row b hidden when (s + b) % 3 == 2; the last row has every key hidden
      mask.assign(static_cast<size_t>(c.B * c.S), 0);
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t s = 0; s < c.S; ++s) mask[b * c.S + s] = b == c.B - 1 && c.B > 1 ? 1 : (s + b) % 3 == 2;
      a.key_mask = mask.data();
    }
    if (c.dropout > 0) {
      a.seed = 0x1234567890abcdefull;
      a.drop_below = dropout_threshold(c.dropout);
      a.drop_scale = dropout_scale(c.dropout);
    }
    point();
  }
  float* q_base() { return q_src.empty() ? kv_src.data() : q_src.data(); }
  void point() { a.q = q_base() + q_off, a.k = kv_src.data() + k_off, a.v = kv_src.data() + v_off; }
};

void check_attention_case(const KernelTable& t, const AttnCase& c, uint32_t seed) {
  AttnData in(c, seed);
  const Attention& a = in.a;
  const std::string name = std::string(t.name) + " attention " + c.name();
  const int64_t out_n = c.B * c.T * c.H * c.d;
  std::vector<float> got(static_cast<size_t>(out_n), std::nanf("")), want = got;
  ref::table().attention_forward(want.data(), a);
  t.attention_forward(got.data(), a);
  check_close(got, want, 1e-5, 1e-5, name + " forward");

  // Backward accumulates onto what the gradient buffers hold.
  const auto dout = test::random_vec(out_n, seed + 7);
  const size_t qn = in.q_src.size(), kvn = in.kv_src.size();
  std::vector<float> dq_got = test::random_vec(static_cast<int64_t>(std::max<size_t>(qn, 1)), seed + 8);
  std::vector<float> dkv_got = test::random_vec(static_cast<int64_t>(kvn), seed + 9);
  std::vector<float> dq_want = dq_got, dkv_want = dkv_got;
  auto grads = [&](std::vector<float>& dq, std::vector<float>& dkv) {
    float* qb = c.shared ? dkv.data() : dq.data();
    return std::array<float*, 3>{qb + in.q_off, dkv.data() + in.k_off, dkv.data() + in.v_off};
  };
  const auto gw = grads(dq_want, dkv_want), gg = grads(dq_got, dkv_got);
  ref::table().attention_backward(gw[0], gw[1], gw[2], dout.data(), a);
  t.attention_backward(gg[0], gg[1], gg[2], dout.data(), a);
  check_close(dkv_got, dkv_want, 1e-4, 1e-4, name + " backward dK, dV" + (c.shared ? ", dQ" : ""));
  if (!c.shared) check_close(dq_got, dq_want, 1e-4, 1e-4, name + " backward dQ");

  // Each gradient alone (the others null): the same values.
  if (!c.shared) {
    std::vector<float> dv_only = test::random_vec(static_cast<int64_t>(kvn), seed + 9), dv_want = dv_only;
    ref::table().attention_backward(nullptr, nullptr, dv_want.data() + in.v_off, dout.data(), a);
    t.attention_backward(nullptr, nullptr, dv_only.data() + in.v_off, dout.data(), a);
    check_close(dv_only, dv_want, 1e-4, 1e-4, name + " backward dV alone");
    std::vector<float> dq_only = test::random_vec(static_cast<int64_t>(qn), seed + 8), dq_only_want = dq_only;
    ref::table().attention_backward(dq_only_want.data() + in.q_off, nullptr, nullptr, dout.data(), a);
    t.attention_backward(dq_only.data() + in.q_off, nullptr, nullptr, dout.data(), a);
    check_close(dq_only, dq_only_want, 1e-4, 1e-4, name + " backward dQ alone");
  }
}

void attention_matches_ref(const KernelTable& t) {
  const bool quick = test::quick();
  std::vector<AttnCase> cases = {
      // B, H, T, S, d, causal, pad, shared, dropout
      {1, 1, 1, 1, 1, false, false, false, 0.0f},
      {2, 3, 7, 9, 5, false, true, false, 0.0f},
      {2, 2, 13, 13, 16, true, false, true, 0.0f},
      {3, 2, 12, 33, 32, true, true, false, 0.25f},
      {2, 1, 40, 17, 33, true, false, false, 0.0f},  // T > S: the first rows see no key
      {1, 2, 31, 70, 8, false, false, false, 0.1f},
      {2, 4, 64, 64, 32, true, false, true, 0.1f},  // bench_train's config M heads
      {1, 2, 25, 1, 4, false, false, false, 0.0f},
      {2, 1, 3, 0, 4, false, false, false, 0.0f},  // no keys: O = 0, no gradient
      {2, 2, 0, 6, 4, false, false, false, 0.0f},  // no queries: nothing written, no gradient
      {2, 1, 0, 3, 4, true, true, false, 0.1f},
  };
  if (!quick) {
    cases.push_back({1, 2, 300, 300, 64, true, false, true, 0.1f});  // several row blocks (S padded)
    cases.push_back({1, 1, 130, 1030, 24, false, true, false, 0.0f});
  }
  uint32_t seed = 1;
  for (const AttnCase& c : cases) check_attention_case(t, c, seed += 11);
}
TG_OPS_ARCH_TESTS("attention", "matches_ref", attention_matches_ref)

// A NaN in one query row (one head) makes that row's scores NaN: its softmax row comes out NaN, so
// its output row is NaN (the fault reaches the loss) and every other row is the reference's. With
// the causal mask, key padding and dropout on; rows in several blocks of query rows (8 to 24 rows a
// block by arch), among them rows whose first visible key in a vector is padded (-inf beside NaNs:
// a vector max can return the -inf, and the row must not then pass for fully masked).
void attention_nan_score_reaches_output(const KernelTable& t) {
  const AttnCase c{2, 2, 40, 40, 8, true, true, false, 0.25f};
  for (const int64_t nan_t : {2, 10, 17, 29, 33}) {
    AttnData in(c, 3);
    const int64_t nan_b = 0, nan_h = 1, ldq = in.a.ldq, hd = c.H * c.d;
    in.q_src[nan_b * in.a.q_batch + nan_t * ldq + in.q_off + nan_h * c.d + 3] = std::nanf("");
    const int64_t out_n = c.B * c.T * hd;
    std::vector<float> got(static_cast<size_t>(out_n), 0.0f), want = got;
    ref::table().attention_forward(want.data(), in.a);
    t.attention_forward(got.data(), in.a);
    const std::string name = std::string(t.name) + " attention, a NaN score in row " + std::to_string(nan_t);
    std::vector<float> got_rest, want_rest;
    int64_t nan_row_nans = 0;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.T; ++i)
        for (int64_t h = 0; h < c.H; ++h)
          for (int64_t j = 0; j < c.d; ++j) {
            const int64_t at = (b * c.T + i) * hd + h * c.d + j;
            if (b == nan_b && i == nan_t && h == nan_h) {
              nan_row_nans += std::isnan(got[at]);
            } else {
              got_rest.push_back(got[at]);
              want_rest.push_back(want[at]);
            }
          }
    CHECK_MESSAGE(nan_row_nans == c.d,
                  name << ": " << nan_row_nans << " of " << c.d << " outputs of its row are NaN");
    check_close(got_rest, want_rest, 1e-5, 1e-5, name + ": the other rows");
  }
}
TG_OPS_ARCH_TESTS("attention", "nan_score_reaches_output", attention_nan_score_reaches_output)

// The backward kernel against central differences of the forward, the loss sum(w * O), through
// the one source of a self-attention (so dQ, dK and dV land in one buffer). Runs on the scalar
// reference too (the specification).
void attention_gradcheck(const KernelTable& t) {
  for (const AttnCase& c : {AttnCase{2, 2, 5, 5, 3, true, true, true, 0.3f},
                            AttnCase{1, 2, 9, 9, 16, false, false, true, 0.0f}}) {
    AttnData in(c, 5);
    const int64_t out_n = c.B * c.T * c.H * c.d;
    const auto w = test::random_vec(out_n, 6);
    auto forward = [&](float* y, const float* x) {
      Attention a = in.a;
      a.q = x + in.q_off, a.k = x + in.k_off, a.v = x + in.v_off;
      t.attention_forward(y, a);
    };
    const std::vector<float> want = fd_grad(in.kv_src, w, forward);
    std::vector<float> got(in.kv_src.size(), 0.0f);
    t.attention_backward(got.data() + in.q_off, got.data() + in.k_off, got.data() + in.v_off, w.data(), in.a);
    check_close(got, want, 2e-3, 2e-2, std::string(t.name) + " attention gradcheck " + c.name());
  }
}
TG_OPS_ARCH_TESTS("attention", "gradcheck", attention_gradcheck)

// bf16 products (the dot table's AttentionBf16): the operands of every product rounded to bf16
// (u = 2^-8 relative), fp32 sums. Forward bound per output element (i, c) of a head, from the
// fp32 reference's P: each score s_ij = scale q_i . k_j moves by at most
// e_ij = |scale| (2u + u^2) sum_k |q_ik k_jk| (+ the fp32 sums' K 2^-24 of the same sum), so the
// softmax row's weights by at most a factor exp(+-2 E_i), E_i = max_j e_ij; then D(P) and V are
// rounded (2u + u^2 relative per term of D(P) V). So
//   |O_ic - O'_ic| <= ((exp(2 E_i) - 1) (1 + 2u + u^2) + 2u + u^2) sum_j D(P)_ij |v_jc| (+ 1e-6).
// The backward runs four more rounded products over the same P: each gradient (dQ, dK, dV) is
// checked against the fp32 reference to 3% of its own largest value, a tolerance (the rounding of
// differences of such products; not a derived bound: the largest seen here is under 1%), and every
// check requires the largest error to be above 1e-4 of that value: the rounding happened.
// The bounds of one query row's d outputs (b, h, t), as above.
std::vector<double> bf16_forward_bounds(const AttnData& in, const std::vector<float>& P, int64_t b, int64_t h,
                                        int64_t t) {
  const Attention& a = in.a;
  const double u = 1.0 / 256, eps = 2 * u + u * u;
  const float* q = a.q + b * a.q_batch + t * a.ldq + h * a.d_head;
  const float* p = P.data() + ((b * a.H + h) * a.T + t) * a.S;
  double E = 0;
  std::vector<double> pv(static_cast<size_t>(a.d_head), 0.0);
  for (int64_t s = 0; s < a.S; ++s) {
    const float* k = a.k + b * a.kv_batch + s * a.ldk + h * a.d_head;
    const float* v = a.v + b * a.kv_batch + s * a.ldv + h * a.d_head;
    double qk = 0;
    for (int64_t x = 0; x < a.d_head; ++x) qk += std::abs(static_cast<double>(q[x]) * k[x]);
    E = std::max(E, std::abs(a.scale) * (eps + a.d_head * 0x1p-24) * qk);
    for (int64_t x = 0; x < a.d_head; ++x) pv[x] += p[s] * std::abs(static_cast<double>(v[x]));
  }
  for (double& x : pv) x = ((std::exp(2 * E) - 1) * (1 + eps) + eps + a.S * 0x1p-24) * x + 1e-6;
  return pv;
}

// D(P) of the reference, [B, H, T, S]: the reference's O of heads W = max(S, d) wide, Q and K
// zero-padded to W (the same scores) and V one-hot (V[s] = e_s), so that O[t, s] = D(P)[t, s].
std::vector<float> reference_dp(const AttnData& in) {
  const Attention& a = in.a;
  const int64_t B = a.B, H = a.H, T = a.T, S = a.S, d = a.d_head, W = std::max(S, d), ld = H * W;
  std::vector<float> q(static_cast<size_t>(B * T * ld), 0.0f), k(static_cast<size_t>(B * S * ld), 0.0f);
  std::vector<float> v = k, out(q.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t x = 0; x < d; ++x)
          q[(b * T + t) * ld + h * W + x] = a.q[b * a.q_batch + t * a.ldq + h * d + x];
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t x = 0; x < d; ++x)
          k[(b * S + s) * ld + h * W + x] = a.k[b * a.kv_batch + s * a.ldk + h * d + x];
        v[(b * S + s) * ld + h * W + s] = 1.0f;
      }
    }
  Attention e = a;
  e.d_head = W, e.q = q.data(), e.k = k.data(), e.v = v.data();
  e.ldq = e.ldk = e.ldv = ld, e.q_batch = T * ld, e.kv_batch = S * ld;
  ref::table().attention_forward(out.data(), e);
  std::vector<float> P(static_cast<size_t>(B * H * T * S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s) P[((b * H + h) * T + t) * S + s] = out[(b * T + t) * ld + h * W + s];
  return P;
}

// Largest |got - want| over the largest |want|, CHECKed against limit and required above floor.
void check_relative(const std::vector<float>& got, const std::vector<float>& want, double limit,
                    const std::string& what) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  INFO(what << ": largest error " << diff << " of largest value " << scale);
  CHECK(diff <= limit * scale);
  CHECK(diff >= 1e-4 * scale);  // the products were rounded
}

void attention_bf16_products(const KernelTable& t) {
  REQUIRE_MESSAGE(t.attention_bf16 != nullptr, t.name << " " << t.gemm_bf16_path << ": no bf16 attention");
  std::vector<AttnCase> cases = {
      // B, H, T, S, d, causal, pad, shared, dropout
      {2, 3, 7, 9, 5, false, true, false, 0.0f},
      {3, 2, 12, 33, 32, true, true, false, 0.25f},
      {2, 1, 40, 17, 33, true, false, false, 0.0f},
      {2, 4, 64, 64, 32, true, false, true, 0.1f},    // config M's heads
      {1, 2, 50, 51, 64, true, false, false, 0.0f},   // S = T + 1: odd key counts in causal blocks
      {1, 1, 30, 600, 40, false, true, false, 0.0f},  // K past one KC block in P V
      {1, 1, 30, 31, 160, true, false, false, 0.0f},  // odd key counts, d_head past 4 panels
  };
  if (!test::quick()) cases.push_back({1, 1, 520, 521, 16, true, false, false, 0.0f});  // odd counts past KC
  uint32_t seed = 900;
  for (const AttnCase& c : cases) {
    AttnData in(c, seed += 13);
    for (float& x : in.q_src) x /= 3;  // scores of a trained model's size: |s| up to about 2-8
    for (float& x : in.kv_src) x /= 3;
    in.a.bf16 = t.attention_bf16;
    const Attention& a = in.a;
    const std::string name = std::string(t.name) + " bf16 attention " + c.name();
    const int64_t out_n = c.B * c.T * c.H * c.d;
    std::vector<float> got(static_cast<size_t>(out_n)), want(got.size());
    ref::table().attention_forward(want.data(), a);
    t.attention_forward(got.data(), a);
    const std::vector<float> P = reference_dp(in);
    int64_t over = 0;
    double worst = 0;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t tt = 0; tt < c.T; ++tt)
        for (int64_t h = 0; h < c.H; ++h) {
          const std::vector<double> bound = bf16_forward_bounds(in, P, b, h, tt);
          for (int64_t x = 0; x < c.d; ++x) {
            const size_t i = static_cast<size_t>(((b * c.T + tt) * c.H + h) * c.d + x);
            const double err = std::abs(static_cast<double>(got[i]) - want[i]);
            over += !(err <= bound[x]);
            worst = std::max(worst, err / bound[x]);
          }
        }
    INFO(name << ": forward, largest error / bound " << worst);
    CHECK(over == 0);
    if (c.S > 0 && c.T > 0) CHECK(worst >= 0.01);  // the rounding happened

    const auto dout = test::random_vec(out_n, seed + 7);
    std::vector<float> dq_got(std::max<size_t>(in.q_src.size(), 1), 0.0f), dkv_got(in.kv_src.size(), 0.0f);
    std::vector<float> dq_want = dq_got, dkv_want = dkv_got;
    auto ptrs = [&](std::vector<float>& dq, std::vector<float>& dkv) {
      float* qb = c.shared ? dkv.data() : dq.data();
      return std::array<float*, 3>{qb + in.q_off, dkv.data() + in.k_off, dkv.data() + in.v_off};
    };
    const auto gw = ptrs(dq_want, dkv_want), gg = ptrs(dq_got, dkv_got);
    ref::table().attention_backward(gw[0], gw[1], gw[2], dout.data(), a);
    t.attention_backward(gg[0], gg[1], gg[2], dout.data(), a);
    // each gradient against its own largest value: dQ, dK, dV are column blocks of their sources
    const int64_t hd = c.H * c.d;
    auto block = [&](const std::vector<float>& src, int64_t rows, int64_t ld, int64_t off) {
      std::vector<float> out;
      for (int64_t r = 0; r < rows; ++r)
        out.insert(out.end(), src.begin() + r * ld + off, src.begin() + r * ld + off + hd);
      return out;
    };
    const int64_t kv_rows = c.B * (c.shared ? c.T : c.S);
    check_relative(block(dkv_got, kv_rows, a.ldk, in.k_off), block(dkv_want, kv_rows, a.ldk, in.k_off), 0.03,
                   name + " backward dK");
    check_relative(block(dkv_got, kv_rows, a.ldv, in.v_off), block(dkv_want, kv_rows, a.ldv, in.v_off), 0.03,
                   name + " backward dV");
    const std::vector<float>& dq_g = c.shared ? dkv_got : dq_got;
    const std::vector<float>& dq_w = c.shared ? dkv_want : dq_want;
    check_relative(block(dq_g, c.B * c.T, a.ldq, in.q_off), block(dq_w, c.B * c.T, a.ldq, in.q_off), 0.03,
                   name + " backward dQ");
  }

  // A NaN in K and V at key 49 (S = T + 1, causal): on avx512's blocks of query rows (24 forward, 48
  // backward: MR = 12 times kAttentionRowTiles and kAttentionRowTilesBackward) the rows 0..47 see at
  // most keys 0..48, an odd count in every block (25 and 49 forward, 49 backward), so each block's
  // last k pair holds its first unseen key: their outputs and dQ rows stay finite and unchanged.
  AttnData in({1, 1, 50, 51, 32, true, false, false, 0.0f}, 77);
  for (float& x : in.q_src) x /= 3;
  for (float& x : in.kv_src) x /= 3;
  in.a.bf16 = t.attention_bf16;
  const int64_t rows = 48, d = 32;
  std::vector<float> clean(static_cast<size_t>(50 * d)), got(clean.size());
  t.attention_forward(clean.data(), in.a);
  std::vector<float> dout = test::random_vec(50 * d, 78), dq_clean(in.q_src.size(), 0.0f), dq_got = dq_clean;
  t.attention_backward(dq_clean.data() + in.q_off, nullptr, nullptr, dout.data(), in.a);
  const int64_t nan_key = rows + 1;  // 49
  in.kv_src[nan_key * in.a.ldk + in.k_off + 3] = std::nanf("");
  in.kv_src[nan_key * in.a.ldk + in.v_off + 5] = std::nanf("");
  t.attention_forward(got.data(), in.a);
  t.attention_backward(dq_got.data() + in.q_off, nullptr, nullptr, dout.data(), in.a);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t x = 0; x < d; ++x) {
      INFO("row " << r << " column " << x);
      CHECK(got[r * d + x] == clean[r * d + x]);
      CHECK(dq_got[r * in.a.ldq + in.q_off + x] == dq_clean[r * in.a.ldq + in.q_off + x]);
    }
}
TG_OPS_BF16_TEST("attention", avx512, dot, "bf16_products", attention_bf16_products)

}  // namespace
