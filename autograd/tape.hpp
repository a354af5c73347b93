// The tape (a Wengert list): every differentiable op appends one Node when grad mode is on and
// some input requires a gradient. Recording order is a topological order, so backward() simply
// seeds d(loss) = 1 and walks the nodes in reverse: no DFS, no dependency counting.
//
// A node's backward ACCUMULATES into its inputs' gradients (Grads::accumulate / Grads::buffer /
// Grads::take), so a value used by several ops receives the sum of their contributions by construction.
// Gradients for inputs that do not require one are skipped (Grads::needs).
//
// backward() releases each node's saved tensors as soon as its rule has run, and clears the tape at
// the end (unless retain_graph): storage returns to the pool (tensor.cpp), to be reused by the rest
// of the backward pass and by the next step's forward. The tape never holds an op's output itself.
#pragma once

#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "autograd/tensor.hpp"

namespace tg {

struct Node;

// What a node's backward writes into: the gradients of its inputs.
class Grads {
 public:
  // last_run: the rule runs for the last time (backward without retain_graph drops it after), so
  // it may hand over what it saved (take).
  Grads(Node& node, bool last_run) : node_(node), last_run_(last_run) {}
  // Does input i need a gradient? Skip the work when it does not.
  bool needs(size_t i) const;
  // The gradient buffer of input i (allocated and zeroed on first use), for kernels that +=.
  float* buffer(size_t i);
  // The gradient buffer of input i for a rule that writes ALL of it in one go: when input i has no
  // gradient yet, uninitialised memory and overwrite = true (the rule must store, not add: no
  // zero-fill pass, and a GEMM runs with beta = 0); otherwise the existing buffer and
  // overwrite = false (the rule must add). Only for rules that cover every element of the input.
  float* buffer(size_t i, bool& overwrite);
  // grad(input i) += g, where g may have the broadcast shape of the op's output: dimensions that
  // were broadcast are summed away here (sum_to), the one place broadcasting is undone.
  // When g is the node's output gradient itself (a pass-through: add, a residual) and input i has
  // no gradient yet, input i takes over that buffer instead of a copy (the output's gradient is
  // dropped after the rule anyway). At most one input per node, so inputs never share a buffer,
  // and never when the output keeps its gradient (retain_grad). A rule must not write into a
  // gradient of its inputs and then read dout again; none does.
  void accumulate(size_t i, const Tensor& g);
  // grad(input i) += s * g for a gradient g of input i's shape that the rule computed ahead and
  // saved (linear_cross_entropy makes its inputs' gradients in the forward pass). When input i has
  // no gradient yet, this is the rule's last run and g is a plain buffer of its own (the rule's copy
  // its only reference, not a view into a larger storage, not itself tracked), input i keeps g's
  // buffer (scaled in place when s != 1) and g is left empty: no second buffer of that size, no copy.
  // Otherwise g is copied (no gradient yet) or added, and stays as it was (a retained graph runs the
  // rule again).
  void take(size_t i, Tensor& g, float s);
  // grad(input i) += s * g for a g with input i's number of elements (its shape may differ:
  // reshape's dy), in one pass: stored (scaled) where input i has no gradient yet, else added.
  void add_scaled(size_t i, const Tensor& g, float s);

 private:
  Node& node_;
  bool last_run_;
  bool handed_over_ = false;  // the output gradient's buffer went to an input
};

using BackwardFn = std::function<void(const Tensor& dout, Grads& grads)>;

// A node refers to its inputs and output by their autograd state only (AutogradMeta, tensor.hpp):
// what the backward rule needs of their values it saves itself, in its closure. backward() drops
// the closure once the rule has run, so saved tensors return to the pool during the backward pass.
struct Node {
  const char* op = "";
  std::vector<std::shared_ptr<AutogradMeta>> inputs;
  std::shared_ptr<AutogradMeta> output;
  BackwardFn backward;
};

class Tape {
 public:
  static Tape& current();  // one tape per thread

  // Appends a node for `out` if grad mode is on and some input requires grad; marks `out` as
  // requiring grad and returns the node (set its backward). Returns nullptr when nothing is recorded.
  Node* record(const char* op, Tensor& out, std::span<const Tensor> inputs);
  Node* record(const char* op, Tensor& out, std::initializer_list<Tensor> inputs) {
    return record(op, out, std::span<const Tensor>(inputs.begin(), inputs.size()));
  }

  void clear();  // drops all nodes (and what they saved); bumps the epoch
  size_t size() const { return nodes_.size(); }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& nodes() { return nodes_; }
  uint64_t epoch() const { return epoch_; }

 private:
  std::vector<Node> nodes_;
  uint64_t epoch_ = 1;
};

// Grad mode (per thread). Off inside NoGradGuard: ops compute values only and record nothing.
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Reverse pass from `root`. A non-scalar root needs a seed of its shape. Leaves (and non-leaves
// marked retain_grad) keep their gradients; the tape is cleared unless retain_graph.
void backward(const Tensor& root, const Tensor& seed = {}, bool retain_graph = false);

// The recorded tape as Graphviz DOT: one node per op (name and output shape), one per leaf input
// (its name, or "leaf", and shape), edges from inputs to the ops that use them.
std::string to_dot(const Tape& tape = Tape::current());

}  // namespace tg
