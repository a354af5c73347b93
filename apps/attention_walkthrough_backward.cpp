// The walkthrough's backward part: L = sum(G * Z) through the self-attention block. Each gradient
// is derived by its formula (a few public ops each), compared with the gradient the tape computes
// (retain_grad on the intermediates) and checked against central differences of L.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "apps/attention_walkthrough_block.hpp"
#include "autograd/functions.hpp"
#include "autograd/tape.hpp"

namespace tg::walkthrough {

namespace {

constexpr double kStep = 1e-2;  // h: large enough that float32 rounding of L does not dominate
constexpr double kAtol = 1e-3, kRtol = 1e-2;

// L = sum(G * Z) in double, with no tape; `replace` stands in for one intermediate.
double loss(const Tensor& X, const Weights& w, const Tensor& M, const Tensor& G, const Replace* replace) {
  NoGradGuard no_grad;
  const Tensor Z = self_attention_block(X, w, M, G, replace).Z;
  double L = 0.0;
  for (int64_t i = 0; i < Z.numel(); ++i) L += static_cast<double>(Z.data()[i]) * G.data()[i];
  return L;
}

// Compares `formula` with the tape's gradient and with the central differences
// (L(x_i + h) - L(x_i - h)) / 2h, perturbing `target` (a weight or a stand-in) in place and
// restoring it. Every element when there are at most opt.fd_samples, else a seeded sample.
GradCheck check(Tensor target, const Tensor& formula, const Tensor& tape, const std::function<double()>& L,
                const Options& opt, Generator& gen) {
  GradCheck c;
  c.eps = kStep;
  c.total = target.numel();
  const Agreement vs_tape = agreement("", formula, tape);
  c.tape_diff = vs_tape.max_diff;
  c.tape_ok = vs_tape.ok;
  std::vector<int64_t> idx(static_cast<size_t>(c.total));
  std::iota(idx.begin(), idx.end(), 0);
  if (opt.fd_samples > 0 && c.total > opt.fd_samples) {
    for (size_t i = 0; i < static_cast<size_t>(opt.fd_samples); ++i)  // partial Fisher-Yates
      std::swap(idx[i], idx[i + gen.below(idx.size() - i)]);
    idx.resize(static_cast<size_t>(opt.fd_samples));
    std::sort(idx.begin(), idx.end());
  }
  for (int64_t i : idx) {
    float* x = target.data() + i;
    const float orig = *x;
    *x = static_cast<float>(orig + kStep);
    const double up = *x, Lp = L();
    *x = static_cast<float>(orig - kStep);
    const double down = *x, Lm = L();
    *x = orig;
    const double numeric = (Lp - Lm) / (up - down), ours = formula.data()[i];
    const double err = std::abs(ours - numeric), tol = kAtol + kRtol * std::abs(numeric);
    const bool finite = std::isfinite(ours) && std::isfinite(numeric);
    c.fd_error = std::max(c.fd_error, finite ? err : INFINITY);
    c.worst_ratio = std::max(c.worst_ratio, finite ? err / tol : INFINITY);
    c.fd_ok = c.fd_ok && finite && err <= tol;
    ++c.checked;
  }
  return c;
}

}  // namespace

Section backward_section(const Tensor& X_in, const Weights& w, const Tensor& M_in, const Tensor& G_in,
                         nn::MultiHeadAttention& mha, const std::vector<std::string>& tok, const Options& opt,
                         std::vector<Agreement>& agreements, std::string& tape_dot, std::string& fused_dot) {
  Tensor X = X_in, M = M_in, G = G_in;  // handles on the same tensors, named for the DOT
  X.set_name("X");
  G.set_name("G");
  const int64_t T = X.size(0), d = w.d_model(), H = w.heads, dk = w.d_k();
  const auto dims = index_labels(d), hd = head_labels(d, H);

  // ---- the tape: the same forward pass recorded, intermediates kept, one backward()
  Tape::current().clear();
  Block b = self_attention_block(X, w, M, G);
  Attention& t = b.att;
  for (Tensor* x : {&t.Q, &t.K, &t.V, &t.S, &t.P, &t.O, &t.Y}) x->retain_grad();
  tape_dot = to_dot();
  const size_t tape_nodes = Tape::current().size();
  b.L.backward();

  // ---- the engine's fused path on the same weights (one QKV projection, attention_probs,
  // attention_context) gives the tape the same gradients
  {
    mha.zero_grad();
    const Tensor A = reshape(b.A.detach(), {1, T, d});
    const Tensor Y = mha.self_attention(A, opt.causal);
    const Tensor Z = w.norm_first ? X + Y : layernorm(X + Y, w.ln_w, w.ln_b);
    const Tensor L = sum(Z * G);
    fused_dot = to_dot();
    L.backward();
    agreements.push_back(agreement("dW_q, dW_k, dW_v of the tape = the fused path's in_proj_weight.grad",
                                   concat({w.W_q.grad(), w.W_k.grad(), w.W_v.grad()}, 0),
                                   mha.in_proj_weight.grad()));
    agreements.push_back(agreement("dW_o of the tape = the fused path's out_proj.weight.grad", w.W_o.grad(),
                                   mha.out_proj.weight.grad()));
    mha.zero_grad();
  }

  // ---- the formulas, by hand
  NoGradGuard no_grad;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  // [T, d] -> [H, T, d_k] and back
  auto split = [&](const Tensor& x) { return permute(reshape(x, {T, H, dk}), {1, 0, 2}); };
  auto merge = [&](const Tensor& x) { return reshape(permute(x, {1, 0, 2}), {T, d}); };
  // Post-norm: Z = LN(R), R = X + Y. With xhat = (R - mean(R)) rstd, rstd = 1 / sqrt(var(R) + eps) and
  // g = gamma * dZ, row by row: dR = rstd (g - mean(g) - xhat mean(g xhat)); the residual passes dR
  // to Y unchanged. Pre-norm: Z = X + Y, dY = dZ.
  Tensor dY = G;
  if (!w.norm_first) {
    const Tensor R = X + t.Y, centred = R - mean(R, -1, true);
    const Tensor rstd = pow_scalar(mean(centred * centred, -1, true) + 1e-5f, -0.5f), xhat = centred * rstd;
    const Tensor g = G * w.ln_w;
    dY = rstd * (g - mean(g, -1, true) - xhat * mean(g * xhat, -1, true));
  }
  // Y = O W_o^T + b_o:  dW_o = dY^T O,  dO = dY W_o
  const Tensor dW_o = matmul(dY, t.O, true, false), dO = matmul(dY, w.W_o);
  // O_h = P_h V_h:  dP_h = dO_h V_h^T,  dV_h = P_h^T dO_h
  const Tensor dP = matmul(split(dO), split(t.V), false, true);
  const Tensor dV = merge(opt.wrong_rule == WrongRule::transpose ? matmul(t.P, split(dO))
                                                                 : matmul(t.P, split(dO), true, false));
  // P = softmax(S + M), row by row J = dP/dS = diag(p) - p p^T (symmetric):
  //   dS = J dP = P * (dP - rowsum(dP * P))
  const Tensor dS = opt.wrong_rule == WrongRule::softmax ? t.P * dP : t.P * (dP - sum(dP * t.P, -1, true));
  // S = Q_h K_h^T / sqrt(d_k):  dQ_h = dS_h K_h / sqrt(d_k),  dK_h = dS_h^T Q_h / sqrt(d_k)
  const float s = opt.wrong_rule == WrongRule::scale ? 1.0f : scale;
  const Tensor dQ = merge(matmul(dS, split(t.K)) * s);
  const Tensor dK = merge(matmul(dS, split(t.Q), true, false) * s);
  // Q = A W_q^T + b_q:  dW_q = dQ^T A  (and likewise for K and V)
  const Tensor dW_q = matmul(dQ, b.A, true, false), dW_k = matmul(dK, b.A, true, false),
               dW_v = matmul(dV, b.A, true, false);

  // ---- each one against the tape and central differences
  Generator gen(opt.seed + 1);
  auto of = [&](const char* name, const Tensor& value) {
    auto replace = std::make_shared<Replace>(Replace{name, value.clone()});
    return std::make_pair(replace->value,
                          std::function<double()>([&, replace] { return loss(X, w, M, G, replace.get()); }));
  };
  auto of_weight = [&](const Tensor& weight) {
    return std::make_pair(weight, std::function<double()>([&] { return loss(X, w, M, G, nullptr); }));
  };
  Section sec{
      "backward",
      "Backward: the gradients of a small loss",
      fmt::format("L = sum(G * Z), G fixed random numbers in [-1, 1) (--seed): as if the layers above sent "
                  "back dL/dZ = G. Each gradient is derived by its formula (a few public ops), compared with "
                  "the tape's (one backward() over the {} recorded nodes, retain_grad on the intermediates) "
                  "and checked against central differences (L(x + h) - L(x - h)) / 2h, h = {}, L in double: "
                  "an element passes when |formula - numeric| <= {} + {} |numeric|.",
                  tape_nodes, kStep, kAtol, kRtol),
      {}};
  auto add = [&](const char* id, const char* title, const char* formula, std::vector<Matrix> ms,
                 std::pair<Tensor, std::function<double()>> target, const Tensor& formula_value,
                 const Tensor& tape) {
    Step st{id, title, formula, std::move(ms), {}, {}};
    st.check = check(target.first, formula_value, tape, target.second, opt, gen);
    sec.steps.push_back(std::move(st));
  };
  sec.steps.push_back({"dZ", "The loss's gradient", "dZ = G", {matrix("dZ", G, tok, dims)}, {}, {}});
  add("dY", "Through the layer norm and the residual",
      w.norm_first ? "dY = dZ (Z = X + Y)"
                   : "dY = rstd (g - mean(g) - xhat mean(g xhat)), g = gamma * dZ, row by row",
      {matrix("dY", dY, tok, dims)}, of("Y", t.Y), dY, t.Y.grad());
  add("dW_o", "Output projection", "dW_o = dY^T O", {matrix("dW_o", dW_o, dims, hd)}, of_weight(w.W_o), dW_o,
      w.W_o.grad());
  add("dO", "Into the heads", "dO = dY W_o", {matrix("dO", dO, tok, hd)}, of("O", t.O), dO, t.O.grad());
  add("dV", "Values",
      opt.wrong_rule == WrongRule::transpose ? "dV_h = P_h dO_h   (WRONG on purpose: --wrong-rule transpose)"
                                             : "dV_h = P_h^T dO_h",
      {matrix("dV", dV, tok, hd)}, of("V", t.V), dV, t.V.grad());
  add("dP", "Attention weights", "dP_h = dO_h V_h^T", attention_maps("dP", dP, tok, tok), of("P", t.P), dP,
      t.P.grad());

  // The softmax Jacobian of one row, written out: the last query of head 0 (it sees every key).
  {
    const int64_t r = T - 1;
    const Tensor p = reshape(slice(slice(t.P, 0, 0, 1), 1, r, r + 1), {T, 1});
    Tensor J = matmul(p, p, false, true) * -1.0f;  // J = diag(p) - p p^T
    for (int64_t i = 0; i < T; ++i) J.data()[i * T + i] += p.data()[i];
    const Tensor dp = reshape(slice(slice(dP, 0, 0, 1), 1, r, r + 1), {T, 1});
    const Tensor Jdp = matmul(J, dp), ds = slice(slice(dS, 0, 0, 1), 1, r, r + 1);
    sec.steps.push_back(
        {"J",
         "The softmax Jacobian of one row",
         fmt::format(
             "J = dP[{0}]/dS[{0}] = diag(p) - p p^T for the row of '{0}', head 0; dS[{0}] = J dP[{0}]",
             tok[r]),
         {matrix("J", J, tok, tok), matrix("dP row", dp, {"dP"}, tok),
          matrix("J dP row", Jdp, {"J dP"}, tok)},
         {fmt::format("J dP equals the row of dS below: max |diff| = {:.1e}{}", max_abs_diff(Jdp, ds),
                      opt.wrong_rule == WrongRule::softmax ? " (not so with --wrong-rule softmax)" : "")},
         {}});
  }
  add("dS", "Through the softmax",
      opt.wrong_rule == WrongRule::softmax
          ? "dS = P * dP   (WRONG on purpose: --wrong-rule softmax drops the rowsum term)"
          : "dS = P * (dP - rowsum(dP * P)), row by row J dP",
      attention_maps("dS", dS, tok, tok), of("S", t.S), dS, t.S.grad());
  const char* fq = opt.wrong_rule == WrongRule::scale
                       ? "dQ_h = dS_h K_h   (WRONG on purpose: --wrong-rule scale)"
                       : "dQ_h = dS_h K_h / sqrt(d_k)";
  const char* fk = opt.wrong_rule == WrongRule::scale
                       ? "dK_h = dS_h^T Q_h   (WRONG on purpose: --wrong-rule scale)"
                       : "dK_h = dS_h^T Q_h / sqrt(d_k)";
  add("dQ", "Queries", fq, {matrix("dQ", dQ, tok, hd)}, of("Q", t.Q), dQ, t.Q.grad());
  add("dK", "Keys", fk, {matrix("dK", dK, tok, hd)}, of("K", t.K), dK, t.K.grad());
  add("dW_q", "Query weights", w.norm_first ? "dW_q = dQ^T A" : "dW_q = dQ^T X",
      {matrix("dW_q", dW_q, hd, dims)}, of_weight(w.W_q), dW_q, w.W_q.grad());
  add("dW_k", "Key weights", w.norm_first ? "dW_k = dK^T A" : "dW_k = dK^T X",
      {matrix("dW_k", dW_k, hd, dims)}, of_weight(w.W_k), dW_k, w.W_k.grad());
  add("dW_v", "Value weights", w.norm_first ? "dW_v = dV^T A" : "dW_v = dV^T X",
      {matrix("dW_v", dW_v, hd, dims)}, of_weight(w.W_v), dW_v, w.W_v.grad());
  return sec;
}

}  // namespace tg::walkthrough
