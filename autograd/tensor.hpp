// Tensor: float32, a shape, 64-byte-aligned contiguous storage that views share.
//
// A Tensor is a cheap handle (a shared_ptr to its TensorImpl). Copies alias the same data, like
// torch.Tensor. Reshape (and a slice along the first axis) are views: they share the Storage with
// an offset. Everything else produces a new contiguous tensor.
//
// Autograd state (requires_grad, the accumulated gradient, the index of the tape node that produced
// the tensor, -1 for a leaf) lives in an AutogradMeta beside the data; see below and tape.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "autograd/random.hpp"

namespace tg {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t numel_of(const Shape& s);

// 64-byte-aligned float buffer. Allocation goes through a pool (tensor.cpp): freed buffers are
// kept in free lists by size class and handed out again, so a training step that allocates the
// same sizes as the previous one does not call malloc. Size classes (4 per doubling, at most 19%
// padding) let nearby sizes share buffers, and the pool's footprint (live + free bytes) stays at
// most twice the most that was ever in use at once (beyond that a freed buffer goes back to the
// system), so a workload of ever-changing sizes (decoding sentences of every length) cannot grow
// it without bound.
struct StoragePoolStats {
  int64_t misses = 0;           // allocations the pool could not serve (new memory)
  int64_t live_bytes = 0;       // held by tensors now
  int64_t peak_live_bytes = 0;  // the most ever held by tensors at once
  int64_t cached_bytes = 0;     // free buffers kept for reuse (live + cached <= 2 * peak_live)
  int64_t released = 0;         // freed buffers returned to the system (over the cap)
  int64_t peak_since_mark = 0;  // the most held by tensors at once since storage_pool_mark() (before any
                                // mark: since the start)
};
// The pool is one per process: these counters cover the tensors of every thread.
StoragePoolStats storage_pool_stats();
// Starts peak_since_mark afresh from the bytes held now, and returns them: the peak of one phase (a
// backward pass) is storage_pool_stats().peak_since_mark against that.
int64_t storage_pool_mark();
// storage_pool_stats().misses (tests use it to check that a repeated step allocates nothing new).
int64_t storage_pool_misses();
struct Storage {
  explicit Storage(int64_t n);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  float* data = nullptr;
  int64_t size = 0;
};

struct TensorImpl;

// The autograd state of a tensor, kept apart from its data. Tape nodes point at this, not at the
// TensorImpl: recording an op does not keep its inputs' or output's storage alive. A value lives
// as long as a user's handle or a backward rule's explicit save holds it (as in PyTorch, where the
// graph holds saved tensors, not every intermediate result), so an intermediate that no backward
// rule needs (a pre-activation, a dropout output, a residual sum) returns to the pool as soon as
// the forward pass has moved past it.
struct AutogradMeta {
  Shape shape;  // the tensor's shape, i.e. its gradient's (set when a node records it, or by backward for its
                // root)
  bool requires_grad = false;
  bool retains_grad = false;  // keep the gradient of a non-leaf after backward
  int64_t node = -1;          // tape node that produced this tensor, -1 for a leaf
  uint64_t tape_epoch = 0;    // which recording of the tape `node` refers to
  std::shared_ptr<TensorImpl> grad;
  std::string name;  // optional, used by DOT export and error messages
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;
  Shape shape;
  std::shared_ptr<AutogradMeta> autograd = std::make_shared<AutogradMeta>();
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- creation (all contiguous, requires_grad = false unless set) ---
  static Tensor empty(const Shape& shape);  // uninitialised
  static Tensor zeros(const Shape& shape);
  static Tensor ones(const Shape& shape);
  static Tensor full(const Shape& shape, float value);
  static Tensor arange(int64_t n);  // [0, 1, ..., n-1]
  static Tensor arange(float start, float stop, float step);
  static Tensor from_data(const Shape& shape, std::span<const float> values);
  static Tensor from_data(const Shape& shape, std::initializer_list<float> values);
  static Tensor scalar(float v);
  static Tensor uniform(const Shape& shape, float lo, float hi, Generator& gen);
  static Tensor normal(const Shape& shape, float mean, float stddev, Generator& gen);

  // --- properties ---
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t axis) const;  // negative axes count from the end
  int64_t numel() const { return numel_of(shape()); }
  float* data();
  const float* data() const;
  float item() const;  // the value of a one-element tensor
  float at(std::initializer_list<int64_t> index) const;
  std::vector<float> to_vector() const;

  // --- autograd ---
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // only on leaves
  Tensor& retain_grad();                   // keep a non-leaf's gradient after backward
  bool is_leaf() const;
  Tensor grad() const;    // undefined if no gradient has flowed here
  void zero_grad();       // drop the gradient
  Tensor detach() const;  // same storage, no autograd history
  Tensor clone() const;   // new storage, no autograd history
  Tensor& set_name(std::string name);
  const std::string& name() const;

  // Runs backward() on this tensor (see tape.hpp).
  void backward() const;
  void backward(const Tensor& seed) const;

  std::string str() const;  // readable printing (also via fmt)

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Tensors under names, in order: a model's parameters ("encoder.layers.0.norm1.weight", ...), an
// optimizer's state, the contents of a safetensors file.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Normalises a possibly negative axis; throws "<op>: axis A out of range for shape [..]".
int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op, const Shape& shape);

}  // namespace tg

// fmt::format("{}", tensor) prints like Tensor::str(). No format specs: the text is copied as is
// (which also keeps GCC 12's false -Wstringop-overflow in fmt's spec parser out of sanitizer builds).
template <>
struct fmt::formatter<tg::Tensor> {
  constexpr auto parse(fmt::format_parse_context& ctx) { return ctx.begin(); }
  template <class Ctx>
  auto format(const tg::Tensor& t, Ctx& ctx) const {
    const std::string s = t.str();
    return std::copy(s.begin(), s.end(), ctx.out());
  }
};
