#include "runtime/executor.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "runtime/device_registry.h"
#include "runtime/execution_queue.h"
#include "runtime/generator.h"
#include "runtime/kernel_call.h"
#include "runtime/kernel_team.h"
#include "runtime/neuron_allocator.h"
#include "base/profiler.h"
#include "runtime/torch_status.h"

namespace torch_neuron::runtime {
namespace {

at::Tensor ScalarAsTensor(const c10::IValue& v, c10::ScalarType dtype, bool wrapped) {
  at::Tensor t = at::scalar_tensor(v.toScalar(), at::TensorOptions().dtype(dtype));
  t.unsafeGetTensorImpl()->set_wrapped_number(wrapped);
  return t;
}

c10::IValue ArgValue(const ProgramArg& arg, const std::vector<c10::IValue>& regs) {
  switch (arg.kind) {
    case ProgramArg::Kind::kConstant:
      return arg.constant;
    case ProgramArg::Kind::kRegister:
      return regs[arg.registers[0]];
    case ProgramArg::Kind::kWrappedScalar:
      return ScalarAsTensor(regs[arg.registers[0]], arg.dtype, arg.wrapped_number);
    case ProgramArg::Kind::kGenerator: {
      const at::Generator& neuron = regs[arg.registers[0]].toGenerator();
      return neuron.get<NeuronGeneratorImpl>()->host_generator();
    }
    case ProgramArg::Kind::kRegisterList: {
      if (arg.dtype == c10::ScalarType::Undefined) {  // Tensor[] or Tensor?[]
        bool optional = false;
        for (int32_t r : arg.registers) optional |= r < 0;
        if (!optional) {
          std::vector<at::Tensor> tensors;
          tensors.reserve(arg.registers.size());
          for (int32_t r : arg.registers) tensors.push_back(regs[r].toTensor());
          return tensors;
        }
        c10::List<std::optional<at::Tensor>> list;
        for (int32_t r : arg.registers) {
          list.push_back(r < 0 ? std::optional<at::Tensor>() : regs[r].toTensor());
        }
        return list;
      }
      if (arg.dtype == c10::ScalarType::Long) {  // SymInt[]: a size-generic graph's sizes
        c10::List<int64_t> ints;
        ints.reserve(arg.registers.size());
        for (int32_t r : arg.registers) ints.push_back(regs[r].toInt());
        return ints;
      }
      std::vector<c10::Scalar> scalars;  // Scalar[]
      for (int32_t r : arg.registers) scalars.push_back(regs[r].toScalar());
      return c10::List<c10::Scalar>(scalars);
    }
  }
  return {};
}

c10::StorageImpl* StorageOf(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().has_storage() ? v.toTensor().storage().unsafeGetStorageImpl() : nullptr;
}

// The storages an execution's registers hold, with how many registers hold
// each, and the bytes its instructions made (not the parameters') held at once,
// from the instruction that makes them until the last register holding them is
// released: in host memory (ATen calls' results, which the arena's statistics
// do not see; graph.execute.peak_bytes) and in device memory (generated
// kernels' outputs, counted as the arena rounds them). Their sum above the
// arena's allocated bytes when the execution began is the execution's
// footprint, each byte once (graph.execute.peak_total_bytes); what other
// threads allocate or free meanwhile is not seen.
class RegisterStorages {
 public:
  explicit RegisterStorages(const std::vector<c10::IValue>& parameters) {
    for (const c10::IValue& p : parameters) {
      if (c10::StorageImpl* s = StorageOf(p)) parameters_.insert(s);
    }
    const int device = CurrentQueueDevice();
    if (device >= 0) arena_start_ = DeviceRegistry::Global().arena(device).Stats().allocated_bytes;
    peak_total_ = arena_start_;
  }
  void Hold(const c10::IValue& v) {
    c10::StorageImpl* s = StorageOf(v);
    if (s == nullptr) return;
    auto [it, fresh] = holders_.try_emplace(s, 0);
    ++it->second;
    if (fresh && !parameters_.contains(s)) {
      Bytes(s) += Size(s);
      peak_ = std::max(peak_, host_);
      peak_total_ = std::max(peak_total_, arena_start_ + device_ + host_);
    }
  }
  void Drop(const c10::IValue& v) {
    c10::StorageImpl* s = StorageOf(v);
    auto it = s == nullptr ? holders_.end() : holders_.find(s);
    if (it == holders_.end()) return;
    if (--it->second == 0) {
      if (!parameters_.contains(s)) Bytes(s) -= Size(s);
      holders_.erase(it);
    }
  }
  // How many registers hold `s` now.
  int Holders(const c10::StorageImpl* s) const {
    auto it = holders_.find(s);
    return it == holders_.end() ? 0 : it->second;
  }
  int64_t peak() const { return peak_; }
  int64_t peak_total() const { return peak_total_; }

 private:
  int64_t& Bytes(const c10::StorageImpl* s) { return IsDeviceMemory(s->data_ptr()) ? device_ : host_; }
  static int64_t Size(const c10::StorageImpl* s) {
    return static_cast<int64_t>(IsDeviceMemory(s->data_ptr()) ? DeviceArena::RoundSize(s->nbytes())
                                                              : s->nbytes());
  }

  absl::flat_hash_set<const c10::StorageImpl*> parameters_;
  absl::flat_hash_map<const c10::StorageImpl*, int> holders_;
  int64_t arena_start_ = 0;
  int64_t host_ = 0;
  int64_t device_ = 0;
  int64_t peak_ = 0;
  int64_t peak_total_ = 0;
};

// Which donated parameter buffers a flat kernel call may write its outputs into:
// reuse[k] = the kernel input whose buffer output k takes, or -1. A buffer
// qualifies when this instruction is its register's last use, the kernel reads
// it once, and no other live register views it (a view taken earlier would see
// the new values); an output goes only into an input of its own dtype. Marks
// the parameters it picks in `overwritten`.
std::vector<int64_t> KernelReuse(const Instruction& inst, const std::vector<c10::IValue>& regs,
                                 const RegisterStorages& storages,
                                 const absl::flat_hash_map<int32_t, size_t>& donated_param_of,
                                 std::vector<bool>& overwritten) {
  std::vector<int64_t> reuse;
  const KernelCall& call = *inst.kernel;
  if (call.form != KernelCall::Form::kFlat) return reuse;
  const std::vector<int32_t>& inputs = call.inputs;
  std::vector<bool> taken(inputs.size(), false);
  auto qualifies = [&](size_t j, c10::ScalarType dtype) {
    const int32_t reg = inputs[j];
    auto param = donated_param_of.find(reg);
    if (taken[j] || call.input_dtypes[j] != dtype || param == donated_param_of.end() ||
        overwritten[param->second] || std::count(inst.release.begin(), inst.release.end(), reg) == 0 ||
        std::count(inputs.begin(), inputs.end(), reg) != 1) {
      return false;
    }
    const c10::StorageImpl* storage = StorageOf(regs[reg]);
    if (storage == nullptr || storages.Holders(storage) != 1) return false;  // viewed by another register
    overwritten[param->second] = true;
    taken[j] = true;
    return true;
  };
  for (c10::ScalarType dtype : call.output_dtypes) {
    int64_t chosen = -1;
    for (size_t j = 0; j < inputs.size() && chosen < 0; ++j) {
      if (qualifies(j, dtype)) chosen = static_cast<int64_t>(j);
    }
    reuse.push_back(chosen);
  }
  return reuse;
}

// The elements of the tensors an instruction reads (its stack's tensors and
// tensor lists).
int64_t TensorElements(const torch::jit::Stack& stack) {
  int64_t n = 0;
  for (const c10::IValue& v : stack) {
    if (v.isTensor()) {
      n += v.toTensor().numel();
    } else if (v.isTensorList()) {
      for (const c10::IValue& t : v.toListRef()) n += t.toTensor().numel();
    }
  }
  return n;
}

// Moves an instruction's results from the stack into its output registers,
// each Tensor[] return into as many registers as the NEFF says it has.
absl::Status SpreadReturns(const Instruction& inst, torch::jit::Stack& stack,
                           std::vector<c10::IValue>& regs) {
  auto mismatch = [&](const std::string& what) {
    return absl::InternalError(absl::StrCat("neuron execution failed in ", inst.op_name, ": ", what));
  };
  if (stack.size() != inst.return_widths.size()) {
    return mismatch(absl::StrCat("it returned ", stack.size(), " values, the program expects ",
                                 inst.return_widths.size()));
  }
  size_t k = 0;
  for (size_t r = 0; r < inst.return_widths.size(); ++r) {
    const int32_t width = inst.return_widths[r];
    if (width < 0) {
      if (inst.outputs[k] >= 0) regs[inst.outputs[k]] = std::move(stack[r]);
      ++k;
      continue;
    }
    if (!stack[r].isTensorList()) return mismatch(absl::StrCat("return ", r, " is not a Tensor[]"));
    c10::List<at::Tensor> list = stack[r].toTensorList();
    if (list.size() != static_cast<size_t>(width)) {
      return mismatch(
          absl::StrCat("return ", r, " has ", list.size(), " tensors, the program expects ", width));
    }
    for (int32_t j = 0; j < width; ++j, ++k) {
      if (inst.outputs[k] >= 0) regs[inst.outputs[k]] = list.get(j);
    }
  }
  return absl::OkStatus();
}

// Runs kernel-call instruction `inst` on its registers, writing its outputs to
// theirs; flat outputs go into donated parameters' buffers where KernelReuse
// allows. The generated code splits itself over the kernel team.
absl::Status RunKernelInstruction(const Instruction& inst, std::vector<c10::IValue>& regs,
                                  const RegisterStorages& storages,
                                  const absl::flat_hash_map<int32_t, size_t>& donated_param_of,
                                  std::vector<bool>& written, const std::string& where) {
  const KernelCall& call = *inst.kernel;
  try {
    std::vector<at::Tensor> inputs;
    inputs.reserve(call.inputs.size());
    for (int32_t r : call.inputs) inputs.push_back(regs[r].toTensor());
    std::vector<double> scalars;
    scalars.reserve(call.scalars.size());
    for (int32_t r : call.scalars) scalars.push_back(regs[r].toScalar().toDouble());
    const std::vector<int64_t> reuse = donated_param_of.empty()
                                           ? std::vector<int64_t>()
                                           : KernelReuse(inst, regs, storages, donated_param_of, written);
    profiler::Scope scope("instruction", inst.op_name, where);
    ScopedLibraryThreads team(0);
    absl::StatusOr<std::vector<at::Tensor>> outputs = RunKernelCall(call, inputs, scalars, reuse);
    if (!outputs.ok()) return outputs.status();
    if (outputs->size() != inst.outputs.size()) {
      return absl::InternalError(absl::StrCat("kernel ", call.kernel, " made ", outputs->size(),
                                              " outputs, the program expects ", inst.outputs.size()));
    }
    for (size_t k = 0; k < outputs->size(); ++k) {
      if (inst.outputs[k] >= 0) regs[inst.outputs[k]] = std::move((*outputs)[k]);
    }
  } catch (...) {
    return StatusFromCurrentException();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<at::Tensor>> Execute(const Program& program,
                                                const std::vector<c10::IValue>& parameters,
                                                const std::vector<bool>& donated, std::vector<int>* in_place,
                                                const std::string* source) {
  if (parameters.size() != program.parameter_registers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("program takes ", program.parameter_registers.size(),
                                                   " parameters, got ", parameters.size()));
  }
  // Inputs never require grad here; skip the autograd layer of every call.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  std::vector<c10::IValue> regs(program.num_registers);
  for (size_t i = 0; i < parameters.size(); ++i) regs[program.parameter_registers[i]] = parameters[i];
  for (const auto& [reg, value] : program.constants) regs[reg] = value;

  // Registers of the donated parameters, for fused kernels to write into.
  absl::flat_hash_map<int32_t, size_t> donated_param_of;
  for (size_t i = 0; i < donated.size() && i < parameters.size(); ++i) {
    if (donated[i] && parameters[i].isTensor()) donated_param_of.emplace(program.parameter_registers[i], i);
  }
  std::vector<bool> written(parameters.size(), false);

  RegisterStorages storages(parameters);
  for (const c10::IValue& r : regs) storages.Hold(r);
  torch::jit::Stack stack;
  for (const Instruction& inst : program.instructions) {
    const std::string& where = source == nullptr ? inst.source : *source;
    // Kernels throw c10::Errors; libraries under them (gloo, below the
    // collectives) may throw anything else. Either is reported with its op and
    // keeps its kind (an IndexError stays one).
    auto failed = [&](absl::Status status) {
      return WithContext(std::move(status), absl::StrCat("neuron execution failed in ", inst.op_name,
                                                         where.empty() ? "" : " (" + where + ")"));
    };
    stack.clear();
    if (inst.kernel) {
      if (absl::Status s = RunKernelInstruction(inst, regs, storages, donated_param_of, written, where);
          !s.ok()) {
        return failed(std::move(s));
      }
    } else {
      for (const ProgramArg& arg : inst.args) {
        stack.push_back(ArgValue(arg, regs));
        if (arg.copy_before_use && stack.back().isTensor()) {
          stack.back() = stack.back().toTensor().clone();
        }
      }
      try {
        profiler::Scope scope("instruction", inst.op_name, where);
        // A large library call gets an OpenMP team of the kernel team's size.
        ScopedLibraryThreads team(TensorElements(stack));
        inst.op->callBoxed(stack);
      } catch (...) {
        return failed(StatusFromCurrentException());
      }
      if (absl::Status s = SpreadReturns(inst, stack, regs); !s.ok()) return s;
    }
    for (int32_t r : inst.outputs) {
      if (r >= 0) storages.Hold(regs[r]);
    }
    for (int32_t r : inst.release) {
      storages.Drop(regs[r]);
      regs[r] = c10::IValue();
    }
  }
  static metrics::Counter* peak = metrics::GetCounter("graph.execute.peak_bytes");
  peak->Max(storages.peak());
  static metrics::Counter* peak_total = metrics::GetCounter("graph.execute.peak_total_bytes");
  peak_total->Max(storages.peak_total());
  stack.clear();  // the last call's results: outputs must be the only holders (adoption)

  if (in_place != nullptr) in_place->assign(parameters.size(), -1);
  absl::flat_hash_map<const c10::StorageImpl*, size_t> param_of_storage;  // the first parameter on each
  for (size_t p = 0; p < parameters.size(); ++p) {
    if (const c10::StorageImpl* s = StorageOf(parameters[p])) param_of_storage.try_emplace(s, p);
  }
  std::vector<at::Tensor> outputs;
  outputs.reserve(program.outputs.size());
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    const c10::IValue& v = regs[program.outputs[i]];
    const auto options = at::TensorOptions().dtype(program.output_dtypes[i]);
    at::Tensor t = v.isTensor() ? v.toTensor() : at::full(program.output_sizes[i], v.toScalar(), options);
    if (t.scalar_type() != program.output_dtypes[i]) t = t.to(program.output_dtypes[i]);
    // A size-generic program's outputs have this run's sizes, which its
    // caller checks (Launch).
    if (!program.size_generic && t.sizes() != c10::IntArrayRef(program.output_sizes[i])) {
      return absl::InternalError(absl::StrCat("neuron execution produced output ", i, " with sizes ",
                                              c10::str(t.sizes()), ", expected ",
                                              c10::str(c10::IntArrayRef(program.output_sizes[i]))));
    }
    // ATen's lazily conjugated and negated views (conj(), mH, a kernel that
    // writes into result.mH(): lu_solve with left=False) keep their bytes and a
    // bit that says how to read them; an output's bytes must be its values.
    t = t.resolve_conj().resolve_neg().contiguous();
    // An output that is (a view of) an input buffer gets memory of its own: the
    // caller may reuse input buffers for outputs (donation). A kernel's output
    // written into a donated buffer stays there: the caller takes that buffer.
    auto param =
        t.has_storage() ? param_of_storage.find(t.storage().unsafeGetStorageImpl()) : param_of_storage.end();
    if (param != param_of_storage.end()) {
      const size_t p = param->second;
      const bool candidate = i < program.donation_candidates.size() &&
                             std::count(program.donation_candidates[i].begin(),
                                        program.donation_candidates[i].end(), static_cast<int32_t>(p)) > 0;
      if (written[p] && candidate && in_place != nullptr && (*in_place)[p] < 0) {
        (*in_place)[p] = static_cast<int>(i);
      } else {
        t = t.clone();
      }
    }
    outputs.push_back(std::move(t));
  }
  return outputs;
}

}  // namespace torch_neuron::runtime
