#include "registry/recorder.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>

#include <cmath>
#include <cstdio>

#include "absl/strings/str_split.h"
#include "base/dtypes.h"
#include "ir/op_schema.h"

namespace torch_neuron::registry {
namespace {

using ir::Unwrapped;

// torch's Python names of the dtypes ("float32", not c10's "Float").
const char* DtypeName(c10::ScalarType t) {
  const DtypeFacts* facts = FactsOf(t);
  return facts != nullptr ? facts->python_name : c10::toString(t);
}

// torch's Python names of the layouts (torch.strided, torch.sparse_coo, ...).
const char* LayoutName(c10::Layout layout) {
  switch (layout) {
    case c10::kStrided:
      return "strided";
    case c10::kSparse:
      return "sparse_coo";
    case c10::kSparseCsr:
      return "sparse_csr";
    case c10::kSparseCsc:
      return "sparse_csc";
    case c10::kSparseBsr:
      return "sparse_bsr";
    case c10::kSparseBsc:
      return "sparse_bsc";
    case c10::kMkldnn:
      return "_mkldnn";
    case c10::kJagged:
      return "jagged";
    default:
      return "unknown";
  }
}

void Double(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "Infinity" : "-Infinity");
  } else {
    char buf[32];
    const int n = std::snprintf(buf, sizeof(buf), "%.17g", v);
    out->append(buf, n);
    // Kept a float when read back ("1" would read as an int).
    bool has_mark = false;
    for (int i = 0; i < n; ++i) has_mark |= buf[i] == '.' || buf[i] == 'e';
    if (!has_mark) out->append(".0");
  }
}

void String(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out->append(buf);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

void Ints(c10::IntArrayRef v, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->append(std::to_string(v[i]));
  }
  out->push_back(']');
}

void Scalar(const c10::Scalar& s, std::string* out) {
  if (s.isBoolean()) {
    out->append(s.toBool() ? "true" : "false");
  } else if (s.isIntegral(false)) {
    out->append(std::to_string(s.toLong()));
  } else if (s.isComplex()) {
    const c10::complex<double> c = s.toComplexDouble();
    out->append("{\"complex\":[");
    Double(c.real(), out);
    out->push_back(',');
    Double(c.imag(), out);
    out->append("]}");
  } else {
    Double(s.toDouble(), out);
  }
}

void Tensor(const at::Tensor& t, std::string* out) {
  if (!t.defined()) {
    out->append("null");
    return;
  }
  out->append("{\"tensor\":");
  String(DtypeName(t.scalar_type()), out);
  out->append(",\"shape\":");
  Ints(t.sizes(), out);
  if (!t.is_contiguous()) {
    out->append(",\"strides\":");
    Ints(t.strides(), out);
  }
  if (t.device().is_cpu()) {
    out->append(",\"cpu\":true");
    if (t.dim() == 0) {
      out->append(",\"value\":");
      Scalar(t.item(), out);
      if (t.unsafeGetTensorImpl()->is_wrapped_number()) out->append(",\"wrapped\":true");
    }
  }
  out->push_back('}');
}

void Value(const c10::TypePtr& declared, const c10::IValue& v, std::string* out) {
  const c10::TypeKind kind = Unwrapped(declared)->kind();
  if (v.isNone()) {
    out->append("null");
  } else if (v.isTensor()) {
    Tensor(v.toTensor(), out);
  } else if (v.isTensorList() || v.isOptionalTensorList() ||
             (v.isList() && ir::IsListOf(declared, c10::TypeKind::TensorType))) {
    out->append("{\"tensors\":[");
    bool first = true;
    for (const c10::IValue& e : v.toListRef()) {
      if (!first) out->push_back(',');
      first = false;
      if (e.isTensor()) {
        Tensor(e.toTensor(), out);
      } else {
        out->append("null");
      }
    }
    out->append("]}");
  } else if (kind == c10::TypeKind::ScalarTypeType && v.isInt()) {
    out->append("{\"dtype\":");
    String(DtypeName(static_cast<c10::ScalarType>(v.toInt())), out);
    out->push_back('}');
  } else if (kind == c10::TypeKind::LayoutType && v.isInt()) {
    out->append("{\"layout\":");
    String(LayoutName(static_cast<c10::Layout>(v.toInt())), out);
    out->push_back('}');
  } else if (kind == c10::TypeKind::MemoryFormatType && v.isInt()) {
    out->append("{\"memory_format\":");
    switch (static_cast<c10::MemoryFormat>(v.toInt())) {
      case c10::MemoryFormat::Contiguous:
        String("contiguous_format", out);
        break;
      case c10::MemoryFormat::Preserve:
        String("preserve_format", out);
        break;
      case c10::MemoryFormat::ChannelsLast:
        String("channels_last", out);
        break;
      case c10::MemoryFormat::ChannelsLast3d:
        String("channels_last_3d", out);
        break;
      default:
        String("unknown", out);
        break;
    }
    out->push_back('}');
  } else if (v.isBool()) {
    out->append(v.toBool() ? "true" : "false");
  } else if (v.isInt()) {
    out->append(std::to_string(v.toInt()));
  } else if (v.isDouble()) {
    Double(v.toDouble(), out);
  } else if (v.isComplexDouble()) {
    Scalar(v.toScalar(), out);
  } else if (v.isString()) {
    String(v.toStringRef(), out);
  } else if (v.isDevice()) {
    out->append("{\"device\":");
    const c10::Device d = v.toDevice();
    String(d.type() == c10::DeviceType::PrivateUse1 ? "neuron" : c10::DeviceTypeName(d.type(), true), out);
    out->push_back('}');
  } else if (v.isGenerator()) {
    out->append("{\"generator\":true}");
  } else if (v.isList()) {
    out->push_back('[');
    bool first = true;
    c10::TypePtr element = c10::AnyType::get();
    if (auto list = Unwrapped(declared)->cast<c10::ListType>()) element = list->getElementType();
    for (const c10::IValue& e : v.toListRef()) {
      if (!first) out->push_back(',');
      first = false;
      Value(element, e, out);
    }
    out->push_back(']');
  } else {
    out->append("{\"unsupported\":");
    String(v.tagKind(), out);
    out->push_back('}');
  }
}

}  // namespace

void EncodeArguments(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out->push_back(',');
    // real_type(): a ScalarType, Layout or MemoryFormat argument's type() is int.
    const c10::TypePtr& type =
        i < schema.arguments().size() ? schema.arguments()[i].real_type() : c10::AnyType::get();
    Value(type, args[i], out);
  }
  out->push_back(']');
}

void ShapeRecorder::OnTracedOp(const lazy::TracedOp& op) {
  // The key is built in buffers reused per thread (no allocation once warm):
  // the op's part outside the lock, the tag in front of it under it.
  thread_local std::string signature;
  thread_local std::string key;
  signature.clear();
  signature.push_back('\0');
  signature.append(op.name);
  signature.push_back('\0');
  EncodeArguments(op.op.schema(), op.args, &signature);
  signature.push_back('\0');
  if (op.fallback_reason != nullptr) signature.append(op.fallback_reason);
  absl::MutexLock lock(&mu_);
  key.assign(tag_);
  key.append(signature);
  auto it = entries_.find(key);
  if (it == entries_.end()) it = entries_.emplace(key, Entry{}).first;
  ++it->second.count;
}

void ShapeRecorder::SetTag(std::string tag) {
  absl::MutexLock lock(&mu_);
  tag_ = std::move(tag);
}

std::string ShapeRecorder::tag() const {
  absl::MutexLock lock(&mu_);
  return tag_;
}

std::vector<Record> ShapeRecorder::Take() {
  absl::flat_hash_map<std::string, Entry> taken;
  {
    absl::MutexLock lock(&mu_);
    taken.swap(entries_);
  }
  std::vector<Record> records;
  records.reserve(taken.size());
  for (const auto& [key, entry] : taken) {
    std::vector<std::string> parts = absl::StrSplit(key, absl::MaxSplits('\0', 3));
    parts.resize(4);
    records.push_back(Record{std::move(parts[0]), std::move(parts[1]), std::move(parts[2]),
                             std::move(parts[3]), entry.count});
  }
  return records;
}

size_t ShapeRecorder::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

namespace {

struct Global {
  absl::Mutex mu;  // lock order: before the trace-observer list's (trace_observer.cc)
  std::shared_ptr<ShapeRecorder> recorder = std::make_shared<ShapeRecorder>();
  bool installed ABSL_GUARDED_BY(mu) = false;
};

Global& G() {
  static auto* g = new Global();
  return *g;
}

}  // namespace

ShapeRecorder& GlobalRecorder() { return *G().recorder; }

void StartRecording() {
  Global& g = G();
  absl::MutexLock lock(&g.mu);
  if (g.installed) return;
  lazy::AddTraceObserver(g.recorder);
  g.installed = true;
}

void StopRecording() {
  Global& g = G();
  absl::MutexLock lock(&g.mu);
  if (!g.installed) return;
  lazy::RemoveTraceObserver(g.recorder.get());
  g.installed = false;
}

bool IsRecording() {
  Global& g = G();
  absl::MutexLock lock(&g.mu);
  return g.installed;
}

}  // namespace torch_neuron::registry
