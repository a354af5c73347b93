// The tape in ten lines (the README's first example, compiled so that it stays true): a tiny
// expression, the tape it records drawn as Graphviz DOT, then backward() and the gradient.
//
//   build/examples/tape_tour                 prints the DOT text and d loss / d w
//   build/examples/tape_tour | dot -Tsvg     (the DOT part) draws the tape
#include <fmt/format.h>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"

using namespace tg;

int main() {
  Generator gen(0);
  Tensor w = Tensor::normal({3, 2}, 0.f, 1.f, gen).requires_grad_().set_name("w");
  Tensor x = Tensor::from_data({4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Tensor loss = mean(tanh(matmul(x, w)));  // each op appends one node to the tape
  fmt::print("{}\n", to_dot());            // the tape as Graphviz DOT
  loss.backward();                         // walks the tape in reverse, clears it
  fmt::print("{}\n", w.grad());            // d loss / d w
  return 0;
}
