// A C++ memo in front of neuron's Python Meta kernels of pointwise in-place
// and out= ops (torch_neuron/_meta_checks.py), and the bindings that make
// Python functions neuron's Meta kernels (lazy/neuron_meta.h: neuron calls
// only; the Meta dispatch key keeps PyTorch's kernels).
//
// Functionalization runs every in-place op once on meta copies of its
// arguments before it traces the functional form. For most in-place ops the
// Meta kernel is Python: PyTorch's torch._refs function, behind the CPU's checks
// that _meta_checks.py adds. Those checks depend only on the arguments'
// signature (dtypes, sizes, strides, conj/neg bits, the types of numbers and
// the values of integers), so a signature that passed once passes again. The
// memo was Python too: converting the boxed arguments to Python objects,
// calling the kernel and building its key cost about 35,000 instructions per
// traced in-place op, more than the rest of tracing the op.
//
// The kernel here builds the key from the boxed stack in C++. A key that passed
// before returns the written tensor (self, or out) without entering Python. A
// new key, or arguments it cannot key (symbolic sizes, lists, generators), calls
// the Python function as PyTorch's own Python kernels are called, and the key is
// remembered if that call returned the written tensor with its sizes and
// strides unchanged (an out= that was resized is checked again next time).
//
// torch's IValue <-> Python conversions (jit/python/pybind_utils.h) see ATen's
// whole operator set; this file alone in python/ compiles against it.
#undef TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <pybind11/stl.h>
#include <torch/library.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "base/metrics.h"
#include "lazy/neuron_inplace.h"
#include "lazy/neuron_meta.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_neuron::python {
namespace {

// At most this many passed signatures are kept per op; past it, new ones are
// checked every time (a process that sees thousands of shapes gains little).
constexpr size_t kPassedLimit = 4096;

// The `written` of a kernel that remembers nothing (calls Python every time).
constexpr size_t kNoMemo = static_cast<size_t>(-1);

enum Tag : int64_t {
  kTensor = 1,
  kUndefined,
  kWrappedInteger,  // a Python int the binding wrapped into a 0-dim tensor
  kInteger,
  kBool,
  kFloat,
  kComplex,
  kNone,
  kString,
};

// Appends words to a caller's buffer.
class Key {
 public:
  explicit Key(std::string* bytes) : bytes_(*bytes) {}
  void Word(int64_t w) { bytes_.append(reinterpret_cast<const char*>(&w), sizeof(w)); }
  void Text(const std::string& s) {
    Word(static_cast<int64_t>(s.size()));
    bytes_ += s;
  }

 private:
  std::string& bytes_;
};

// Appends `value`'s part of the signature; false if it has none (the call is
// not memoized).
bool AddValue(const c10::IValue& value, Key& key) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined()) {
      key.Word(kUndefined);
      return true;
    }
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->has_symbolic_sizes_strides()) return false;
    if (impl->is_wrapped_number() && t.is_cpu()) {
      // The Python kernel sees a Python number: its type, and an integer's or
      // bool's value (pow_ of an integer tensor by a negative integer fails).
      // Python ints and bools wrap as int64 and bool; floats and complex
      // numbers as the default dtype and its complex form.
      switch (t.scalar_type()) {
        case at::kLong:
          key.Word(kWrappedInteger);
          key.Word(*t.const_data_ptr<int64_t>());
          return true;
        case at::kBool:
          key.Word(kBool);
          key.Word(*t.const_data_ptr<bool>());
          return true;
        default:
          if (c10::isIntegralType(t.scalar_type(), /*includeBool=*/true)) return false;
          key.Word(c10::isComplexType(t.scalar_type()) ? kComplex : kFloat);
          return true;
      }
    }
    key.Word(kTensor);
    key.Word(static_cast<int64_t>(t.scalar_type()));
    key.Word(t.dim());
    for (int64_t s : t.sizes()) key.Word(s);
    for (int64_t s : t.strides()) key.Word(s);
    key.Word(static_cast<int64_t>(t.is_conj()) | static_cast<int64_t>(t.is_neg()) << 1);
    return true;
  }
  if (value.isBool()) {
    key.Word(kBool);
    key.Word(value.toBool());
    return true;
  }
  if (value.isInt()) {  // integers, dtypes, memory formats
    key.Word(kInteger);
    key.Word(value.toInt());
    return true;
  }
  if (value.isDouble()) {
    key.Word(kFloat);
    return true;
  }
  if (value.isComplexDouble()) {
    key.Word(kComplex);
    return true;
  }
  if (value.isNone()) {
    key.Word(kNone);
    return true;
  }
  if (value.isString()) {
    key.Word(kString);
    key.Text(value.toStringRef());
    return true;
  }
  return false;  // lists, generators, devices, symbolic numbers
}

// The call's signature: the arguments' parts, torch's default dtype (Python
// floats promote to it) and whether the call runs below functionalization.
// Written into `bytes` (cleared first); false when the call has no signature.
bool Signature(const torch::jit::Stack& stack, size_t num_args, std::string* bytes) {
  bytes->clear();
  Key key(bytes);
  key.Word(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  key.Word(c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize));
  for (size_t i = stack.size() - num_args; i < stack.size(); ++i) {
    if (!AddValue(stack[i], key)) return false;
  }
  return true;
}

// The boxed arguments as the Python kernel's positional and keyword arguments,
// the way PyTorch calls its own Python kernels: keyword-only arguments by name,
// and trailing arguments equal to their defaults left out (the functions in
// the decomposition tables rely on their own defaults); dtypes, layouts and
// memory formats as torch's Python objects, wrapped numbers as numbers.
// (libtorch_python does not export its own helper for this.)
py::object ArgumentObject(const c10::Argument& arg, const c10::IValue& value) {
  if (value.isNone()) return py::none();
  c10::TypePtr type = arg.real_type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  switch (type->kind()) {
    case c10::TypeKind::ScalarTypeType:
      return py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(value.toInt()))));
    case c10::TypeKind::LayoutType:
      return py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(value.toInt()))));
    case c10::TypeKind::MemoryFormatType:
      return py::reinterpret_borrow<py::object>(
          torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(value.toInt())));
    default:
      return torch::jit::toPyObject(value);
  }
}

std::pair<py::tuple, py::dict> PythonArguments(const c10::FunctionSchema& schema,
                                               const std::vector<c10::IValue>& values) {
  const auto& arguments = schema.arguments();
  auto is_default = [&](size_t i) {
    return arguments[i].default_value().has_value() && *arguments[i].default_value() == values[i];
  };
  size_t keyword_start = values.size();
  while (keyword_start > 0 && arguments[keyword_start - 1].kwarg_only()) --keyword_start;
  size_t positional_end = keyword_start;
  while (positional_end > 0 && is_default(positional_end - 1)) --positional_end;
  py::tuple args(positional_end);
  for (size_t i = 0; i < positional_end; ++i) args[i] = ArgumentObject(arguments[i], values[i]);
  py::dict kwargs;
  for (size_t i = keyword_start; i < values.size(); ++i) {
    if (!is_default(i)) kwargs[py::str(arguments[i].name())] = ArgumentObject(arguments[i], values[i]);
  }
  return {std::move(args), std::move(kwargs)};
}

// Pushes the Python kernel's result as the op's returns.
void PushReturns(const c10::FunctionSchema& schema, const py::object& out, torch::jit::Stack* stack) {
  const auto& returns = schema.returns();
  if (returns.empty()) {
    TORCH_CHECK(out.is_none(), schema.name(), "'s Meta kernel returned a value for an op without returns");
  } else if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(out, returns[0].real_type()));
  } else {
    auto outs = py::cast<py::sequence>(out);
    TORCH_CHECK(outs.size() == returns.size(), schema.name(), "'s Meta kernel returned ", outs.size(),
                " values for ", returns.size(), " returns");
    for (size_t i = 0; i < returns.size(); ++i) {
      stack->push_back(torch::jit::toIValue(outs[i], returns[i].real_type()));
    }
  }
}

class MemoKernel final : public c10::OperatorKernel {
 public:
  // `fn` is leaked on purpose: the dispatcher destroys its kernels at process
  // exit, after Python has finalized, when no reference may be dropped.
  MemoKernel(py::function fn, size_t written) : fn_(fn.release().ptr()), written_(written) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t num_args = op.schema().arguments().size();
    if (written_ == kNoMemo) {
      CallPython(op, stack, num_args);
      return;
    }
    const c10::IValue& written_value = (*stack)[stack->size() - num_args + written_];
    const at::Tensor written = written_value.isTensor() ? written_value.toTensor() : at::Tensor();
    // The key is built in a buffer this thread keeps, so a hit allocates
    // nothing (the set looks a string_view up).
    thread_local std::string buffer;
    std::string& bytes = buffer;
    const bool keyed = written.defined() && Signature(*stack, num_args, &bytes);
    if (keyed) {
      std::lock_guard<std::mutex> lock(mu_);
      if (passed_.contains(absl::string_view(bytes))) {
        torch::jit::drop(*stack, num_args);
        stack->emplace_back(written);
        hits_->Add(1);
        return;
      }
    }
    // A miss: the Python checks may trace in-place or out= ops of their own,
    // which reuse the buffer, so the key is copied first.
    std::optional<std::string> key;
    if (keyed) key = bytes;
    const std::vector<int64_t> sizes = written.defined() ? written.sizes().vec() : std::vector<int64_t>();
    const std::vector<int64_t> strides = written.defined() ? written.strides().vec() : std::vector<int64_t>();
    CallPython(op, stack, num_args);
    if (!key.has_value()) return;
    if (stack->empty() || !stack->back().isTensor() || !stack->back().toTensor().is_same(written) ||
        written.sizes() != c10::IntArrayRef(sizes) || written.strides() != c10::IntArrayRef(strides)) {
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (passed_.size() < kPassedLimit) passed_.insert(*std::move(key));
  }

 private:
  void CallPython(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t num_args) {
    misses_->Add(1);
    py::gil_scoped_acquire gil;
    std::vector<c10::IValue> arguments(stack->end() - num_args, stack->end());
    torch::jit::drop(*stack, num_args);
    try {
      auto [args, kwargs] = PythonArguments(op.schema(), arguments);
      py::object out = py::reinterpret_borrow<py::function>(fn_)(*args, **kwargs);
      PushReturns(op.schema(), out, stack);
    } catch (py::error_already_set& e) {
      // The error keeps its message (what()), which neuron's callers read
      // (out_checks.cc words the refs' cast errors as the CPU does).
      e.restore();
      python_error error;
      error.persist();
      throw error;
    }
  }

  PyObject* fn_;
  const size_t written_;
  metrics::Counter* const hits_ = metrics::GetCounter("trace.meta_memo.hit.count");
  metrics::Counter* const misses_ = metrics::GetCounter("trace.meta_memo.miss.count");
  std::mutex mu_;
  absl::flat_hash_set<std::string> passed_;
};

}  // namespace

void BindMetaMemo(py::module_& m) {
  // Makes `fn` neuron's Meta kernel (lazy/neuron_meta.h) of the aten op `name`
  // (schema name, "aten::add_") and `overload` ("Tensor", or "" for the
  // default). With `written` (the index of the tensor it writes: self, or
  // out), behind a C++ signature memo; with None, called every time.
  m.def("_neuron_meta_impl", [](const std::string& name, const std::string& overload,
                                std::optional<size_t> written, py::function fn) {
    auto handle = c10::Dispatcher::singleton().findOp(c10::OperatorName(name, overload));
    const std::string full = overload.empty() ? name : name + "." + overload;
    if (!handle.has_value() || name.rfind("aten::", 0) != 0) {
      throw py::value_error("_neuron_meta_impl: no operator " + full);
    }
    if (written && *written >= handle->schema().arguments().size()) {
      throw py::value_error("_neuron_meta_impl: " + full + " has no argument " + std::to_string(*written));
    }
    lazy::SetNeuronMetaKernel(*handle, c10::KernelFunction::makeFromBoxedFunctor(std::make_unique<MemoKernel>(
                                           std::move(fn), written.value_or(kNoMemo))));
  });
  m.def("_neuron_meta_ops", [] { return lazy::NeuronMetaKernelOps(); });
  m.def("_neuron_inplace_ops", [] { return lazy::NeuronInPlaceOps(); });
  m.def("_neuron_inplace_ops_run_functional", [] { return lazy::NeuronInPlaceOpsRunFunctional(); });
  m.def("_register_foreach_meta", [] { lazy::RegisterForeachMeta(); });
}

}  // namespace torch_neuron::python
