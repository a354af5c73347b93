#include "autograd/tensor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "autograd/profile.hpp"
#include "autograd/tape.hpp"
#include "ops/kernels.hpp"

namespace tg {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(s));
    n *= d;
  }
  return n;
}

int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op, const Shape& shape) {
  const int64_t a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim)
    throw std::out_of_range(fmt::format("{}: axis {} out of range for shape {}", op, axis, shape_str(shape)));
  return a;
}

// ---- storage pool --------------------------------------------------------------------------
// Freed buffers are kept in per-class free lists and handed out again for any size of the same
// class: from the second training step on, the forward and backward passes allocate exactly the
// sizes they freed. Classes: multiples of 16 floats up to 256, then 4 per power of two
// (2^k * {1, 1.25, 1.5, 1.75}), so a buffer is less than 25% larger than asked for and decoding
// lengths 1..1000 touch a few dozen classes instead of a thousand sizes. The pool's footprint
// (live + free bytes) is capped at twice the peak of live bytes: a steady training step, whose
// free lists hold what its next step allocates again, stays well under it, while a workload
// whose sizes keep changing returns its surplus to the system instead of hoarding it.
namespace {
constexpr size_t kAlign = 64;
struct Pool {
  std::mutex mu;
  std::unordered_map<int64_t, std::vector<float*>> free;
  int64_t live = 0, peak = 0, cached = 0, misses = 0, released = 0;  // bytes, bytes, bytes, counts
  int64_t peak_since_mark = 0;                                       // bytes
  ~Pool() {
    for (auto& [n, v] : free)
      for (float* p : v) ::operator delete[](p, std::align_val_t{kAlign});
  }
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tensors may outlive static destruction order
  return *p;
}
// The size classes. Small buffers round up to whole 64-byte lines (kLineFloats): a scalar or a bias
// costs one line, and the pool's 64-byte alignment keeps every buffer on its own lines. From
// kSmallMax floats on, kClassesPerOctave classes per power of two: a buffer is then
// less than 1/kClassesPerOctave (25%) larger than asked for, while decoding lengths 1..1000
// touch a few dozen classes instead of a thousand sizes.
constexpr int64_t kLineFloats = 16;
constexpr int64_t kSmallMax = 256;
constexpr int64_t kClassesPerOctave = 4;
// The capacity (floats) of n's size class.
int64_t size_class(int64_t n) {
  if (n <= kSmallMax)
    return std::max<int64_t>(kLineFloats, (n + kLineFloats - 1) / kLineFloats * kLineFloats);
  int64_t pow2 = kSmallMax;
  while (pow2 * 2 < n) pow2 *= 2;  // pow2 < n <= 2 * pow2
  const int64_t step = pow2 / kClassesPerOctave;
  return (n + step - 1) / step * step;  // pow2 * {1.25, 1.5, 1.75, 2}
}
constexpr int64_t bytes_of(int64_t floats) {
  return floats * static_cast<int64_t>(sizeof(float));
}
}  // namespace

StoragePoolStats storage_pool_stats() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return {p.misses, p.live, p.peak, p.cached, p.released, p.peak_since_mark};
}

int64_t storage_pool_mark() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.peak_since_mark = p.live;
  return p.live;
}

int64_t storage_pool_misses() {
  return storage_pool_stats().misses;
}

Storage::Storage(int64_t n) : size(n) {
  const int64_t cap = size_class(n);
  if (profile::detail::g_on) profile::detail::on_alloc(n * static_cast<int64_t>(sizeof(float)), false);
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.live += bytes_of(cap);
    p.peak = std::max(p.peak, p.live);
    p.peak_since_mark = std::max(p.peak_since_mark, p.live);
    auto it = p.free.find(cap);
    if (it != p.free.end() && !it->second.empty()) {
      data = it->second.back();
      it->second.pop_back();
      p.cached -= bytes_of(cap);
      return;
    }
    ++p.misses;
  }
  if (profile::detail::g_on) profile::detail::on_alloc(0, true);
  try {
    data = static_cast<float*>(
        ::operator new[](static_cast<size_t>(cap) * sizeof(float), std::align_val_t{kAlign}));
  } catch (...) {
    std::lock_guard<std::mutex> lock(p.mu);
    p.live -= bytes_of(cap);
    throw;
  }
}

Storage::~Storage() {
  const int64_t cap = size_class(size);
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.live -= bytes_of(cap);
    if (p.live + p.cached + bytes_of(cap) <= 2 * p.peak) {  // the pool's footprint stays <= 2x the peak
      p.free[cap].push_back(data);
      p.cached += bytes_of(cap);
      return;
    }
    ++p.released;
  }
  ::operator delete[](data, std::align_val_t{kAlign});
}

// ---- creation ------------------------------------------------------------------------------
static Tensor make(const Shape& shape) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->storage = std::make_shared<Storage>(numel_of(shape));
  return Tensor(std::move(impl));
}

Tensor Tensor::empty(const Shape& shape) {
  return make(shape);
}
Tensor Tensor::zeros(const Shape& shape) {
  return full(shape, 0.0f);
}
Tensor Tensor::ones(const Shape& shape) {
  return full(shape, 1.0f);
}
Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = make(shape);
  ops::fill(t.data(), value, t.numel());  // threaded: a gradient's zeros can be a large buffer
  return t;
}
Tensor Tensor::arange(int64_t n) {
  return arange(0.0f, static_cast<float>(n), 1.0f);
}
Tensor Tensor::arange(float start, float stop, float step) {
  if (step == 0.0f) throw std::invalid_argument("arange: step must be non-zero");
  const double span = (static_cast<double>(stop) - start) / step;
  const int64_t n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  Tensor t = make({n});
  for (int64_t i = 0; i < n; ++i) t.data()[i] = start + static_cast<float>(i) * step;
  return t;
}
Tensor Tensor::from_data(const Shape& shape, std::span<const float> values) {
  if (numel_of(shape) != static_cast<int64_t>(values.size()))
    throw std::invalid_argument(fmt::format("from_data: shape {} needs {} values, got {}", shape_str(shape),
                                            numel_of(shape), values.size()));
  Tensor t = make(shape);
  std::copy(values.begin(), values.end(), t.data());
  return t;
}
Tensor Tensor::from_data(const Shape& shape, std::initializer_list<float> values) {
  return from_data(shape, std::span<const float>(values.begin(), values.size()));
}
Tensor Tensor::scalar(float v) {
  return full({}, v);
}
Tensor Tensor::uniform(const Shape& shape, float lo, float hi, Generator& gen) {
  Tensor t = make(shape);
  float* p = t.data();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = lo + (hi - lo) * gen.uniform();
  return t;
}
Tensor Tensor::normal(const Shape& shape, float mean, float stddev, Generator& gen) {
  Tensor t = make(shape);
  float* p = t.data();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = mean + stddev * static_cast<float>(gen.normal());
  return t;
}

// ---- properties ----------------------------------------------------------------------------
static TensorImpl& checked(const std::shared_ptr<TensorImpl>& p) {
  if (!p) throw std::logic_error("use of an undefined Tensor");
  return *p;
}
const Shape& Tensor::shape() const {
  return checked(impl_).shape;
}
int64_t Tensor::size(int64_t axis) const {
  return shape()[normalize_axis(axis, dim(), "size", shape())];
}
float* Tensor::data() {
  return checked(impl_).storage->data + impl_->offset;
}
const float* Tensor::data() const {
  return checked(impl_).storage->data + impl_->offset;
}
float Tensor::item() const {
  if (numel() != 1)
    throw std::invalid_argument(
        fmt::format("item: tensor of shape {} has {} elements, expected 1", shape_str(shape()), numel()));
  return data()[0];
}
float Tensor::at(std::initializer_list<int64_t> index) const {
  if (static_cast<int64_t>(index.size()) != dim())
    throw std::invalid_argument(fmt::format("at: {} indices for shape {}", index.size(), shape_str(shape())));
  int64_t flat = 0, d = 0;
  for (int64_t i : index) {
    if (i < 0 || i >= shape()[d])
      throw std::out_of_range(
          fmt::format("at: index {} out of range for axis {} of shape {}", i, d, shape_str(shape())));
    flat = flat * shape()[d++] + i;
  }
  return data()[flat];
}
std::vector<float> Tensor::to_vector() const {
  return {data(), data() + numel()};
}

// ---- autograd ------------------------------------------------------------------------------
bool Tensor::requires_grad() const {
  return checked(impl_).autograd->requires_grad;
}
Tensor& Tensor::requires_grad_(bool on) {
  if (!is_leaf())
    throw std::logic_error("requires_grad_: only leaf tensors can be marked; use detach() first");
  checked(impl_).autograd->requires_grad = on;
  return *this;
}
Tensor& Tensor::retain_grad() {
  checked(impl_).autograd->retains_grad = true;
  return *this;
}
bool Tensor::is_leaf() const {
  const AutogradMeta& t = *checked(impl_).autograd;
  return t.node < 0 || t.tape_epoch != Tape::current().epoch();
}
Tensor Tensor::grad() const {
  return checked(impl_).autograd->grad ? Tensor(impl_->autograd->grad) : Tensor();
}
void Tensor::zero_grad() {
  checked(impl_).autograd->grad.reset();
}
Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = checked(impl_).storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  return Tensor(std::move(impl));
}
Tensor Tensor::clone() const {
  Tensor t = make(shape());
  std::copy_n(data(), numel(), t.data());
  return t;
}
Tensor& Tensor::set_name(std::string name) {
  checked(impl_).autograd->name = std::move(name);
  return *this;
}
const std::string& Tensor::name() const {
  return checked(impl_).autograd->name;
}
void Tensor::backward() const {
  tg::backward(*this);
}
void Tensor::backward(const Tensor& seed) const {
  tg::backward(*this, seed);
}

// ---- printing ------------------------------------------------------------------------------
// tensor([[1.0000, 2.0000], [3.0000, 4.0000]], shape=[2, 2], requires_grad)
// Long axes show their first and last 3 entries.
static void print_rec(std::string& s, const float* p, const Shape& sh, size_t d, int64_t stride) {
  if (d == sh.size()) {
    s += fmt::format("{:.4f}", *p);
    return;
  }
  const int64_t n = sh[d], inner = n ? stride / n : 0;
  s += "[";
  for (int64_t i = 0; i < n; ++i) {
    if (n > 8 && i == 3) {
      s += "..., ";
      i = n - 3;
    }
    print_rec(s, p + i * inner, sh, d + 1, inner);
    if (i + 1 < n) s += d + 1 < sh.size() ? ",\n" + std::string(8 + d, ' ') : ", ";
  }
  s += "]";
}

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::string s = "tensor(";
  print_rec(s, data(), shape(), 0, numel());
  s += ", shape=" + shape_str(shape());
  if (requires_grad()) s += ", requires_grad";
  return s + ")";
}

}  // namespace tg
