#include "compiler/foreach_expansion.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace torch_neuron::compiler {
namespace {

// Where each argument of the per-tensor call comes from, one token per
// argument: "L<j>" element i of the foreach call's list argument j, "A<j>" its
// argument j as it is (a shared scalar, tensor or attribute), "1" the constant 1
// (the alpha the list op's schema does not have).
struct Form {
  std::string op;
  std::string args;
};

const absl::flat_hash_map<std::string, Form>& Forms() {
  static const auto* forms = [] {
    auto* f = new absl::flat_hash_map<std::string, Form>();
    for (const char* name : {"add", "sub"}) {
      const std::string list = absl::StrCat("aten::_foreach_", name);
      const std::string one = absl::StrCat("aten::", name);
      (*f)[list + ".Scalar"] = {one + ".Scalar", "L0 A1 1"};
      (*f)[list + ".ScalarList"] = {one + ".Scalar", "L0 L1 1"};
      (*f)[list + ".List"] = {one + ".Tensor", "L0 L1 A2"};
    }
    (*f)["aten::_foreach_add.Tensor"] = {"aten::add.Tensor", "L0 A1 A2"};
    for (const char* name : {"mul", "div"}) {
      const std::string list = absl::StrCat("aten::_foreach_", name);
      const std::string one = absl::StrCat("aten::", name);
      (*f)[list + ".Scalar"] = {one + ".Scalar", "L0 A1"};
      (*f)[list + ".ScalarList"] = {one + ".Scalar", "L0 L1"};
      (*f)[list + ".List"] = {one + ".Tensor", "L0 L1"};
      (*f)[list + ".Tensor"] = {one + ".Tensor", "L0 A1"};
    }
    (*f)["aten::_foreach_lerp.Scalar"] = {"aten::lerp.Scalar", "L0 L1 A2"};
    (*f)["aten::_foreach_lerp.ScalarList"] = {"aten::lerp.Scalar", "L0 L1 L2"};
    (*f)["aten::_foreach_lerp.List"] = {"aten::lerp.Tensor", "L0 L1 L2"};
    for (const char* name : {"addcmul", "addcdiv"}) {
      const std::string list = absl::StrCat("aten::_foreach_", name);
      (*f)[list + ".Scalar"] = {absl::StrCat("aten::", name), "L0 L1 L2 A3"};
      (*f)[list + ".ScalarList"] = {absl::StrCat("aten::", name), "L0 L1 L2 L3"};
    }
    for (const char* name : {"maximum", "minimum"}) {
      (*f)[absl::StrCat("aten::_foreach_", name, ".List")] = {absl::StrCat("aten::", name), "L0 L1"};
    }
    (*f)["aten::_foreach_pow.Scalar"] = {"aten::pow.Tensor_Scalar", "L0 A1"};
    (*f)["aten::_foreach_pow.ScalarList"] = {"aten::pow.Tensor_Scalar", "L0 L1"};
    for (const char* name : {"sqrt", "exp", "log", "neg", "abs", "reciprocal", "sigmoid", "tanh"}) {
      (*f)[absl::StrCat("aten::_foreach_", name)] = {absl::StrCat("aten::", name), "L0"};
    }
    return f;
  }();
  return *forms;
}

struct ArgSource {
  char kind;  // 'L', 'A' or '1'
  int32_t index;
};

std::vector<ArgSource> ParseArgs(const std::string& args) {
  std::vector<ArgSource> out;
  for (absl::string_view token : absl::StrSplit(args, ' ')) {
    out.push_back({token[0], token.size() > 1 ? token[1] - '0' : 0});
  }
  return out;
}

// The per-tensor form of node `n`, if it has one and its lists are whole (one
// element per output, no None).
const Form* FormOf(const CompileNode& n) {
  if (n.dead || n.folded || n.kernel || n.ir->kind() != ir::NodeKind::kOp) return nullptr;
  auto it = Forms().find(n.ir->op());
  if (it == Forms().end()) return nullptr;
  for (const ArgSource& s : ParseArgs(it->second.args)) {
    if (s.kind != 'L') continue;
    if (s.index >= static_cast<int32_t>(n.ir->args().size())) return nullptr;
    const ir::Arg& list = n.ir->args()[s.index];
    if (list.kind != ir::Arg::Kind::kOperandList ||
        list.operands.size() != static_cast<size_t>(n.ir->num_outputs()) ||
        std::any_of(list.operands.begin(), list.operands.end(), [](int32_t k) { return k < 0; })) {
      return nullptr;
    }
  }
  return &it->second;
}

}  // namespace

std::vector<std::string> ForeachForms() {
  std::vector<std::string> lines;
  for (const auto& [list, form] : Forms()) lines.push_back(absl::StrCat(list, " -> ", form.op, " ", form.args));
  std::sort(lines.begin(), lines.end());
  return lines;
}

absl::StatusOr<bool> ForeachExpansion::Run(CompileGraph& g) {
  if (std::none_of(g.nodes.begin(), g.nodes.end(), [](const CompileNode& n) { return FormOf(n); })) {
    return false;
  }
  // The graph is rebuilt: an expanded node becomes consecutive nodes, one per
  // output, so every position after it moves.
  std::vector<CompileNode> nodes;
  nodes.reserve(g.nodes.size() * 2);
  std::vector<int32_t> first(g.nodes.size(), -1);  // old node -> its (first) new node
  std::vector<bool> expanded(g.nodes.size(), false);
  auto remap = [&](ValueRef v) {
    return expanded[v.node] ? ValueRef{first[v.node] + v.index, 0} : ValueRef{first[v.node], v.index};
  };
  int32_t one = -1;  // the constant 1, made when first needed

  for (size_t i = 0; i < g.nodes.size(); ++i) {
    CompileNode& n = g.nodes[i];
    const Form* form = FormOf(n);
    if (form == nullptr) {
      CompileNode moved = std::move(n);
      for (ValueRef& v : moved.operands) v = remap(v);
      first[i] = static_cast<int32_t>(nodes.size());
      nodes.push_back(std::move(moved));
      continue;
    }
    const std::vector<ArgSource> sources = ParseArgs(form->args);
    if (one < 0 && std::any_of(sources.begin(), sources.end(), [](const ArgSource& s) { return s.kind == '1'; })) {
      ir::NodePtr constant = ir::Node::MakeScalar(1, c10::ScalarType::Long);
      g.owned_ir.push_back(constant);
      CompileNode leaf;
      leaf.ir = constant.get();
      one = static_cast<int32_t>(nodes.size());
      nodes.push_back(std::move(leaf));
    }
    first[i] = static_cast<int32_t>(nodes.size());
    expanded[i] = true;
    for (int32_t k = 0; k < n.ir->num_outputs(); ++k) {
      CompileNode call;
      std::vector<ir::Arg> args;
      auto add_operand = [&](ValueRef v) {
        args.push_back(ir::Arg::Operand(static_cast<int32_t>(call.operands.size())));
        call.operands.push_back(v);
      };
      for (const ArgSource& s : sources) {
        if (s.kind == '1') {
          add_operand(ValueRef{one, 0});
          continue;
        }
        const ir::Arg& arg = n.ir->args()[s.index];
        if (s.kind == 'L') {
          add_operand(remap(n.operands[arg.operands[k]]));
        } else if (arg.kind == ir::Arg::Kind::kOperand) {
          add_operand(remap(n.operands[arg.operands[0]]));
        } else {
          args.push_back(arg);  // an attribute (or a whole list) as it is
          for (int32_t& operand : args.back().operands) {
            const int32_t at = static_cast<int32_t>(call.operands.size());
            call.operands.push_back(remap(n.operands[operand]));
            operand = at;
          }
        }
      }
      // Placeholder operands for the node's arity: the compile graph holds the real ones.
      std::vector<ir::Value> placeholders;
      for (const ValueRef& v : call.operands) {
        placeholders.push_back(ir::Value{ir::Node::MakeDeviceData(nodes[v.node].ir->shape(v.index), nullptr), 0});
      }
      ir::NodePtr node = ir::Node::MakeOp(form->op, std::move(placeholders), std::move(args), {n.ir->shape(k)});
      node->set_source(n.ir->source());
      g.owned_ir.push_back(node);
      call.ir = node.get();
      nodes.push_back(std::move(call));
    }
  }
  for (ValueRef& v : g.outputs) v = remap(v);
  for (int32_t& p : g.parameters) p = first[p];
  g.nodes = std::move(nodes);
  return true;
}

}  // namespace torch_neuron::compiler
