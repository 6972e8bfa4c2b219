#include "lazy/cpu_parity.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/enum_tag.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "base/metrics.h"
#include "ir/op_traits.h"
#include "lazy/aten_ops.h"
#include "lazy/cpu_kernel_checks.h"
#include "lazy/cpu_parity_rules.h"
#include "lazy/neuron_inplace.h"
#include "lazy/neuron_meta.h"
#include "ir/op_schema.h"
#include "lazy/op_signature.h"
#include "lazy/trace_info.h"

namespace torch_neuron::lazy {

namespace {

// ---- Keys -------------------------------------------------------------------

// What a key keeps of a call (op_signature.h): the op signature, with
// integers' values (a divisor of 0) and, for an op whose checks read numbers'
// values, every value; or what a probe depends on (sizes cut to at most 1,
// numbers by value or by kind).
enum class Keep { kSignature, kProbeValues, kProbeKinds };

// The call's key: the tracer's op-signature words over the call's arguments
// (neuron's Meta kernels run where no tracer key exists yet: on the meta
// copies of functionalization's meta reference and of the out= checks), and
// whether the call runs below functionalization. Nullopt when the call has none.
std::optional<ir::hash_t> KeyOf(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base,
                                ir::hash_t name_hash, bool scalar_values_key_meta, Keep keep) {
  OpSignature signature(name_hash);
  NumberValues values = NumberValues::kAll;
  if (keep == Keep::kSignature && !scalar_values_key_meta) values = NumberValues::kIntegral;
  if (keep == Keep::kProbeKinds) values = NumberValues::kNone;
  if (!AddArguments(op, stack, base, values, /*cut_sizes=*/keep != Keep::kSignature, &signature)) {
    return std::nullopt;
  }
  signature.Tagged(OpSignature::kContext)
      .Word(c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize));
  return signature.Hash();
}

// At most this many keys are kept per op (and probes in all); past it, new
// ones are checked every time.
constexpr size_t kKeyLimit = 4096;
constexpr size_t kProbeLimit = 8192;

class KeySet {
 public:
  bool Contains(ir::hash_t key) {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_.contains(key);
  }
  void Insert(ir::hash_t key, size_t limit) {
    std::lock_guard<std::mutex> lock(mu_);
    if (keys_.size() < limit) keys_.insert(key);
  }

 private:
  std::mutex mu_;
  absl::flat_hash_set<ir::hash_t> keys_;
};

// ---- Probes ------------------------------------------------------------------

// A CPU tensor of `t`'s dtype and rank, each dim cut to at most one element
// (so promotion, broadcasting and empty dims stay what they are).
at::Tensor Small(const at::Tensor& t) {
  std::vector<int64_t> sizes;
  for (int64_t s : t.sizes()) sizes.push_back(std::min<int64_t>(s, 1));
  at::Tensor small = at::ones(sizes, at::TensorOptions().dtype(t.scalar_type()));
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) small.unsafeGetTensorImpl()->set_wrapped_number(true);
  return small;
}

// The call's arguments for its CPU probe: small CPU tensors (an empty one of
// the out's dtype for an out, which the CPU kernel checks and resizes; a
// sorter of zeros, which indexes the small boundary), a generator of the
// probe's own (the user's streams stay untouched). False where the call has
// arguments a probe cannot make (tensor lists, another layout).
bool ProbeArguments(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base,
                    torch::jit::Stack* cpu) {
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& v = stack[base + i];
    const c10::Argument& arg = arguments[i];
    if (ir::IsGeneratorType(arg.type())) {
      cpu->emplace_back(at::make_generator<at::CPUGeneratorImpl>());
    } else if (v.isTensor() && v.toTensor().defined()) {
      const at::Tensor& t = v.toTensor();
      if (t.layout() != c10::kStrided || t.is_quantized()) return false;
      if (arg.is_out()) {
        cpu->emplace_back(at::empty({0}, at::TensorOptions().dtype(t.scalar_type())));
      } else if (arg.name() == "sorter") {
        cpu->emplace_back(at::zeros_like(Small(t)));
      } else {
        cpu->emplace_back(Small(t));
      }
    } else if (v.isList() && !v.isIntList() && !v.isDoubleList() && !v.isBoolList()) {
      return false;
    } else if (v.isDevice()) {
      cpu->emplace_back(c10::Device(c10::kCPU));
    } else {
      cpu->push_back(v);
    }
  }
  return true;
}

// Collects the warnings of a probe, to be given again where it ends well.
class Collected final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { warnings.push_back(warning); }
  std::vector<c10::Warning> warnings;
};

KeySet& Probed() {
  static auto* probed = new KeySet();
  return *probed;
}

// Runs the call as the CPU's kernel on small CPU tensors: its errors and its
// warnings. A key that passed without a warning is not probed again (the CPU
// warns at every call).
void ProbeOnCpu(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base,
                ir::hash_t name_hash, Keep keep) {
  const std::optional<ir::hash_t> key = KeyOf(op, stack, base, name_hash, false, keep);
  if (!key || Probed().Contains(*key)) return;
  torch::jit::Stack cpu;
  if (!ProbeArguments(op, stack, base, &cpu)) return;
  Collected collected;
  {
    c10::WarningUtils::WarningHandlerGuard guard(&collected);
    c10::impl::ExcludeDispatchKeyGuard no_python(
        c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
    op.callBoxed(&cpu);
  }
  for (const c10::Warning& w : collected.warnings) c10::warn(w);
  if (collected.warnings.empty()) Probed().Insert(*key, kProbeLimit);
}

// Whether a tensor other than self and the outs is among the arguments
// (bernoulli_ with a tensor of probabilities: its Meta kernel checks).
bool HasOtherTensor(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base) {
  const auto& arguments = op.schema().arguments();
  for (size_t i = 1; i < arguments.size(); ++i) {
    const c10::IValue& v = stack[base + i];
    if (!arguments[i].is_out() && v.isTensor() && v.toTensor().defined()) return true;
  }
  return false;
}

// ---- In-place rules -------------------------------------------------------------

// The functional form of in-place `op` (mul_.Tensor -> mul.Tensor,
// __ilshift__.Tensor -> __lshift__.Tensor) taking the same arguments, or nullopt.
std::optional<c10::OperatorHandle> FunctionalOf(const c10::OperatorHandle& op) {
  std::string name = op.schema().name();
  if (name.rfind("aten::__i", 0) == 0) {
    name = "aten::__" + name.substr(9);
  } else if (name.back() == '_' && name[6] != '_') {
    name.pop_back();
  } else {
    return std::nullopt;
  }
  std::optional<c10::OperatorHandle> f =
      c10::Dispatcher::singleton().findOp(c10::OperatorName(name, op.schema().overload_name()));
  if (!f || f->schema().arguments().size() != op.schema().arguments().size() ||
      f->schema().returns().size() != 1) {
    return std::nullopt;
  }
  return f;
}

// ---- The kernel ---------------------------------------------------------------

struct Rules {
  KernelCheck check = nullptr;  // by name (cpu_kernel_checks.h)
  bool random_probe = false;    // random parameters, probed before the in-place rules
  std::optional<Keep> probe;    // probed after them
  bool in_place = false;
  bool refuse_overlap = false;
  bool broadcast = false;
  bool cast = false;
  bool cast_of_promotion = false;  // the shifts: the promoted dtype, not the functional form's
  std::optional<c10::OperatorHandle> functional;
  int lenient_out = -1;  // the out whose dtype the CPU is lenient about
  int cached = -1;       // the written argument, where passed signatures are cached
  // The op signature's name and whether numbers' values key it (trace_info.h).
  ir::hash_t name_hash = 0;
  bool scalar_values_key_meta = false;
};

class ParityKernel final : public c10::OperatorKernel {
 public:
  explicit ParityKernel(Rules rules) : rules_(std::move(rules)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t num_args = op.schema().arguments().size();
    const size_t base = stack->size() - num_args;
    at::Tensor written;
    std::optional<ir::hash_t> key;
    if (rules_.cached >= 0) {
      const c10::IValue& w = (*stack)[base + rules_.cached];
      if (w.isTensor()) written = w.toTensor();
      if (written.defined()) {
        key = KeyOf(op, *stack, base, rules_.name_hash, rules_.scalar_values_key_meta, Keep::kSignature);
      }
      if (key && passed_.Contains(*key)) {
        torch::jit::drop(*stack, num_args);
        stack->emplace_back(written);
        Hits()->Add(1);
        return;
      }
    }
    Misses()->Add(1);
    if (!key) {
      Check(op, *stack, base);
      RunMeta(op, stack, base);
      return;
    }
    const std::vector<int64_t> sizes = written.sizes().vec();
    const std::vector<int64_t> strides = written.strides().vec();
    // A call that warns is not cached: the CPU warns at every call (std's
    // degrees of freedom over a reduced dim of one). Its warnings are given on,
    // after an error too.
    Collected collected;
    try {
      c10::WarningUtils::WarningHandlerGuard guard(&collected);
      Check(op, *stack, base);
      RunMeta(op, stack, base);
    } catch (...) {
      for (const c10::Warning& w : collected.warnings) c10::warn(w);
      throw;
    }
    for (const c10::Warning& w : collected.warnings) c10::warn(w);
    if (!collected.warnings.empty()) return;
    if (stack->empty() || !stack->back().isTensor() || !stack->back().toTensor().is_same(written) ||
        written.sizes() != c10::IntArrayRef(sizes) || written.strides() != c10::IntArrayRef(strides)) {
      return;  // an out that was resized is checked again next time
    }
    passed_.Insert(*key, kKeyLimit);
  }

 private:
  static metrics::Counter* Hits() {
    static metrics::Counter* c = metrics::GetCounter("trace.cpu_parity.hit.count");
    return c;
  }
  static metrics::Counter* Misses() {
    static metrics::Counter* c = metrics::GetCounter("trace.cpu_parity.miss.count");
    return c;
  }

  void Check(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base) {
    const CallArgs call{op, stack, base};
    if (rules_.check) rules_.check(call);
    if (rules_.random_probe && !HasOtherTensor(op, stack, base))
      ProbeOnCpu(op, stack, base, rules_.name_hash, Keep::kProbeValues);
    if (rules_.in_place) InPlaceRules(call);
    if (rules_.probe) ProbeOnCpu(op, stack, base, rules_.name_hash, *rules_.probe);
  }

  // The CPU's checks of an in-place op, in the CPU's order (TensorIterator's):
  // the written tensor's internal overlap, the broadcast, the result's cast.
  void InPlaceRules(const CallArgs& call) {
    const c10::IValue& first = call.At(0);
    if (!first.isTensor() || !first.toTensor().defined()) return;
    const at::Tensor& self = first.toTensor();
    CheckInPlaceSelfOverlap(call.op.schema().name(), self, rules_.refuse_overlap);
    const size_t num_args = call.op.schema().arguments().size();
    if (rules_.broadcast) {
      std::vector<at::IntArrayRef> shapes;
      for (size_t i = 1; i < num_args; ++i) {
        if (call.At(i).isTensor() && call.At(i).toTensor().defined())
          shapes.push_back(call.At(i).toTensor().sizes());
      }
      CheckBroadcastToSelf(self, shapes);
    }
    if (!rules_.cast) return;
    // The CPU computes in the promoted dtype and refuses to write a result
    // self's dtype cannot hold (int32 *= a float32 0-dim tensor); some Python
    // Meta kernels convert it silently.
    std::optional<c10::ScalarType> dtype;
    // Shifts: the CPU promotes, then finds the cast unsafe, before the shift's
    // own integral check. An op whose functional form has no Meta kernel
    // (_add_relu) computes in the promoted dtype too.
    bool promote = rules_.cast_of_promotion || !rules_.functional;
    if (!promote) {
      torch::jit::Stack functional(call.stack.begin() + call.base, call.stack.begin() + call.base + num_args);
      try {
        rules_.functional->callBoxed(&functional);
        dtype = functional.back().toTensor().scalar_type();
      } catch (const c10::NotImplementedError&) {
        promote = true;
      } catch (const std::exception&) {
        // The op's own Meta kernel words the error.
      }
    }
    if (promote && num_args > 1 && call.At(1).isTensor() && call.At(1).toTensor().defined()) {
      dtype = at::result_type(self, call.At(1).toTensor());
    } else if (promote && num_args > 1 && call.At(1).isScalar()) {
      dtype = at::result_type(self, call.At(1).toScalar());
    }
    if (dtype) CheckCastToOutput(*dtype, self.scalar_type());
  }

  // The op's own Meta kernel, its errors in the CPU's words; an out dtype the
  // CPU took (its probe passed) where the Meta kernel wants one exactly (abs
  // of a complex tensor into a complex out) gets the CPU's answer: the result
  // is computed as if into an out of the wanted dtype, and out resized to it
  // (functionalization then casts the values into it, as the CPU kernel does).
  void RunMeta(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t base) {
    std::vector<c10::IValue> arguments;
    if (rules_.lenient_out >= 0) arguments.assign(stack->begin() + base, stack->end());
    try {
      RunOwnMeta(op, stack);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (rules_.in_place) {
        RaiseCastErrorAsCpu(op.schema().name(), what);  // raises for every in-place op
        throw;
      }
      const std::optional<c10::ScalarType> wanted = ExactOutDtypeWanted(what);
      if (rules_.lenient_out < 0 || !wanted || !arguments[rules_.lenient_out].isTensor()) throw;
      const at::Tensor out = arguments[rules_.lenient_out].toTensor();
      arguments[rules_.lenient_out] = at::empty({0}, out.options().dtype(*wanted));
      torch::jit::drop(*stack, stack->size() - base);
      for (c10::IValue& v : arguments) stack->push_back(std::move(v));
      RunOwnMeta(op, stack);
      const at::Tensor result = stack->back().toTensor();
      stack->pop_back();
      if (out.sizes() != result.sizes()) out.resize_(result.sizes());
      stack->push_back(out);
    }
  }

  const Rules rules_;
  KeySet passed_;
};

// Reductions to values and indices, which lack the reduction tag.
bool IsValuesAndIndicesReduction(const std::string& name) {
  return name == "aten::mode" || name == "aten::median" || name == "aten::nanmedian";
}

std::optional<Rules> RulesFor(const c10::OperatorHandle& op, const std::string& full_name) {
  // A composite decomposes before a Meta kernel is reached: its parts are checked.
  if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) return std::nullopt;
  const ir::OpTraits& traits = ir::TraitsOf(full_name);
  const c10::FunctionSchema& schema = op.schema();
  const bool pointwise = op.hasTag(at::Tag::pointwise);
  Rules r;
  const TraceInfo& info = InfoFor(op);
  r.name_hash = info.name_hash;
  r.scalar_values_key_meta = info.scalar_values_key_meta;
  r.check = KernelCheckFor(op);
  r.random_probe = traits.probes_random_parameters;
  if (traits.probes_on_cpu) r.probe = traits.probe_by_kinds ? Keep::kProbeKinds : Keep::kProbeValues;
  int outs = 0;
  int out_index = -1;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (schema.arguments()[i].is_out()) {
      ++outs;
      out_index = static_cast<int>(i);
    }
  }
  // Pointwise and reduction out= ops: the CPU kernels refuse out dtypes that
  // PyTorch's Python Meta kernels cast to (neg(float32, out=float64), all(x, 1,
  // out=float), mode's values of another dtype).
  if (outs > 0 &&
      (pointwise || op.hasTag(at::Tag::reduction) || IsValuesAndIndicesReduction(schema.name()))) {
    if (!r.probe) r.probe = Keep::kProbeValues;
    if (outs == 1) r.lenient_out = out_index;
    if (outs == 1 && r.check == nullptr) r.cached = out_index;
  }
  const std::string& name = schema.name();
  // Ops that write elements. (Functionalization has no kernel for an
  // in-place op that is a composite of its own, polygamma_: the ops it calls
  // are checked.)
  r.in_place = IsInPlaceOp(op) && schema.arguments()[0].type()->kind() == c10::TypeKind::TensorType &&
               name.back() == '_' && op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize) &&
               !op.hasTag(at::Tag::inplace_view) && !traits.writes_metadata_only;
  if (r.in_place) {
    r.refuse_overlap = !traits.writes_overlapping_memory;
    r.broadcast = pointwise || traits.elementwise_untagged;
    r.cast = pointwise || traits.elementwise_untagged || traits.casts_before_own_checks;
    r.cast_of_promotion = traits.casts_before_own_checks;
    if (r.cast && !r.cast_of_promotion) r.functional = FunctionalOf(op);
    // A pointwise in-place op leaves self's metadata as it is, and its checks
    // depend on its arguments' signature alone: one that passed passes again.
    const bool by_signature =
        r.check == nullptr && !r.random_probe && (!r.probe || *r.probe == Keep::kProbeKinds);
    if (pointwise && by_signature) r.cached = 0;
  }
  if (!r.in_place && r.check == nullptr && !r.probe && !r.random_probe) return std::nullopt;
  return r;
}

}  // namespace

int RegisterCpuParity() {
  static const int count = [] {
    int n = 0;
    ForEachAtenOp([&](const c10::OperatorHandle& op, const std::string& overload) {
      std::optional<Rules> rules = RulesFor(op, "aten::" + overload);
      if (!rules) return;
      SetNeuronMetaKernel(op,
                          c10::KernelFunction::makeFromBoxedFunctor(std::make_unique<ParityKernel>(*rules)));
      ++n;
    });
    RegisterForeachMeta();
    return n;
  }();
  return count;
}

}  // namespace torch_neuron::lazy
