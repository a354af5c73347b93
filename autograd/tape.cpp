#include "autograd/tape.hpp"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "autograd/functions.hpp"
#include "autograd/profile.hpp"
#include "ops/kernels.hpp"

namespace tg {

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() {
  return t_grad_enabled;
}
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) {
  t_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  t_grad_enabled = prev_;
}

Tape& Tape::current() {
  thread_local Tape tape;
  return tape;
}

// A tensor's autograd state as a node refers to it (null for an undefined optional input), with
// its shape noted: gradient buffers are allocated from it after the tensor itself may be gone.
static std::shared_ptr<AutogradMeta> track(const Tensor& t) {
  if (!t.defined()) return nullptr;
  const std::shared_ptr<AutogradMeta>& m = t.impl()->autograd;
  m->shape = t.shape();
  return m;
}

Node* Tape::record(const char* op, Tensor& out, std::span<const Tensor> inputs) {
  if (!t_grad_enabled) return nullptr;
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return nullptr;
  Node& n = nodes_.emplace_back();
  n.op = op;
  n.inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) n.inputs.push_back(track(t));
  n.output = track(out);
  n.output->requires_grad = true;
  n.output->node = static_cast<int64_t>(nodes_.size()) - 1;
  n.output->tape_epoch = epoch_;
  if (profile::detail::g_on) profile::detail::on_record(op);
  return &n;
}

void Tape::clear() {
  nodes_.clear();  // keeps capacity: the next step's nodes reuse the vector
  ++epoch_;
}

bool Grads::needs(size_t i) const {
  const auto& in = node_.inputs.at(i);
  return in && in->requires_grad;
}

static std::shared_ptr<TensorImpl> ensure_grad(AutogradMeta& t) {
  if (!t.grad) {
    Tensor g = Tensor::zeros(t.shape);
    t.grad = g.impl_ptr();
  }
  return t.grad;
}

float* Grads::buffer(size_t i) {
  AutogradMeta& in = *node_.inputs.at(i);
  auto g = ensure_grad(in);
  return g->storage->data + g->offset;
}

float* Grads::buffer(size_t i, bool& overwrite) {
  AutogradMeta& in = *node_.inputs.at(i);
  overwrite = !in.grad;
  if (overwrite) in.grad = Tensor::empty(in.shape).impl_ptr();
  return in.grad->storage->data + in.grad->offset;
}

void Grads::accumulate(size_t i, const Tensor& g) {
  AutogradMeta& in = *node_.inputs.at(i);
  const AutogradMeta& out = *node_.output;
  if (!in.grad && !handed_over_ && !out.retains_grad && out.grad && g.impl() == out.grad.get() &&
      g.shape() == in.shape) {
    in.grad = out.grad;
    handed_over_ = true;
    return;
  }
  const Tensor reduced = g.shape() == in.shape ? g : sum_to(g, in.shape);
  add_scaled(i, reduced, 1.0f);
}

void Grads::add_scaled(size_t i, const Tensor& g, float s) {
  if (g.numel() != numel_of(node_.inputs.at(i)->shape))
    throw std::logic_error(fmt::format("Grads::add_scaled: {} values for an input of shape {}", g.numel(),
                                       shape_str(node_.inputs.at(i)->shape)));
  bool overwrite = false;
  float* dst = buffer(i, overwrite);
  if (overwrite) {  // the first contribution: a copy, not zeros + add
    if (s != 1.0f)
      ops::scale(dst, g.data(), s, g.numel());
    else
      ops::copy(dst, g.data(), g.numel());
  } else {
    ops::axpy(dst, g.data(), s, g.numel());
  }
}

void Grads::take(size_t i, Tensor& g, float s) {
  AutogradMeta& in = *node_.inputs.at(i);
  if (g.shape() != in.shape)
    throw std::logic_error(fmt::format("Grads::take: a gradient of shape {} for an input of shape {}",
                                       shape_str(g.shape()), shape_str(in.shape)));
  const std::shared_ptr<TensorImpl>& impl = g.impl_ptr();
  const bool plain = impl.use_count() == 1 && impl->storage.use_count() == 1 && impl->offset == 0 &&
                     impl->storage->size == g.numel() && !impl->autograd->requires_grad;
  if (last_run_ && !in.grad && plain) {
    if (s != 1.0f) ops::scale(g.data(), s, g.numel());
    in.grad = impl;
    g = Tensor();
    return;
  }
  add_scaled(i, g, s);
}

// Runs the backward rules of nodes[root_node], nodes[root_node - 1], ..., nodes[0]: the tape is in
// topological order, so each node's output gradient is complete when its rule runs.
static void walk(std::vector<Node>& nodes, int64_t root_node, bool retain_graph, bool prof) {
  for (int64_t i = root_node; i >= 0; --i) {
    Node& n = nodes[static_cast<size_t>(i)];
    AutogradMeta& out = *n.output;
    if (!out.grad) continue;  // nothing flowed here: this node does not lead to root
    Grads grads(n, !retain_graph);
    const Tensor dout(out.grad);
    if (prof) {
      const int64_t t0 = profile::detail::now_ns();
      n.backward(dout, grads);
      profile::detail::on_backward_node(n.op, profile::detail::now_ns() - t0);
    } else {
      n.backward(dout, grads);
    }
    if (!out.retains_grad) out.grad.reset();  // a non-leaf's gradient is not kept
    if (!retain_graph) n.backward = nullptr;  // releases what the rule saved
  }
}

void backward(const Tensor& root, const Tensor& seed, bool retain_graph) {
  if (!root.defined()) throw std::invalid_argument("backward: undefined tensor");
  if (!root.requires_grad())
    throw std::invalid_argument(
        fmt::format("backward: tensor of shape {} does not require grad (no input of the computation "
                    "requires grad, or it was computed under NoGradGuard)",
                    shape_str(root.shape())));
  if (seed.defined() && seed.shape() != root.shape())
    throw std::invalid_argument(fmt::format("backward: seed shape {} does not match tensor shape {}",
                                            shape_str(seed.shape()), shape_str(root.shape())));
  if (!seed.defined() && root.numel() != 1)
    throw std::invalid_argument(
        fmt::format("backward: called on a non-scalar tensor of shape {} without a seed gradient; "
                    "pass a seed of that shape or reduce it to a scalar first",
                    shape_str(root.shape())));
  Tape& tape = Tape::current();
  AutogradMeta& r = *root.impl()->autograd;
  const bool stale = r.node >= 0 && r.tape_epoch != tape.epoch();
  if (stale)
    throw std::logic_error(
        fmt::format("backward: the tape that produced this tensor of shape {} was already cleared (backward "
                    "was run on it before, or an earlier backward was interrupted by an error; use "
                    "retain_graph to run backward twice, or run the forward pass again)",
                    shape_str(root.shape())));

  NoGradGuard no_grad;  // backward rules compute values only
  const bool prof = profile::detail::g_on;
  if (prof) profile::detail::on_backward_begin();
  r.shape = root.shape();  // a leaf root was never recorded by track(), so its shape is set here
  {
    TensorImpl& rg = *ensure_grad(r);
    float* dst = rg.storage->data + rg.offset;
    if (seed.defined())
      ops::axpy(dst, seed.data(), 1.0f, seed.numel());
    else
      dst[0] += 1.0f;
  }
  auto& nodes = tape.nodes();
  try {
    walk(nodes, r.node, retain_graph, prof);
  } catch (...) {
    // A rule threw (say, out of memory) after earlier rules released what they saved: this tape can
    // no longer run backward, so it is cleared, and a second backward() on it names the cause.
    if (!retain_graph) tape.clear();
    throw;
  }
  const int64_t t_clear = prof ? profile::detail::now_ns() : 0;
  if (!retain_graph) tape.clear();
  if (prof) profile::detail::on_backward_end(profile::detail::now_ns() - t_clear);
}

std::string to_dot(const Tape& tape) {
  std::string s = "digraph tape {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n";
  std::unordered_map<const AutogradMeta*, std::string> producer;  // tensor -> DOT id of its op node
  int leaves = 0;
  const auto& nodes = tape.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const std::string id = fmt::format("op{}", i);
    s += fmt::format("  {} [shape=ellipse, label=\"{}\\n{}\"];\n", id, n.op, shape_str(n.output->shape));
    for (const auto& in : n.inputs) {
      if (!in) continue;
      auto it = producer.find(in.get());
      std::string src;
      if (it != producer.end()) {
        src = it->second;
      } else {
        src = fmt::format("leaf{}", leaves++);
        const std::string label = in->name.empty() ? (in->requires_grad ? "param" : "const") : in->name;
        s += fmt::format("  {} [shape=box, style={}, label=\"{}\\n{}\"];\n", src,
                         in->requires_grad ? "solid" : "dashed", label, shape_str(in->shape));
        producer[in.get()] = src;
      }
      s += fmt::format("  {} -> {};\n", src, id);
    }
    producer[n.output.get()] = id;
  }
  s += "}\n";
  return s;
}

}  // namespace tg
