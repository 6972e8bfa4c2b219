// The op-signature key: one notion of "the same call" for every cache that
// answers a call from an earlier one.
//
// The tracer keys its Meta cache (meta_inference.h) by it: the op's name, torch's
// default dtype, then per argument a tag and its words (a tensor's shape hash
// and its layout where it is not contiguous, a number's kind and, where the
// op's checks or shapes depend on it, its value, a dtype, a device, an
// attribute's hash), hashed once at the end (one XXH3 call per op, not a
// combine per argument). Tags make the word sequence unambiguous.
//
// The CPU-parity component (cpu_parity.h) keys its caches by the same words.
// Its kernels run where no tracer key exists yet: functionalization's meta
// reference of an in-place op and the out= checks run before the tracer binds
// the call, on meta copies of the arguments. AddArguments writes the words the
// tracer writes for the same arguments, from a stack of concrete tensors (meta
// copies, CPU numbers): a tensor's shape hash is ir::HashShape of its dtype and
// sizes, as a lazy value's node holds it. The key lives in this process only.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "ir/hash.h"
#include "lazy/tensor_impl.h"

namespace torch_neuron::lazy {

// The dtype a Scalar argument is keyed and bound as (bool, int64 or double).
c10::ScalarType ScalarDtype(const c10::Scalar& s);

class OpSignature {
 public:
  enum Tag : uint64_t {
    kTensor = 1,
    kCpuScalar,
    kScalar,
    kList,
    kGenerator,
    kDtype,
    kDevice,
    kAttr,
    kLayout,
    kUndefined,  // an undefined tensor (an absent Tensor? argument)
    kBits,       // a tensor's conjugate and negative bits, where set
    kContext,    // words a cache adds of its own (cpu_parity.cc)
  };

  // The op's name hash, then torch's default dtype (factories and promotions
  // with Python floats take it; the arguments do not show it).
  explicit OpSignature(ir::hash_t name);

  OpSignature& Tagged(Tag tag) { return Word(tag); }
  OpSignature& Word(uint64_t word) {
    words_.push_back(word);
    return *this;
  }
  OpSignature& Add(ir::hash_t h) { return Word(absl::Uint128High64(h)).Word(absl::Uint128Low64(h)); }

  // A tensor: its shape's hash (ir::Hash of its Shape), its layout where not default.
  void Tensor(ir::hash_t shape_hash, const TensorLayout& layout) {
    Tagged(kTensor).Add(shape_hash);
    if (layout.is_default()) return;
    Tagged(kLayout).Word(static_cast<uint64_t>(layout.storage_offset)).Word(layout.strides.size());
    for (int64_t stride : layout.strides) Word(static_cast<uint64_t>(stride));
  }
  // A 0-dim CPU tensor; `value_hash` 0 where its value is left out.
  void CpuScalar(c10::ScalarType dtype, bool wrapped, ir::hash_t value_hash) {
    Tagged(kCpuScalar).Word(static_cast<uint64_t>(dtype)).Word(wrapped).Add(value_hash);
  }
  // A Scalar argument; `value_hash` 0 where its value is left out.
  void Scalar(c10::ScalarType dtype, ir::hash_t value_hash) {
    Tagged(kScalar).Word(static_cast<uint64_t>(dtype)).Add(value_hash);
  }

  ir::hash_t Hash() const {
    return ir::HashBytes(words_.data(), words_.size() * sizeof(uint64_t), 0x6d657461);
  }

 private:
  absl::InlinedVector<uint64_t, 32> words_;
};

// Which numbers' values a key keeps: none (kinds only), integral ones (ints
// and bools: a divisor of 0, a shift's count), or all.
enum class NumberValues : uint8_t { kNone, kIntegral, kAll };

// Whether a number of `dtype` keeps its value under `values`.
inline bool KeepsValue(NumberValues values, c10::ScalarType dtype) {
  return values == NumberValues::kAll ||
         (values == NumberValues::kIntegral && c10::isIntegralType(dtype, /*includeBool=*/true));
}

// Appends the words of the arguments of `op` on `stack` (argument i at
// stack[base + i]), as the tracer's binding writes them for the same
// arguments: tensors, CPU numbers, Scalars (their values as `values` says),
// dtypes, devices, generators, attributes. `cut_sizes` (the CPU probes' keys)
// cuts each size to at most 1 and leaves layouts out. Returns false where the
// call has no key of this kind: a tensor list (the tracer keys lists by its
// operand numbering), symbolic sizes, an attribute the IR cannot hash.
bool AddArguments(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base,
                  NumberValues values, bool cut_sizes, OpSignature* signature);

}  // namespace torch_neuron::lazy
