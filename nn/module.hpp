// Module: a node in a tree of layers that owns parameters under stable dotted names.
//
// A module registers its own parameters (register_parameter) and its sub-modules
// (register_module); named_parameters() walks the tree depth-first in registration order and
// joins names with dots, e.g. "transformer.encoder.layers.0.self_attn.in_proj_weight". The
// order and the names follow PyTorch, so a state_dict maps one to one (docs/ARCHITECTURE.md).
//
// Tensors returned by named_parameters() are handles that alias the parameter storage: writing
// into their data() (a checkpoint load) changes the model, and their grad() is the parameter's.
//
// Sub-modules are registered by address, so a Module is neither copyable nor movable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"

namespace tg::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = delete;
  Module& operator=(Module&&) = delete;

  // Every parameter of this module and its sub-modules, depth-first, with dotted names.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  // The parameter with this dotted name; throws std::out_of_range naming it if there is none.
  Tensor parameter(const std::string& name) const;
  int64_t num_parameters() const;  // total element count

  // Training mode switches dropout on; it propagates to every sub-module.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Drops the gradient of every parameter (the next backward allocates zeroed buffers).
  void zero_grad();

 protected:
  // Makes t a leaf that requires grad and records it under `name`. Returns the stored handle.
  Tensor& register_parameter(const std::string& name, Tensor t);
  // Records a sub-module. An empty name splices the child's parameters into this module's
  // namespace (used where PyTorch has no intermediate module, e.g. a FeedForward's linear1/2
  // sit directly in the encoder layer).
  void register_module(const std::string& name, Module& child);

 private:
  void collect(const std::string& prefix, NamedTensors& out) const;

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

// The first parameter (in the given order) whose gradient holds a NaN or an Inf, described as
// "<name> (nan at element i of [shape])"; nullopt when every defined gradient is finite.
std::optional<std::string> first_non_finite_gradient(const NamedTensors& params);
// The same for the parameter values themselves.
std::optional<std::string> first_non_finite_parameter(const NamedTensors& params);

// Initialisers (in place, no autograd). fan_in/fan_out are read from a 2-D weight [out, in].
void xavier_uniform_(Tensor& w, Generator& gen);
void uniform_(Tensor& t, float lo, float hi, Generator& gen);
void fill_(Tensor& t, float value);

}  // namespace tg::nn
