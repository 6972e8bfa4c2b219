// IR nodes: immutable, hashed once at construction.
//
// A node is either an ATen operator call (kOp), carrying the operator's schema
// name and how each schema argument is supplied (an operand, a list of operands,
// or a constant attribute), or a leaf:
//   kDeviceData  a parameter bound to a device buffer; hashed by shape only, so
//                new data reuses the executable;
//   kScalar      a parameter bound to a Python scalar (not 0 or 1); hashed by
//                dtype only, so a changing learning rate does not recompile;
//   kGenerator   a parameter bound to the generator random ops draw from;
//   kConstant    a scalar 0 or 1, hashed by value.
// Node hashes cover op, arguments, output shapes and operand hashes but never
// the data of a parameter: equal hashes mean "the same computation on data of
// the same shapes", and graph hashes (graph.h) add the wiring of the leaves.
//
// Nodes are shared (std::shared_ptr) between the tensors that use them; they are
// immutable after construction and so safe to read from any thread.
#pragma once

#include <ATen/core/ivalue.h>
#include <absl/container/inlined_vector.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/hash.h"
#include "ir/shape.h"

namespace torch_neuron::ir {

enum class NodeKind : uint8_t { kOp, kDeviceData, kScalar, kGenerator, kConstant };

const char* NodeKindName(NodeKind kind);

// The payload of a kDeviceData or kGenerator leaf: owned by the runtime,
// opaque to the IR.
class LeafData {
 public:
  virtual ~LeafData() = default;
};

class Node;
using NodePtr = std::shared_ptr<const Node>;

// One output of a node.
struct Value {
  NodePtr node;
  int index = 0;

  const Shape& shape() const;
  hash_t hash() const;
  explicit operator bool() const { return node != nullptr; }
  bool operator==(const Value& other) const { return node == other.node && index == other.index; }
};

// How one schema argument of a kOp node is supplied.
struct Arg {
  enum class Kind : uint8_t { kOperand, kOperandList, kAttr };
  Kind kind = Kind::kAttr;
  // kOperand: one index into the node's operands. kOperandList: one per list
  // element, -1 for a None element of a Tensor?[] list. Inline up to two (a
  // traced op makes no allocation per operand argument).
  absl::InlinedVector<int32_t, 2> operands;
  // kAttr: the constant value (ints, floats, bools, lists, dtypes, None...).
  c10::IValue attr;

  static Arg Operand(int32_t index) { return {Kind::kOperand, {index}, {}}; }
  static Arg OperandList(const std::vector<int32_t>& indices) {
    return {Kind::kOperandList, {indices.begin(), indices.end()}, {}};
  }
  // A symbolic value (a SymInt, SymFloat or SymBool, or a list holding one)
  // is kept as the value its guard gives: see ConcreteValue.
  static Arg Attr(c10::IValue value) {
    if (value.isSymInt() || value.isSymFloat() || value.isSymBool() || value.isList()) {
      value = ConcreteValue(std::move(value));
    }
    return {Kind::kAttr, {}, std::move(value)};
  }

  // `value` with every symbolic scalar in it replaced by the value its guard
  // gives (a ShapeEnv's backed SymInt: its hint, recorded as a guard). A graph
  // holds plain values only, so its hash, its text, its CompileRequest and its
  // program agree (an ATen kernel given the symbolic value guards on it alike).
  static c10::IValue ConcreteValue(c10::IValue value);
};

// An op's name, interned: one copy per distinct name in the process (names
// come from schemas and the compiler's own ops, a bounded set), so that a node
// holds a pointer rather than a copy. Making one from a string looks it up
// under a lock: the tracer makes one per op, not one per traced call.
class OpName {
 public:
  OpName();                         // "" (a leaf's), without a lookup
  OpName(const std::string& name);  // NOLINT(runtime/explicit): a name is an OpName
  OpName(const char* name);         // NOLINT(runtime/explicit)
  const std::string& str() const { return entry_->first; }
  // Hash(str()), computed once per name.
  hash_t hash() const { return entry_->second; }

 private:
  const std::pair<const std::string, hash_t>* entry_;
};

class Node {
 public:
  // An operator call. `op` is "aten::add.Tensor" style (name.overload);
  // `source` is where it was traced from ("train.py:42"), or empty.
  static NodePtr MakeOp(OpName op, std::vector<Value> operands, std::vector<Arg> args,
                        std::vector<Shape> shapes, std::string source = {});
  static NodePtr MakeDeviceData(Shape shape, std::shared_ptr<const LeafData> data);
  // A Python scalar of `dtype`; 0 and 1 become kConstant. Where it feeds a Tensor
  // argument it becomes a 0-dim tensor: a wrapped number (a Python number, which
  // takes no part in type promotion) unless `wrapped_number` is false (a 0-dim
  // CPU tensor). The op() of the leaf is "wrapped" or "tensor" accordingly.
  static NodePtr MakeScalar(const c10::Scalar& value, c10::ScalarType dtype, bool wrapped_number = true);
  // A position given as a Python int (a slice's start, a select's index): an
  // int64 scalar parameter even when it is 0 or 1, so that a loop over
  // positions reuses one graph. The same node as MakeScalar(value, Long,
  // false) makes for other values (a CompileRequest reads it back as one).
  static NodePtr MakePosition(int64_t value);
  static NodePtr MakeGenerator(std::shared_ptr<const LeafData> generator);

  NodeKind kind() const { return kind_; }
  bool is_leaf() const { return kind_ != NodeKind::kOp; }
  bool is_parameter() const {
    return kind_ == NodeKind::kDeviceData || kind_ == NodeKind::kScalar || kind_ == NodeKind::kGenerator;
  }
  const std::string& op() const { return op_.str(); }
  const OpName& op_name() const { return op_; }
  const std::vector<Value>& operands() const { return operands_; }
  const std::vector<Arg>& args() const { return args_; }
  const std::vector<Shape>& shapes() const { return shapes_; }
  const Shape& shape(int index = 0) const { return shapes_.at(index); }
  int num_outputs() const { return static_cast<int>(shapes_.size()); }
  // Hash(shape(index)), computed once with the node's hash (the tracer keys
  // its Meta cache on operand shapes).
  hash_t shape_hash(int index = 0) const { return shape_hashes_.at(index); }

  // Hash of op, arguments, shapes and the operands' hashes.
  hash_t hash() const { return hash_; }
  // Hash of op, arguments and shapes only (what a graph hash combines with the
  // canonical operand numbering).
  hash_t local_hash() const { return local_hash_; }

  // kScalar / kConstant: the value.
  const c10::Scalar& scalar() const { return scalar_; }
  // kDeviceData / kGenerator: the runtime's object.
  const std::shared_ptr<const LeafData>& data() const { return data_; }

  // Where the op was traced from ("train.py:42"), when recorded; never hashed.
  const std::string& source() const { return source_; }

  // Frees operand chains iteratively: a graph of 100,000 chained nodes released
  // recursively would overflow the stack.
  ~Node();

 private:
  // Made by the Make* functions only (std::make_shared: one allocation for the
  // node and its reference count; a weak pointer to a node keeps that memory,
  // not the node's contents, until it too is gone).
  struct Token {};

 public:
  explicit Node(Token) {}

 private:
  void ComputeHashes();
  static NodePtr MakeScalarLeaf(const c10::Scalar& value, c10::ScalarType dtype, bool wrapped_number,
                                NodeKind kind);

  NodeKind kind_ = NodeKind::kOp;
  OpName op_;
  std::vector<Value> operands_;
  std::vector<Arg> args_;
  std::vector<Shape> shapes_;
  c10::Scalar scalar_;
  std::shared_ptr<const LeafData> data_;
  hash_t local_hash_ = 0;
  hash_t hash_ = 0;
  absl::InlinedVector<hash_t, 1> shape_hashes_;
  std::string source_;  // metadata, never hashed
};

// A node's local hash: its kind, op, attributes, operand positions and shapes
// (and a constant's value), without its operands' hashes. Node computes it at
// construction; the compiler, for the nodes its passes make. `shape_hashes`,
// when given, receives each shape's hash.
hash_t LocalHash(NodeKind kind, const std::string& op, const std::vector<Arg>& args,
                 const std::vector<Shape>& shapes, const c10::Scalar& scalar,
                 absl::InlinedVector<hash_t, 1>* shape_hashes = nullptr);
// The same, given Hash(op).
hash_t LocalHashOf(NodeKind kind, hash_t op_hash, const std::vector<Arg>& args,
                   const std::vector<Shape>& shapes, const c10::Scalar& scalar,
                   absl::InlinedVector<hash_t, 1>* shape_hashes = nullptr);

// The local hash of `node` with each output shape reduced to its dtype and
// rank (a size-generic graph's, graph.h).
hash_t SizeGenericLocalHash(const Node& node);

// "2.5", "3", "true": a scalar in IR text.
std::string ScalarToString(const c10::Scalar& s);

// Hash of an attribute value. Returns false (and leaves *out alone) for a value
// the IR cannot hash (objects, tensors), which the tracer must not put in a node.
bool HashIValue(const c10::IValue& value, hash_t* out);

}  // namespace torch_neuron::ir
