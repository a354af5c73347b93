// Reductions: sum and mean, over all elements or one axis.
#include <fmt/format.h>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"

namespace tg {

// forward: y = sum_i a_i   (shape [])
// saves:   a's shape
// grad:    da = dy broadcast to a's shape
Tensor sum(const Tensor& a) {
  double s = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.data()[i];
  Tensor y = Tensor::scalar(static_cast<float>(s));
  if (Node* n = Tape::current().record("sum", y, {a})) {
    n->backward = [shape = a.shape()](const Tensor& dy, Grads& g) { g.accumulate(0, broadcast_to(dy, shape)); };
  }
  return y;
}

}  // namespace tg
