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

struct Form {
  std::string op;
  std::string args;
  std::vector<ArgSource> sources;  // `args`, parsed
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
    for (auto& [list, form] : *f) form.sources = ParseArgs(form.args);
    return f;
  }();
  return *forms;
}

// The per-tensor form of node `n`, if it has one and its lists are whole (one
// element per output, no None).
const Form* FormOf(const CompileNode& n) {
  auto it = Forms().find(n.op);
  if (it == Forms().end()) return nullptr;
  for (const ArgSource& s : it->second.sources) {
    if (s.kind == '1') continue;
    if (s.index >= static_cast<int32_t>(n.args.size())) return nullptr;
    const ir::Arg& list = n.args[s.index];
    if (s.kind == 'A') {
      if (list.kind == ir::Arg::Kind::kOperandList) return nullptr;
      continue;
    }
    if (list.kind != ir::Arg::Kind::kOperandList ||
        list.operands.size() != static_cast<size_t>(n.num_outputs()) ||
        std::any_of(list.operands.begin(), list.operands.end(), [](int32_t k) { return k < 0; })) {
      return nullptr;
    }
  }
  return &it->second;
}

}  // namespace

std::vector<std::string> ForeachForms() {
  std::vector<std::string> lines;
  for (const auto& [list, form] : Forms())
    lines.push_back(absl::StrCat(list, " -> ", form.op, " ", form.args));
  std::sort(lines.begin(), lines.end());
  return lines;
}

absl::StatusOr<bool> ForeachExpansion::Run(CompileGraph& g) {
  return RewriteNodes(g, [](const CompileNode& n, NodeBuilder& b) -> std::optional<std::vector<ValueRef>> {
    const Form* form = FormOf(n);
    if (form == nullptr) return std::nullopt;
    std::vector<ValueRef> outputs;
    for (int32_t k = 0; k < n.num_outputs(); ++k) {
      std::vector<NodeBuilder::Input> inputs;
      for (const ArgSource& s : form->sources) {
        if (s.kind == '1') {
          inputs.emplace_back(b.One());
          continue;
        }
        const ir::Arg& arg = n.args[s.index];
        if (s.kind == 'L') {
          inputs.emplace_back(n.operands[arg.operands[k]]);
        } else if (arg.kind == ir::Arg::Kind::kOperand) {
          inputs.emplace_back(n.operands[arg.operands[0]]);
        } else {
          inputs.emplace_back(arg.attr);  // FormOf admits no shared lists
        }
      }
      outputs.push_back(b.Op(form->op, inputs, n.shape(k), n.source));
    }
    return outputs;
  });
}

}  // namespace torch_neuron::compiler
