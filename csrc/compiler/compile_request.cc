#include "compiler/compile_request.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "neff/constant_codec.h"

namespace torch_neuron::compiler {

std::string GraphHashBytes(ir::hash_t h) {
  const uint64_t words[2] = {absl::Uint128High64(h), absl::Uint128Low64(h)};
  return std::string(reinterpret_cast<const char*>(words), sizeof(words));
}

namespace {

proto::GraphNode::Kind KindOf(ir::NodeKind kind) {
  switch (kind) {
    case ir::NodeKind::kOp:
      return proto::GraphNode::OP;
    case ir::NodeKind::kDeviceData:
      return proto::GraphNode::DEVICE_DATA;
    case ir::NodeKind::kScalar:
      return proto::GraphNode::SCALAR;
    case ir::NodeKind::kGenerator:
      return proto::GraphNode::GENERATOR;
    case ir::NodeKind::kConstant:
      return proto::GraphNode::CONSTANT;
  }
  return proto::GraphNode::OP;
}

absl::Status EncodeScalar(const c10::Scalar& s, proto::ScalarValue* out) {
  if (s.isBoolean()) {
    out->set_bool_value(s.toBool());
  } else if (s.isIntegral(false)) {
    out->set_int_value(s.toLong());
  } else if (s.isFloatingPoint()) {
    out->set_double_value(s.toDouble());
  } else if (s.isComplex()) {
    out->mutable_complex_value()->set_real(s.toComplexDouble().real());
    out->mutable_complex_value()->set_imag(s.toComplexDouble().imag());
  } else {
    return absl::UnimplementedError("a symbolic constant has no CompileRequest form");
  }
  return absl::OkStatus();
}

absl::Status Invalid(size_t node, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed CompileRequest: node ", node, ": ", what));
}

// `undefined_allowed`: an op's output may be an undefined tensor (a backward op
// asked not to compute one of its gradients).
absl::StatusOr<ir::Shape> ReadShape(size_t node, const proto::TensorSpec& spec, bool undefined_allowed) {
  const bool undefined = spec.dtype() == static_cast<int32_t>(c10::ScalarType::Undefined);
  if (!neff::ValidDtype(spec.dtype()) && !(undefined && undefined_allowed)) {
    return Invalid(node, absl::StrCat("dtype ", spec.dtype()));
  }
  // A bound for requests read from elsewhere (the service, a fuzzed file), not a
  // limit of PyTorch's: tensors of more than 64 dims are valid (only reductions'
  // dim masks stop at 64), so the bound is far above any real graph's rank.
  constexpr int kMaxRank = 1024;
  if (spec.sizes_size() > kMaxRank) return Invalid(node, absl::StrCat(spec.sizes_size(), " dimensions"));
  std::vector<int64_t> sizes(spec.sizes().begin(), spec.sizes().end());
  for (int64_t s : sizes) {
    if (s < 0 || s > (int64_t{1} << 48)) return Invalid(node, absl::StrCat("size ", s));
  }
  return ir::Shape(static_cast<c10::ScalarType>(spec.dtype()), std::move(sizes));
}

// A scalar parameter's stand-in value: the request carries none (a parameter
// is bound at run time), any value that is not 0 or 1 makes the same leaf.
c10::Scalar ScalarStandIn(c10::ScalarType dtype) {
  if (c10::isComplexType(dtype)) return c10::Scalar(c10::complex<double>(2.0, 0.0));
  if (c10::isFloatingType(dtype)) return c10::Scalar(2.0);
  return c10::Scalar(int64_t{2});
}

absl::StatusOr<ir::NodePtr> ReadNode(size_t i, const proto::GraphNode& n,
                                     const std::vector<ir::NodePtr>& earlier) {
  std::vector<ir::Shape> shapes;
  for (const proto::TensorSpec& spec : n.shapes()) {
    absl::StatusOr<ir::Shape> shape = ReadShape(i, spec, n.kind() == proto::GraphNode::OP);
    if (!shape.ok()) return shape.status();
    shapes.push_back(*std::move(shape));
  }
  if (shapes.empty()) return Invalid(i, "no output shapes");
  const bool leaf = n.kind() != proto::GraphNode::OP;
  if (leaf && (shapes.size() != 1 || n.operands_size() != 0 || n.args_size() != 0)) {
    return Invalid(i, "a leaf with operands, arguments or more than one output");
  }
  const bool scalar_like = n.kind() == proto::GraphNode::SCALAR || n.kind() == proto::GraphNode::CONSTANT;
  if (scalar_like && (shapes[0].dim() != 0 || (n.op() != "wrapped" && n.op() != "tensor"))) {
    return Invalid(i, "a scalar leaf must be 0-dim and \"wrapped\" or \"tensor\"");
  }
  ir::NodePtr made;
  switch (n.kind()) {
    case proto::GraphNode::DEVICE_DATA:
      made = ir::Node::MakeDeviceData(shapes[0], nullptr);
      break;
    case proto::GraphNode::GENERATOR:
      if (shapes[0] != ir::Shape(c10::ScalarType::Long, {}))
        return Invalid(i, "a generator is a long scalar");
      made = ir::Node::MakeGenerator(nullptr);
      break;
    case proto::GraphNode::SCALAR:
      if (shapes[0].dtype() == c10::ScalarType::Bool) return Invalid(i, "a bool scalar is a constant");
      made = ir::Node::MakeScalar(ScalarStandIn(shapes[0].dtype()), shapes[0].dtype(), n.op() == "wrapped");
      break;
    case proto::GraphNode::CONSTANT: {
      c10::Scalar value;
      switch (n.constant().kind_case()) {
        case proto::ScalarValue::kBoolValue:
          value = c10::Scalar(n.constant().bool_value());
          break;
        case proto::ScalarValue::kIntValue:
          value = c10::Scalar(n.constant().int_value());
          break;
        case proto::ScalarValue::kDoubleValue:
          value = c10::Scalar(n.constant().double_value());
          break;
        case proto::ScalarValue::kComplexValue:
          value = c10::Scalar(
              c10::complex<double>(n.constant().complex_value().real(), n.constant().complex_value().imag()));
          break;
        default:
          return Invalid(i, "a constant without a value");
      }
      made = ir::Node::MakeScalar(value, shapes[0].dtype(), n.op() == "wrapped");
      if (made->kind() != ir::NodeKind::kConstant) return Invalid(i, "a constant other than 0 or 1");
      break;
    }
    case proto::GraphNode::OP: {
      if (n.op().empty() || n.op().size() > 256) return Invalid(i, "an op without a name");
      std::vector<ir::Value> operands;
      for (const proto::GraphValue& v : n.operands()) {
        if (v.node() < 0 || static_cast<size_t>(v.node()) >= i) {
          return Invalid(i, absl::StrCat("operand node ", v.node(), " is not an earlier node"));
        }
        const ir::NodePtr& from = earlier[v.node()];
        if (v.output() < 0 || v.output() >= from->num_outputs()) {
          return Invalid(i, absl::StrCat("operand output ", v.output(), " of node ", v.node()));
        }
        operands.push_back({from, v.output()});
      }
      const int32_t count = static_cast<int32_t>(operands.size());
      std::vector<ir::Arg> args;
      for (const proto::GraphArg& a : n.args()) {
        switch (a.kind()) {
          case proto::GraphArg::OPERAND:
            if (a.operands_size() != 1 || a.operands(0) < 0 || a.operands(0) >= count) {
              return Invalid(i, "an operand argument out of range");
            }
            args.push_back(ir::Arg::Operand(a.operands(0)));
            break;
          case proto::GraphArg::OPERAND_LIST: {
            std::vector<int32_t> indices(a.operands().begin(), a.operands().end());
            for (int32_t k : indices) {
              if (k < -1 || k >= count) return Invalid(i, "an operand-list argument out of range");
            }
            args.push_back(ir::Arg::OperandList(std::move(indices)));
            break;
          }
          case proto::GraphArg::ATTR: {
            absl::StatusOr<c10::IValue> value = neff::DecodeConstant(a.attr());
            if (!value.ok()) return Invalid(i, std::string(value.status().message()));
            if (value->isTensor()) return Invalid(i, "a tensor attribute");
            args.push_back(ir::Arg::Attr(*std::move(value)));
            break;
          }
          default:
            return Invalid(i, absl::StrCat("argument kind ", static_cast<int>(a.kind())));
        }
      }
      made = ir::Node::MakeOp(n.op(), std::move(operands), std::move(args), std::move(shapes),
                              n.source().substr(0, 4096));
      break;
    }
    default:
      return Invalid(i, absl::StrCat("node kind ", static_cast<int>(n.kind())));
  }
  return made;
}

}  // namespace

absl::StatusOr<proto::CompileRequest> MakeCompileRequest(const ir::CanonicalGraph& graph,
                                                         const CompileOptions& options) {
  proto::CompileRequest request;
  absl::Status written = WriteCompileRequest(graph, options, &request);
  if (!written.ok()) return written;
  return request;
}

absl::Status WriteCompileRequest(const ir::CanonicalGraph& graph, const CompileOptions& options,
                                 proto::CompileRequest* out_request) {
  proto::CompileRequest& request = *out_request;
  request.Clear();
  request.set_format_version(kCompileRequestFormat);
  request.set_graph_hash(GraphHashBytes(graph.hash));
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& node = *graph.nodes[i];
    proto::GraphNode* out = request.add_nodes();
    out->set_kind(KindOf(node.kind()));
    out->set_op(node.op());
    for (const auto& [position, index] : graph.operands(i)) {
      proto::GraphValue* v = out->add_operands();
      v->set_node(position);
      v->set_output(index);
    }
    for (const ir::Arg& a : node.args()) {
      proto::GraphArg* arg = out->add_args();
      switch (a.kind) {
        case ir::Arg::Kind::kOperand:
          arg->set_kind(proto::GraphArg::OPERAND);
          break;
        case ir::Arg::Kind::kOperandList:
          arg->set_kind(proto::GraphArg::OPERAND_LIST);
          break;
        case ir::Arg::Kind::kAttr: {
          arg->set_kind(proto::GraphArg::ATTR);
          absl::Status s = neff::EncodeConstant(a.attr, arg->mutable_attr());
          if (!s.ok()) {
            return absl::Status(s.code(), absl::StrCat(node.op(), ": ", s.message()));
          }
          break;
        }
      }
      for (int32_t k : a.operands) arg->add_operands(k);
    }
    for (const ir::Shape& shape : node.shapes()) {
      proto::TensorSpec* spec = out->add_shapes();
      spec->set_dtype(static_cast<int32_t>(shape.dtype()));
      for (int64_t s : shape.sizes()) spec->add_sizes(s);
    }
    if (node.kind() == ir::NodeKind::kConstant) {
      absl::Status s = EncodeScalar(node.scalar(), out->mutable_constant());
      if (!s.ok()) return s;
    }
    if (!node.source().empty()) out->set_source(node.source());
  }
  for (const auto& [position, index] : graph.outputs) {
    proto::GraphValue* v = request.add_outputs();
    v->set_node(position);
    v->set_output(index);
  }
  for (int32_t r : graph.root_to_output) request.add_root_to_output(r);
  request.set_size_generic(graph.size_generic);
  proto::GraphCompileOptions* o = request.mutable_options();
  o->set_opt_level(options.opt_level);
  o->set_cse(options.cse);
  o->set_fold_constants(options.fold_constants);
  o->set_max_fold_elements(options.max_fold_elements);
  o->set_fault_op(options.fault_op);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RequestGraph>> ReadCompileRequest(const proto::CompileRequest& request,
                                                                 StoredHash stored) {
  if (request.format_version() != kCompileRequestFormat) {
    return absl::InvalidArgumentError(absl::StrCat("CompileRequest format ", request.format_version(),
                                                   " (this reader knows ", kCompileRequestFormat, ")"));
  }
  if (request.graph_hash().size() != 16) {
    return absl::InvalidArgumentError("malformed CompileRequest: the graph hash is not 16 bytes");
  }
  const proto::GraphCompileOptions& o = request.options();
  if (o.opt_level() < 0 || o.opt_level() > 1 || o.max_fold_elements() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed CompileRequest: options opt_level=", o.opt_level(),
                     " max_fold_elements=", o.max_fold_elements()));
  }
  auto out = std::make_unique<RequestGraph>();
  out->options.opt_level = o.opt_level();
  out->options.cse = o.cse();
  out->options.fold_constants = o.fold_constants();
  out->options.max_fold_elements = o.max_fold_elements();
  out->options.fault_op = o.fault_op();

  ir::CanonicalGraph& g = out->graph;
  out->nodes.reserve(request.nodes_size());
  std::vector<std::pair<int32_t, int32_t>> operands;
  for (int i = 0; i < request.nodes_size(); ++i) {
    absl::StatusOr<ir::NodePtr> node = ReadNode(i, request.nodes(i), out->nodes);
    if (!node.ok()) return node.status();
    operands.clear();
    for (const proto::GraphValue& v : request.nodes(i).operands())
      operands.emplace_back(v.node(), v.output());
    g.AddOperands(operands);
    if ((*node)->is_parameter()) g.parameters.push_back(i);
    g.nodes.push_back(node->get());
    out->nodes.push_back(*std::move(node));
  }
  for (const proto::GraphValue& v : request.outputs()) {
    if (v.node() < 0 || v.node() >= request.nodes_size() || v.output() < 0 ||
        v.output() >= out->nodes[v.node()]->num_outputs()) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed CompileRequest: output (", v.node(), ", ", v.output(), ") out of range"));
    }
    g.outputs.emplace_back(v.node(), v.output());
  }
  for (int32_t r : request.root_to_output()) {
    if (r < 0 || r >= static_cast<int32_t>(g.outputs.size())) {
      return absl::InvalidArgumentError(absl::StrCat("malformed CompileRequest: root output ", r));
    }
    g.root_to_output.push_back(r);
  }
  g.size_generic = request.size_generic();
  g.hash = ir::GraphHash(g);
  if (stored == StoredHash::kVerify && GraphHashBytes(g.hash) != request.graph_hash()) {
    return absl::DataLossError("CompileRequest: its nodes do not hash to its graph hash");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RequestGraph>> ParseCompileRequest(std::string_view bytes, StoredHash stored) {
  if (bytes.size() > kMaxCompileRequestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("CompileRequest of ", bytes.size(),
                                                   " bytes (the limit is ", kMaxCompileRequestBytes, ")"));
  }
  proto::CompileRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("malformed CompileRequest: not a CompileRequest message");
  }
  return ReadCompileRequest(request, stored);
}

}  // namespace torch_neuron::compiler
