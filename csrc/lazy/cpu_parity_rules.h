// The CPU's rules for neuron calls, each stated once with the CPU's message
// (part of the component in cpu_parity.h). Every path that makes a neuron call
// behave as the CPU's kernel calls these: neuron's Meta kernels (cpu_parity.cc:
// in-place and out= ops, CPU probes), the out= kernels at AutogradPrivateUse1
// and, under inference_mode, at Functionalize (out_checks.cc), neuron's in-place
// Functionalize kernels (neuron_inplace.cc), the foreach Meta kernels
// (foreach_meta.cc) and the tracer's shape inference (the Meta fix-ups).
//
//  - overlap: a written tensor whose own elements share memory; a written
//    tensor that overlaps another argument, by kernel family;
//  - in-place: the broadcast of the operands to self's shape; the cast of the
//    result into the written tensor's dtype (and the refs' words for it
//    turned into the CPU's);
//  - out=: autograd's refusal of arguments that require grad; an out view the
//    result would resize; a lenient out dtype the Meta kernel wants exact;
//  - foreach: the one 0-dim tensor of the Tensor forms;
//  - Meta fix-ups: where a Meta kernel gives other shapes or dtypes than the
//    CPU kernel returns (batch norm's saved statistics, embedding bags'
//    bookkeeping outputs, nansum over an empty dim list), and layouts where
//    the CPU's backend picks another than Meta (convolution: conv_layouts.h).
// Argument-only: the rules read metadata, never values, so they run at the call.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include <optional>
#include <string>
#include <vector>

#include "ir/shape.h"
#include "lazy/tensor_impl.h"

namespace torch_neuron::lazy {

// ---- Overlap ----------------------------------------------------------------

// The CPU's message for writing into a tensor whose elements share memory.
extern const char kOverlapMessage[];

// The CPU's check of a written tensor (an out, a foreach self) whose own
// elements share memory (an expanded tensor). Functionalization's write-back
// through expand would sum the copies of each element.
void CheckNoInternalOverlap(const at::Tensor& written);

// The same for an in-place op's self: the CPU refuses it unless `refuse` is
// false (the writes the CPU lets overlap, fill_ of an expanded tensor: op
// trait writes_overlapping_memory); those are refused by name where the call
// runs under functionalization (its write-back would sum the copies).
void CheckInPlaceSelfOverlap(const std::string& op_name, const at::Tensor& self, bool refuse);

// The CPU's checks of a written tensor against the op's other tensor
// arguments. Functionalization computes from the values before the write, so
// an overlap gives a result where the CPU refuses the call. By kernel family:
//  - elementwise kernels (TensorIterator: ops tagged pointwise, where, cumsum)
//    refuse a partial overlap; the same tensor in and out is fine;
//  - kernels that index, gather or concatenate (scatter*, index_put_,
//    index_copy_, index_add_, index_reduce_, put_; the out= forms of cat,
//    gather, index_select, take) refuse any overlap.
// Other ops (reductions, masked_fill_, index_fill_ ...) are left alone, as on
// the CPU. Whether `op` has one of these rules:
bool HasOverlapRule(const c10::OperatorHandle& op);
// Checks `written` (an argument of `op` on `stack`, whose arguments start at
// `base`) against every other tensor argument; raises the CPU's error.
void CheckWrittenOverlap(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base,
                         const at::Tensor& written);

// ---- In-place: broadcast and cast --------------------------------------------

// The broadcast of `shapes`, with the CPU's error for sizes that do not broadcast.
std::vector<int64_t> BroadcastShape(const std::vector<at::IntArrayRef>& shapes);

// TensorIterator's check that the operands broadcast to the written tensor's
// shape (an in-place op cannot resize self).
void CheckBroadcastToSelf(const at::Tensor& self, const std::vector<at::IntArrayRef>& operand_shapes);

// The CPU's refusal to write a result of dtype `result` into a tensor of dtype
// `written` that cannot hold it (int32 *= a float32 0-dim tensor).
void CheckCastToOutput(c10::ScalarType result, c10::ScalarType written);

// The CPU's words for the refs' unsafe-cast error ("Attempting to cast from
// torch.float32 to out tensor with dtype torch.int64, ..."): CheckCastToOutput's
// message. Empty where `what` is another error.
std::string CpuCastMessage(const std::string& what);

// Raises a Meta kernel's unsafe-cast error `what` of op `name` as the CPU
// does: cat's TypeError, the CPU's message for the others. Returns true where
// the CPU accepts the cast (bernoulli(out=) writes its 0s and 1s into any
// dtype), false where `what` is another error (the caller rethrows it).
bool RaiseCastErrorAsCpu(const std::string& name, const std::string& what);

// ---- out= ---------------------------------------------------------------------

// Autograd's kernel of an out= op refuses arguments that require grad (in grad
// mode), before anything else, on the CPU too.
void CheckOutNoGrad(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base);

// An out that is a neuron view (`is_neuron_view`) of another shape than the
// result's: the CPU restrides it over its base's storage; functionalization
// cannot re-point a view, so it is refused.
void CheckOutViewNotResized(const c10::OperatorHandle& op, size_t arg, const at::Tensor& out,
                            bool is_neuron_view, at::IntArrayRef result_sizes);

// The dtype a Meta kernel's error says it wants an out to have ("Expected out
// tensor to have dtype torch.complex64..."), where the CPU kernel takes others
// (abs of a complex tensor into a complex out); nullopt for another error.
std::optional<c10::ScalarType> ExactOutDtypeWanted(const std::string& what);

// ---- foreach ------------------------------------------------------------------

// The Tensor forms of the foreach ops take one 0-dim tensor for the whole list.
void CheckForeachScalarTensor(const at::Tensor& scalar);

// ---- Meta fix-ups ---------------------------------------------------------------

// Output metadata of one traced call: the shapes of every returned tensor,
// their layouts (what the CPU would report as their strides and storage
// offsets), and for each return how many tensors it holds (-1: a single tensor).
struct MetaResult {
  std::vector<ir::Shape> shapes;
  std::vector<TensorLayout> layouts;
  std::vector<int> counts;
};

// Corrects a Meta kernel's shapes where the CPU kernel returns others; the
// device must return exactly what the CPU would. Gets the op's arguments.
using MetaFixup = void (*)(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                           MetaResult* result);

// The fixup of the operator named `name` ("aten::nansum"), or nullptr.
MetaFixup MetaFixupFor(const std::string& name);

}  // namespace torch_neuron::lazy
