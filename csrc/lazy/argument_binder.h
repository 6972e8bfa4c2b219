// The tracer's third stage (tracer.cc): binding a traced call's arguments.
// Each argument becomes an operand of the node (a tensor's value, a scalar
// parameter, a position, a generator), an attribute, or both, and a slot of
// the Meta kernel's stack and words of the Meta-cache key.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/config.h"
#include "ir/node.h"
#include "lazy/layouts.h"
#include "lazy/lazy_tensor.h"
#include "lazy/op_signature.h"
#include "lazy/size_origins.h"
#include "lazy/trace_info.h"

namespace torch_neuron::lazy {

// One traced call: the op, its stack and where its arguments start (the
// tracer's stages take it; tracer.cc).
struct TracedCall {
  const c10::OperatorHandle& op;
  torch::jit::Stack* stack;
  const c10::FunctionSchema& schema;
  const TraceInfo& info;
  size_t num_args;
  size_t base;
  const TraceConfig& trace;  // the settings in force, read once per op

  const c10::IValue& arg(size_t i) const { return (*stack)[base + i]; }
};

// Binds one call's arguments. Reads the call's stack, never changes it.
class ArgumentBinder {
 public:
  // The Meta-cache key starts with the op's name and torch's default dtype
  // (op_signature.h).
  ArgumentBinder(const TracedCall& call, int device, bool size_generic_trace)
      : c_(call), device_(device), size_generic_trace_(size_generic_trace), signature_(call.info.name_hash) {
    // One allocation each for a call without lists (growing one element at a
    // time reallocated them two or three times per traced op).
    operands_.reserve(call.num_args);
    args_.reserve(call.num_args);
    meta_stack_.reserve(call.num_args);
    deferred_.reserve(call.num_args);
  }

  // Binds every argument. A reason when the op must take the CPU fallback.
  std::optional<std::string> Bind();

  std::vector<ir::Value>& operands() { return operands_; }
  std::vector<ir::Arg>& args() { return args_; }
  bool draws() const { return draws_; }
  // Whether a tensor operand's sizes came from data (LazyTensor::size_from_data).
  bool size_from_data() const { return size_from_data_; }
  // Marks the op's new results (a tensor it writes in place keeps its
  // sizes, and so its mark). Every one, whatever its shape: a rule by shape
  // would mark or not as counts happen to equal other sizes, and the graphs
  // would change with them.
  void MarkResultsSizeFromData(const std::vector<LazyTensorPtr>& results) const;
  ir::hash_t op_key() const { return signature_.Hash(); }
  // The Meta kernel's stack, its deferred meta tensors made (once: the stack
  // is moved out).
  torch::jit::Stack TakeMetaStack();

 private:
  std::optional<int32_t> TensorOperand(const at::Tensor& t);
  // Sets size_from_data_ from the call's neuron tensor arguments.
  void FindSizesFromData();
  // `element`: its place in its argument's list (0 for a single value).
  int32_t ScalarOperand(const c10::Scalar& s, size_t element = 0);
  int32_t PositionOperand(int64_t position, size_t element = 0);
  // Tells a region's SizeOrigins recorder (size_origins.h) where the
  // scalar leaf just bound for element `element` of argument arg_index_ came from.
  void NoteOrigin(const ir::NodePtr& leaf, size_t element);
  void BindTensorList(const c10::TypePtr& type, const c10::IValue& v);

  const TracedCall& c_;
  const int device_;
  // Every SymInt argument is bound as a position (tracer.h SetSizeGenericTrace).
  const bool size_generic_trace_;
  std::vector<ir::Value> operands_;
  std::vector<ir::Arg> args_;
  // The Meta kernel's stack, with placeholders where meta tensors go; those
  // are made (from `deferred_`) only if the Meta result is not cached.
  torch::jit::Stack meta_stack_;
  struct DeferredMeta {
    size_t position;  // in meta_stack_
    int element;      // in the list at `position`, or -1
    // The operand's own shape, in its node (immutable, and held by operands_
    // until the Meta stack is made): no copy for the usual cached call.
    const ir::Shape* shape;
    TensorLayout layout;
  };
  std::vector<DeferredMeta> deferred_;
  size_t list_position_ = 0;
  bool in_list_ = false;
  OpSignature signature_;
  bool draws_ = false;  // it takes a generator
  bool size_from_data_ = false;
  SizeOrigins* origins_ = nullptr;              // a size-generic region's recorder, if any
  bool origins_taken_ = false;                  // it was armed for this op
  size_t arg_index_ = 0;                        // the argument being bound
  std::vector<const LazyTensor*> tensor_args_;  // the call's neuron tensors (FindSizesFromData)
  // A view's base and an out= argument may be stale (see LazyTensor): the
  // view inherits it, the out= write replaces the values.
  bool exempt_from_stale_check_ = false;
};

}  // namespace torch_neuron::lazy
