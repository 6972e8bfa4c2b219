#include "ir/node.h"

#include <absl/container/node_hash_map.h>
#include <absl/synchronization/mutex.h>
#include <c10/util/Exception.h>

#include <array>
#include <cmath>
#include <memory>
#include <sstream>

namespace torch_neuron::ir {
namespace {

// An attribute's hash (tagged by its type).
hash_t HashAttr(const c10::IValue& attr) {
  hash_t h = 0;
  TORCH_INTERNAL_ASSERT(HashIValue(attr, &h), "unhashable IR attribute ", attr.tagKind());
  return h;
}

template <typename T>
hash_t HashValue(HashTag tag, T value) {
  return HashTagged(tag, &value, sizeof(value));
}

hash_t HashScalar(const c10::Scalar& s) {
  if (s.isComplex()) {  // toLong() would throw for a nonzero imaginary part
    const c10::complex<double> z = s.toComplexDouble();
    const double parts[2] = {z.real(), z.imag()};
    return HashTagged(kTagScalarComplex, parts, sizeof(parts));
  }
  if (s.isFloatingPoint()) return HashValue(kTagScalarDouble, s.toDouble());
  if (s.isBoolean()) return HashValue(kTagScalarBool, s.toBool());
  return HashValue(kTagScalarInt, s.toLong());
}

}  // namespace

std::string ScalarToString(const c10::Scalar& s) {
  if (s.isBoolean()) return s.toBool() ? "true" : "false";
  if (s.isIntegral(false)) return std::to_string(s.toLong());
  std::ostringstream os;
  if (s.isComplex()) {
    const c10::complex<double> z = s.toComplexDouble();
    os << "(" << z.real() << (z.imag() < 0 ? "" : "+") << z.imag() << "j)";
    return os.str();
  }
  os << s.toDouble();
  return os.str();
}

OpName::OpName() {
  static const auto* empty = new std::pair<const std::string, hash_t>("", Hash(std::string_view()));
  entry_ = empty;
}

OpName::OpName(const std::string& name) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* names = new absl::node_hash_map<std::string, hash_t>();  // entries never move
  absl::MutexLock lock(&mu);
  auto [it, inserted] = names->try_emplace(name, 0);
  if (inserted) it->second = Hash(name);
  entry_ = &*it;
}

OpName::OpName(const char* name) : OpName(std::string(name)) {}

const char* NodeKindName(NodeKind kind) {
  switch (kind) {
    case NodeKind::kOp:
      return "op";
    case NodeKind::kDeviceData:
      return "device_data";
    case NodeKind::kScalar:
      return "scalar";
    case NodeKind::kGenerator:
      return "generator";
    case NodeKind::kConstant:
      return "constant";
  }
  return "?";
}

const Shape& Value::shape() const { return node->shape(index); }

hash_t Value::hash() const { return HashCombine(node->hash(), Hash(index)); }

bool HashIValue(const c10::IValue& v, hash_t* out) {
  hash_t h;
  if (v.isNone()) {
    h = HashTagged(kTagNone, nullptr, 0);
  } else if (v.isBool()) {
    h = HashValue(kTagBool, v.toBool());
  } else if (v.isInt()) {
    h = HashValue(kTagInt, v.toInt());
  } else if (v.isDouble()) {
    h = HashValue(kTagDouble, v.toDouble());
  } else if (v.isString()) {
    const std::string& text = v.toStringRef();
    h = HashTagged(kTagString, text.data(), text.size());
  } else if (v.isDevice()) {
    const int32_t device[2] = {static_cast<int32_t>(v.toDevice().type()), v.toDevice().index()};
    h = HashTagged(kTagDevice, device, sizeof(device));
  } else if (v.isScalar()) {
    h = HashScalar(v.toScalar());
  } else if (v.isIntList()) {
    const std::vector<int64_t> ints = v.toIntVector();
    h = HashTagged(kTagIntList, ints.data(), ints.size() * sizeof(int64_t));
  } else if (v.isDoubleList()) {
    const std::vector<double> doubles = v.toDoubleVector();
    h = HashTagged(kTagDoubleList, doubles.data(), doubles.size() * sizeof(double));
  } else if (v.isBoolList()) {
    std::vector<bool> bools;
    for (bool b : v.toBoolList()) bools.push_back(b);
    h = Hash("bl");
    for (bool b : bools) h = HashCombine(h, Hash(b));
  } else if (v.isList() || v.isTuple()) {
    h = Hash(v.isList() ? "l" : "t");
    c10::ArrayRef<c10::IValue> elements =
        v.isList() ? v.toListRef() : c10::ArrayRef<c10::IValue>(v.toTupleRef().elements());
    for (const c10::IValue& e : elements) {
      hash_t eh = 0;
      if (!HashIValue(e, &eh)) return false;
      h = HashCombine(h, eh);
    }
  } else {
    return false;
  }
  *out = h;
  return true;
}

namespace {

// Operands whose release a destructor on this thread has deferred (a chain of
// 100,000 nodes must not recurse 100,000 deep).
struct Releases {
  std::vector<NodePtr> pending;
  bool draining = false;
};

}  // namespace

Node::~Node() {
  // One thread-local lookup per destructor: in a shared library each access
  // to a thread_local calls __tls_get_addr.
  thread_local Releases releases_on_thread;
  Releases& r = releases_on_thread;
  for (Value& v : operands_) {
    if (v.node) r.pending.push_back(std::move(v.node));
  }
  if (r.draining) return;  // an outer destructor's loop releases them
  r.draining = true;
  while (!r.pending.empty()) {
    NodePtr last = std::move(r.pending.back());
    r.pending.pop_back();
    last.reset();  // may push its own operands
  }
  r.draining = false;
}

namespace {

// The words a node's hash covers, hashed in one call (a HashCombine per item
// took about twenty XXH3 calls a traced op). Every count precedes its items,
// so no two nodes give the same words.
using HashWords = absl::InlinedVector<uint64_t, 32>;

void PutHash(HashWords& w, hash_t h) {
  w.push_back(absl::Uint128High64(h));
  w.push_back(absl::Uint128Low64(h));
}

}  // namespace

hash_t LocalHashOf(NodeKind kind, hash_t op_hash, const std::vector<Arg>& args,
                   const std::vector<Shape>& shapes, const c10::Scalar& scalar,
                   absl::InlinedVector<hash_t, 1>* shape_hashes) {
  HashWords w;
  PutHash(w, op_hash);
  w.push_back(args.size());
  for (const Arg& a : args) {
    w.push_back(static_cast<uint64_t>(a.kind));
    if (a.kind == Arg::Kind::kAttr) {
      PutHash(w, HashAttr(a.attr));
    } else {
      w.push_back(a.operands.size());
      for (int32_t k : a.operands) w.push_back(static_cast<uint32_t>(k));  // -1 (None) included
    }
  }
  if (shape_hashes != nullptr) shape_hashes->clear();
  w.push_back(shapes.size());
  for (const Shape& s : shapes) {
    const hash_t shape_hash = Hash(s);
    if (shape_hashes != nullptr) shape_hashes->push_back(shape_hash);
    PutHash(w, shape_hash);
  }
  if (kind == NodeKind::kConstant) PutHash(w, HashScalar(scalar));
  return HashTagged(kTagOp + static_cast<uint64_t>(kind), w.data(), w.size() * sizeof(uint64_t));
}

hash_t LocalHash(NodeKind kind, const std::string& op, const std::vector<Arg>& args,
                 const std::vector<Shape>& shapes, const c10::Scalar& scalar,
                 absl::InlinedVector<hash_t, 1>* shape_hashes) {
  return LocalHashOf(kind, Hash(op), args, shapes, scalar, shape_hashes);
}

hash_t SizeGenericLocalHash(const Node& node) {
  std::vector<Shape> shapes;
  shapes.reserve(node.shapes().size());
  for (const Shape& s : node.shapes())
    shapes.emplace_back(s.dtype(), std::vector<int64_t>(s.sizes().size(), -1));
  return LocalHashOf(node.kind(), node.op_name().hash(), node.args(), shapes, node.scalar());
}

void Node::ComputeHashes() {
  local_hash_ = LocalHashOf(kind_, op_.hash(), args_, shapes_, scalar_, &shape_hashes_);
  HashWords w;
  PutHash(w, local_hash_);
  w.push_back(operands_.size());
  for (const Value& v : operands_) {
    PutHash(w, v.node->hash());
    w.push_back(static_cast<uint64_t>(v.index));
  }
  hash_ = HashTagged(kTagNode, w.data(), w.size() * sizeof(uint64_t));
}

NodePtr Node::MakeOp(OpName op, std::vector<Value> operands, std::vector<Arg> args, std::vector<Shape> shapes,
                     std::string source) {
  auto node = std::make_shared<Node>(Token{});
  node->kind_ = NodeKind::kOp;
  node->op_ = op;
  node->source_ = std::move(source);
  node->operands_ = std::move(operands);
  node->args_ = std::move(args);
  node->shapes_ = std::move(shapes);
  node->ComputeHashes();
  return node;
}

NodePtr Node::MakeDeviceData(Shape shape, std::shared_ptr<const LeafData> data) {
  auto node = std::make_shared<Node>(Token{});
  node->kind_ = NodeKind::kDeviceData;
  node->shapes_ = {std::move(shape)};
  node->data_ = std::move(data);
  node->ComputeHashes();
  return node;
}

namespace {

// A 0 or 1 is a constant of the graph (part of its hash); other values are
// parameters.
bool IsZeroOrOne(const c10::Scalar& value) {
  if (value.isBoolean()) return true;
  if (value.isIntegral(false)) {
    const int64_t v = value.toLong();
    return v == 0 || v == 1;
  }
  if (value.isFloatingPoint()) {
    const double v = value.toDouble();
    return (v == 0.0 || v == 1.0) && !std::signbit(v);
  }
  return false;
}

// The slot of a 0 or 1 constant in the per-thread table of MakeScalar: one per
// (dtype, wrapped or not, the Scalar's own type, value); -1 for symbolic
// scalars (never shared).
int ConstantSlot(const c10::Scalar& value, c10::ScalarType dtype, bool wrapped_number) {
  const int d = static_cast<int>(dtype);
  if (value.isSymbolic() || d < 0 || d >= 64) return -1;
  const int type = value.isBoolean()                         ? 0
                   : value.isFloatingPoint()                 ? 3
                   : value.type() == c10::ScalarType::UInt64 ? 2
                                                             : 1;
  const bool one = value.isBoolean()         ? value.toBool()
                   : value.isFloatingPoint() ? value.toDouble() == 1.0
                                             : value.toLong() == 1;
  return ((d * 2 + (wrapped_number ? 1 : 0)) * 4 + type) * 2 + (one ? 1 : 0);
}

}  // namespace

c10::IValue Arg::ConcreteValue(c10::IValue value) {
  if (value.isSymInt()) return c10::IValue(value.toSymInt().guard_int(__FILE__, __LINE__));
  if (value.isSymFloat()) return c10::IValue(value.toSymFloat().guard_float(__FILE__, __LINE__));
  if (value.isSymBool()) return c10::IValue(value.toSymBool().guard_bool(__FILE__, __LINE__));
  if (!value.isList()) return value;
  const c10::ArrayRef<c10::IValue> elements = value.toListRef();
  bool symbolic = false;
  for (const c10::IValue& e : elements)
    symbolic |= e.isSymInt() || e.isSymFloat() || e.isSymBool() || e.isList();
  if (!symbolic) return value;
  std::vector<c10::IValue> concrete;
  bool ints = true;  // SymInt[]: an int list, as its plain form
  for (const c10::IValue& e : elements) {
    concrete.push_back(ConcreteValue(e));
    ints &= concrete.back().isInt();
  }
  if (ints) {
    std::vector<int64_t> values;
    for (const c10::IValue& e : concrete) values.push_back(e.toInt());
    return c10::IValue(std::move(values));
  }
  c10::impl::GenericList list(c10::AnyType::get());
  for (c10::IValue& e : concrete) list.push_back(std::move(e));
  return c10::IValue(std::move(list));
}

namespace {

// The plain value of a symbolic scalar (Arg::ConcreteValue's rule).
c10::Scalar ConcreteScalar(const c10::Scalar& value) {
  if (!value.isSymbolic()) return value;
  if (value.isBoolean()) return c10::Scalar(value.toBool());
  if (value.isIntegral(false)) return c10::Scalar(value.toLong());
  return c10::Scalar(value.toDouble());
}

}  // namespace

NodePtr Node::MakeScalarLeaf(const c10::Scalar& given, c10::ScalarType dtype, bool wrapped_number,
                             NodeKind kind) {
  const c10::Scalar value = ConcreteScalar(given);
  auto node = std::make_shared<Node>(Token{});
  static const OpName wrapped("wrapped"), tensor("tensor");
  node->op_ = wrapped_number ? wrapped : tensor;
  node->kind_ = kind;
  node->shapes_ = {Shape(dtype, {})};
  node->scalar_ = value;
  node->ComputeHashes();
  return node;
}

NodePtr Node::MakePosition(int64_t value) {
  return MakeScalarLeaf(c10::Scalar(value), c10::ScalarType::Long, /*wrapped_number=*/false,
                        NodeKind::kScalar);
}

NodePtr Node::MakeScalar(const c10::Scalar& given, c10::ScalarType dtype, bool wrapped_number) {
  const c10::Scalar value = ConcreteScalar(given);
  // A node is never changed once made, so one node per thread serves every use
  // of a constant: the default alpha of add and sub is traced on every call (a
  // node and its hashes each time before).
  const bool zero_or_one = IsZeroOrOne(value);
  const int slot = zero_or_one ? ConstantSlot(value, dtype, wrapped_number) : -1;
  NodePtr* cached = nullptr;
  if (slot >= 0) {
    thread_local std::unique_ptr<std::array<NodePtr, 64 * 2 * 4 * 2>> constants;
    if (constants == nullptr) constants = std::make_unique<std::array<NodePtr, 64 * 2 * 4 * 2>>();
    cached = &(*constants)[slot];
    if (*cached != nullptr) return *cached;
  }
  NodePtr node =
      MakeScalarLeaf(value, dtype, wrapped_number, zero_or_one ? NodeKind::kConstant : NodeKind::kScalar);
  if (cached != nullptr) *cached = node;
  return node;
}

NodePtr Node::MakeGenerator(std::shared_ptr<const LeafData> generator) {
  auto node = std::make_shared<Node>(Token{});
  node->kind_ = NodeKind::kGenerator;
  node->shapes_ = {Shape(c10::ScalarType::Long, {})};
  node->data_ = std::move(generator);
  node->ComputeHashes();
  return node;
}

}  // namespace torch_neuron::ir
