// Matrix products: matmul (batched, broadcasting, either operand transposed) and linear.
//
// Both go through gemm(precision, ...) (autograd/precision.hpp): ops::gemm, C = alpha op(A) op(B) +
// beta C, or ops::gemm_bf16 under Precision::bf16, in the precision the forward ran in for both the
// forward and the backward products. Transposed operands are never copied:
// a transpose is a gemm flag plus the matching leading dimension, and the backward products are the
// same gemm with other flags. Gradients are accumulated with beta = 1 straight into the inputs'
// gradient buffers. The products with a weight as B (the forward's x W^T, backward's dx = dy W) of
// linear and gelu_linear go through weight_gemm, which reads the weight as a bf16 copy where a
// Bf16WeightCache is active (a decoding step's, or a training step's: each weight rounded once per
// step).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "autograd/broadcast_offsets.hpp"
#include "autograd/functions.hpp"
#include "autograd/precision.hpp"
#include "autograd/tape.hpp"
#include "ops/kernels.hpp"

namespace tg {

namespace {

// How one matmul maps onto gemm calls: the matrix sizes and, for every output batch entry i, the
// element offsets of its A, B and C matrices (a broadcast operand repeats an offset).
struct MatmulPlan {
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> oa, ob, oc;
};

// True when offs[i] == offs[0] + i * step for one step (then a single strided gemm covers them).
bool evenly_spaced(const std::vector<int64_t>& offs, int64_t& step) {
  step = offs.size() > 1 ? offs[1] - offs[0] : 0;
  for (size_t i = 2; i < offs.size(); ++i)
    if (offs[i] - offs[i - 1] != step) return false;
  return true;
}

// C[oc[i]] = alpha op(A[oa[i]]) op(B[ob[i]]) + beta C[oc[i]] for every batch entry i. One batched
// call when every operand is evenly spaced and the C blocks are distinct; otherwise one call per
// entry in order, so that entries sharing a C block (the gradient of a broadcast operand, beta = 1)
// accumulate without racing.
void gemm_batched(Precision prec, float* C, const float* A, const float* B, ops::Gemm g,
                  const std::vector<int64_t>& oc, const std::vector<int64_t>& oa,
                  const std::vector<int64_t>& ob) {
  if (oc.empty()) return;
  int64_t sc = 0, sa = 0, sb = 0;
  if (evenly_spaced(oc, sc) && (sc != 0 || oc.size() == 1) && evenly_spaced(oa, sa) &&
      evenly_spaced(ob, sb)) {
    g.batch = static_cast<int64_t>(oc.size());
    g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
    gemm(prec, C + oc[0], A + oa[0], B + ob[0], g);
    return;
  }
  g.batch = 1;
  for (size_t i = 0; i < oc.size(); ++i) gemm(prec, C + oc[i], A + oa[i], B + ob[i], g);
}

std::string operand_str(const Shape& s, bool trans) {
  return shape_str(s) + (trans ? "^T" : "");
}

MatmulPlan plan_matmul(const Shape& a, const Shape& b, bool trans_a, bool trans_b, Shape& out_shape) {
  if (a.size() < 2 || b.size() < 2)
    throw std::invalid_argument(fmt::format("matmul: operands must be at least 2-D: {} @ {}",
                                            operand_str(a, trans_a), operand_str(b, trans_b)));
  const size_t na = a.size(), nb = b.size();
  MatmulPlan p;
  p.M = trans_a ? a[na - 1] : a[na - 2];
  p.K = trans_a ? a[na - 2] : a[na - 1];
  const int64_t Kb = trans_b ? b[nb - 1] : b[nb - 2];
  p.N = trans_b ? b[nb - 2] : b[nb - 1];
  if (p.K != Kb)
    throw std::invalid_argument(fmt::format("matmul: inner dimensions differ: {} @ {}",
                                            operand_str(a, trans_a), operand_str(b, trans_b)));
  const Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(batch_a, batch_b, "matmul");
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(fmt::format("matmul: batch dimensions cannot be broadcast: {} @ {}",
                                            operand_str(a, trans_a), operand_str(b, trans_b)));
  }
  out_shape = batch;
  out_shape.push_back(p.M);
  out_shape.push_back(p.N);
  if (batch_b.empty() && !trans_a) {
    // [..., M, K] @ [K, N]: the batch folds into the rows, one [batch*M, K] @ [K, N] product.
    p.M *= numel_of(batch);
    p.oa = p.ob = p.oc = {0};
    return p;
  }
  p.oa = detail::broadcast_offsets(batch_a, batch, p.M * p.K);
  p.ob = detail::broadcast_offsets(batch_b, batch, p.K * p.N);
  p.oc = detail::broadcast_offsets(batch, batch, p.M * p.N);
  return p;
}

}  // namespace

// forward: y = op(a) @ op(b) per batch entry, op(x) = x^T (last two axes) when trans_x;
//          op(a) is [M, K], op(b) is [K, N], leading batch dimensions broadcast
// saves:   a, b (views of the inputs, no copies), the precision of the products
// grads:   with A = op(a), B = op(b):  dA = dy B^T,  dB = A^T dy, so
//          da = dy op(b)^T        (or, when trans_a, da = dA^T = op(b) dy^T)
//          db = op(a)^T dy        (or, when trans_b, db = dB^T = dy^T op(a))
//          each summed over the batch entries where that operand was broadcast
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  Shape out_shape;
  MatmulPlan p = plan_matmul(a.shape(), b.shape(), trans_a, trans_b, out_shape);
  Tensor y = Tensor::empty(out_shape);
  const Precision prec = effective_precision(compute_precision());
  gemm_batched(prec, y.data(), a.data(), b.data(), ops::gemm_desc(p.M, p.N, p.K, trans_a, trans_b), p.oc,
               p.oa, p.ob);
  if (Node* n = Tape::current().record("matmul", y, {a, b})) {
    n->backward = [p = std::move(p), a = a.detach(), b = b.detach(), trans_a, trans_b, prec](const Tensor& dy,
                                                                                             Grads& g) {
      const int64_t M = p.M, N = p.N, K = p.K;
      if (g.needs(0)) {
        float* da = g.buffer(0);
        if (!trans_a)  // da [M, K] += dy [M, N] @ op(b)^T
          gemm_batched(prec, da, dy.data(), b.data(), ops::gemm_desc(M, K, N, false, !trans_b, 1.0f, 1.0f),
                       p.oa, p.oc, p.ob);
        else  // da [K, M] += op(b) [K, N] @ dy^T
          gemm_batched(prec, da, b.data(), dy.data(), ops::gemm_desc(K, M, N, trans_b, true, 1.0f, 1.0f),
                       p.oa, p.ob, p.oc);
      }
      if (g.needs(1)) {
        float* db = g.buffer(1);
        if (!trans_b)  // db [K, N] += op(a)^T @ dy [M, N]
          gemm_batched(prec, db, a.data(), dy.data(), ops::gemm_desc(K, N, M, !trans_a, false, 1.0f, 1.0f),
                       p.ob, p.oa, p.oc);
        else  // db [N, K] += dy^T @ op(a) [M, K]
          gemm_batched(prec, db, dy.data(), a.data(), ops::gemm_desc(N, K, M, true, trans_a, 1.0f, 1.0f),
                       p.ob, p.oc, p.oa);
      }
    };
  }
  return y;
}

// forward: y = x w^T + bias (one GEMM, the bias added in its store), x [..., in] read as R = numel/in
//          rows, w [out, in], bias [out] or none
// saves:   x, w (views), the precision of the products; where dw's product runs in bf16, x as a
//          bf16 copy instead of x (made once, read by the forward product too: see below)
// grads:   dx = dy w;  dw = dy^T x (summed over all R rows);  dbias = sum over rows of dy
namespace {
// linear's and gelu_linear's shapes: x [..., in] read as R rows, w [out, in], bias [out] or none.
struct LinearShape {
  int64_t R, in, out;
  Shape y;  // x's shape with out features
};
LinearShape linear_shape(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias) {
  if (w.dim() != 2 || x.dim() < 1)
    throw std::invalid_argument(fmt::format("{}: need input [..., in] and weight [out, in], got {} and {}",
                                            op, shape_str(x.shape()), shape_str(w.shape())));
  const int64_t out = w.shape()[0], in = w.shape()[1];
  if (x.shape().back() != in)
    throw std::invalid_argument(fmt::format("{}: input {} has {} features but weight {} expects {}", op,
                                            shape_str(x.shape()), x.shape().back(), shape_str(w.shape()),
                                            in));
  if (bias.defined() && bias.shape() != Shape{out})
    throw std::invalid_argument(fmt::format("{}: bias {} does not match weight {} (expected [{}])", op,
                                            shape_str(bias.shape()), shape_str(w.shape()), out));
  const int64_t R = in ? x.numel() / in : numel_of(Shape(x.shape().begin(), x.shape().end() - 1));
  Shape y = x.shape();
  y.back() = out;
  return {R, in, out, y};
}
}  // namespace

// Under bf16 products, dw = dy^T x reads x rounded to bf16 (gemm_bf16 rounds an fp32 operand while
// packing). Where that product runs in bf16 and w will get a gradient, linear rounds x once, into a
// bf16 copy that the forward product reads as well (where it runs in bf16: not for the few-row
// products that stay fp32) and that the tape saves in place of x: the same values, so the same
// products bit for bit (but for fp32 denormals just below 2^-126 on the dot and AMX paths: their
// vcvtne2ps2bf16 flushes them while packing, f32_to_bf16 rounds them up to the smallest normal bf16);
// one conversion of x where there were two; and x's fp32 values are freed as soon as nothing else
// holds them (a layernorm's or the attention's output, read only by the next linear): half the
// bytes on the tape. An x that several linears read gets a copy from each. The copy lives in a
// float tensor's storage (two values per float), so it comes from and returns to the storage pool
// as tensors do.
namespace {
const ops::bf16* bf16_values(const Tensor& t) {
  return reinterpret_cast<const ops::bf16*>(t.data());
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  // plain names, not a structured binding: clang 14 (Debian 12) cannot capture one in a lambda
  const LinearShape shape = linear_shape("linear", x, w, bias);
  const int64_t R = shape.R, in = shape.in, out = shape.out;
  Tensor y = Tensor::empty(shape.y);
  ops::Gemm g = ops::gemm_desc(R, out, in, false, true);
  if (bias.defined()) g.bias = bias.data();  // added in the GEMM's store, not in a second pass
  const Precision prec = effective_precision(compute_precision());
  const ops::Gemm g_dw = ops::gemm_desc(out, in, R, true, false);
  Tensor xb;  // x rounded to bf16, where dw's product will read it so (see above)
  if (prec == Precision::bf16 && grad_enabled() && w.requires_grad() && bf16_activations_saved() &&
      ops::bf16_pays(&g_dw)) {
    xb = Tensor::empty({(x.numel() + 1) / 2});
    ops::f32_to_bf16(reinterpret_cast<ops::bf16*>(xb.data()), x.data(), x.numel());
  }
  if (xb.defined() && ops::bf16_pays(&g))  // (bf16 weights where a cache is active)
    weight_gemm(prec, y.data(), ops::operand(bf16_values(xb)), w, g);
  else
    weight_gemm(prec, y.data(), x.data(), w, g);
  if (Node* n = Tape::current().record("linear", y, {x, w, bias})) {
    // x itself only where its bf16 copy was not made
    n->backward = [x = xb.defined() ? Tensor() : x.detach(), xb, w = w.detach(), R, in, out, prec](
                      const Tensor& dy, Grads& g) {
      bool overwrite = false;  // a first contribution is stored (beta = 0), not added to zeros
      if (g.needs(0)) {        // dx [R, in] += dy [R, out] @ w [out, in]
        float* dx = g.buffer(0, overwrite);
        weight_gemm(prec, dx, dy.data(), w,
                    ops::gemm_desc(R, in, out, false, false, 1.0f, overwrite ? 0.0f : 1.0f));
      }
      if (g.needs(1)) {  // dw [out, in] += dy^T [out, R] @ x [R, in]
        float* dw = g.buffer(1, overwrite);
        const ops::Gemm gw = ops::gemm_desc(out, in, R, true, false, 1.0f, overwrite ? 0.0f : 1.0f);
        if (xb.defined())
          ops::gemm_bf16(dw, ops::operand(dy.data()), ops::operand(bf16_values(xb)), gw);
        else
          gemm(prec, dw, dy.data(), x.data(), gw);
      }
      if (g.needs(2)) ops::bias_backward(g.buffer(2), dy.data(), R, out);
    };
  }
  return y;
}

// forward: y = gelu(h) w^T + bias: the activation and the layer after it (a GPT MLP's second half)
//          as one op, h [..., in] read as R rows, w [out, in], bias [out] or none; gelu the exact
//          form or its tanh approximation (approx, as gelu() above)
// saves:   h, w (views), the precision of the products; not gelu(h), which linear(gelu(h)) would
//          keep beside h: backward recomputes it, one [R, in] tensor less on the tape per layer
// grads:   a = gelu(h) (recomputed);  dw = dy^T a;  dh = (dy w) * gelu'(h);  dbias = sum over rows of dy
//          (the same kernels in the same order as linear(gelu(h)): the same bits)
Tensor gelu_linear(const Tensor& h, const Tensor& w, const Tensor& bias, GeluApprox approx) {
  // plain names, not a structured binding: clang 14 (Debian 12) cannot capture one in a lambda
  const LinearShape shape = linear_shape("gelu_linear", h, w, bias);
  const bool tanh_form = approx == GeluApprox::tanh;
  const auto act = tanh_form ? ops::gelu_tanh_forward : ops::gelu_forward;
  const auto act_backward = tanh_form ? ops::gelu_tanh_backward : ops::gelu_backward;
  const int64_t R = shape.R, in = shape.in, out = shape.out;
  Tensor y = Tensor::empty(shape.y);
  ops::Gemm g = ops::gemm_desc(R, out, in, false, true);
  if (bias.defined()) g.bias = bias.data();
  const Precision prec = effective_precision(compute_precision());
  {
    Tensor a = Tensor::empty(h.shape());  // gelu(h), freed when the product is done
    act(a.data(), h.data(), h.numel());
    weight_gemm(prec, y.data(), a.data(), w, g);
  }
  if (Node* n = Tape::current().record(tanh_form ? "gelu_tanh_linear" : "gelu_linear", y, {h, w, bias})) {
    n->backward = [h = h.detach(), w = w.detach(), R, in, out, prec, act, act_backward](const Tensor& dy,
                                                                                        Grads& g) {
      bool overwrite = false;
      if (g.needs(1)) {  // dw [out, in] += dy^T [out, R] @ gelu(h) [R, in]
        Tensor a = Tensor::empty(h.shape());
        act(a.data(), h.data(), h.numel());
        float* dw = g.buffer(1, overwrite);
        gemm(prec, dw, dy.data(), a.data(),
             ops::gemm_desc(out, in, R, true, false, 1.0f, overwrite ? 0.0f : 1.0f));
      }
      if (g.needs(0)) {  // da [R, in] = dy [R, out] @ w [out, in];  dh += da * gelu'(h)
        Tensor da = Tensor::empty(h.shape());
        weight_gemm(prec, da.data(), dy.data(), w, ops::gemm_desc(R, in, out, false, false, 1.0f, 0.0f));
        act_backward(g.buffer(0), da.data(), h.data(), h.numel());
      }
      if (g.needs(2)) ops::bias_backward(g.buffer(2), dy.data(), R, out);
    };
  }
  return y;
}

// forward: y = D(relu(h)) w^T + bias: a Transformer feed-forward's second half in training, the
//          mask of D as relu_dropout draws it (one u64 from gen, the same hash, the same bits)
// saves:   the byte mask (keep && h > 0) and a = D(relu(h)) as linear would keep it: where the
//          products run in bf16 and the weight gradient reads a bf16 a (linear's bf16 copy), a is
//          written in bf16 straight away, in L1-sized chunks: no fp32 a is written and read back
//          again to be rounded (config M: a [4,096, 1,024] per layer, 16 MiB each way). Elsewhere
//          it is relu_dropout then linear, two nodes.
// grads:   dw = dy^T a;  da = dy w;  dh = da * mask / (1 - p);  dbias = sum over rows of dy
//          (the kernels of linear(relu_dropout(h)) in the same order: the same bits)
Tensor relu_dropout_linear(const Tensor& h, float p, bool training, Generator& gen, const Tensor& w,
                           const Tensor& bias) {
  const LinearShape shape = linear_shape("relu_dropout_linear", h, w, bias);
  const int64_t R = shape.R, in = shape.in, out = shape.out, n = h.numel();
  const Precision prec = effective_precision(compute_precision());
  ops::Gemm g = ops::gemm_desc(R, out, in, false, true);
  if (bias.defined()) g.bias = bias.data();
  const ops::Gemm g_dw = ops::gemm_desc(out, in, R, true, false);
  // linear's rule for its bf16 copy of x, and its forward reading that copy
  const bool bf16_a = training && p > 0.0f && p < 1.0f && prec == Precision::bf16 && grad_enabled() &&
                      w.requires_grad() && bf16_activations_saved() && ops::bf16_pays(&g_dw) &&
                      ops::bf16_pays(&g);
  if (!bf16_a) return linear(relu_dropout(h, p, training, gen), w, bias);

  const float keep_scale = ops::dropout_scale(p);
  const uint32_t drop_below = ops::dropout_threshold(p);
  const uint64_t seed = gen.next_u64();  // the draw relu_dropout makes
  Tensor mask = Tensor::empty({(n + 3) / 4});
  Tensor ab = Tensor::empty({(n + 1) / 2});  // a in bf16, two values per float
  uint8_t* const pm = reinterpret_cast<uint8_t*>(mask.data());
  ops::bf16* const pa = reinterpret_cast<ops::bf16*>(ab.data());
  const float* const ph = h.data();
  // Chunks of kChunk elements (an even count: a chunk's bf16 values start on a whole float): D(relu)
  // into a buffer on the stack, then rounded from there. Threads take contiguous ranges of chunks.
  constexpr int64_t kChunk = 4096;
  auto run = [&](int64_t lo, int64_t hi) {
    alignas(64) float buf[kChunk];
    for (int64_t c = lo; c < hi; c += kChunk) {
      const int64_t len = std::min(kChunk, hi - c);
      ops::dropout_forward(buf, pm + c, ph + c, len, seed, drop_below, keep_scale, true, c);
      ops::f32_to_bf16(pa + c, buf, len);
    }
  };
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks >= 8 && ops::num_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t per = (chunks + nt - 1) / nt;
      run(std::min(n, t * per * kChunk), std::min(n, (t + 1) * per * kChunk));
    }
  } else {
    run(0, n);
  }
  Tensor y = Tensor::empty(shape.y);
  weight_gemm(prec, y.data(), ops::operand(bf16_values(ab)), w, g);
  if (Node* node = Tape::current().record("relu_dropout_linear", y, {h, w, bias})) {
    node->backward = [mask, ab, w = w.detach(), R, in, out, n, keep_scale, prec](const Tensor& dy, Grads& g) {
      if (g.needs(0)) {  // da [R, in] = dy [R, out] @ w [out, in];  dh += da * mask / (1 - p)
        Tensor da = Tensor::empty({R, in});
        weight_gemm(prec, da.data(), dy.data(), w, ops::gemm_desc(R, in, out, false, false, 1.0f, 0.0f));
        bool overwrite = false;
        float* dh = g.buffer(0, overwrite);
        ops::dropout_backward(dh, da.data(), reinterpret_cast<const uint8_t*>(mask.data()), n, keep_scale,
                              overwrite);
      }
      if (g.needs(1)) {  // dw [out, in] += dy^T [out, R] @ a [R, in]
        bool overwrite = false;
        float* dw = g.buffer(1, overwrite);
        ops::gemm_bf16(dw, ops::operand(dy.data()), ops::operand(bf16_values(ab)),
                       ops::gemm_desc(out, in, R, true, false, 1.0f, overwrite ? 0.0f : 1.0f));
      }
      if (g.needs(2)) ops::bias_backward(g.buffer(2), dy.data(), R, out);
    };
  }
  return y;
}

}  // namespace tg
