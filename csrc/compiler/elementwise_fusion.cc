#include "compiler/elementwise_fusion.h"

#include <algorithm>
#include <optional>

#include <c10/util/accumulate.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace torch_neuron::compiler {
namespace {

using Sizes = std::vector<int64_t>;

int64_t Numel(c10::IntArrayRef s) { return c10::multiply_integers(s); }

// A number attribute an op takes as a Scalar (layer norm's eps after
// decomposition): a literal of the kernel.
bool IsNumberAttr(const ir::Arg& a) {
  return a.kind == ir::Arg::Kind::kAttr && (a.attr.isDouble() || a.attr.isInt() || a.attr.isBool());
}

// The row shapes of a domain split after `split` dims: [R..., 1...] (keepdim)
// and [R...].
Sizes RowShape(const Sizes& domain, int split, bool keepdim) {
  Sizes s(domain.begin(), domain.begin() + split);
  if (keepdim) s.resize(domain.size(), 1);
  return s;
}

struct Placement {
  Extent extent;
  int split;  // the split the placement needs, -1 for any
};

// How a tensor of `shape` is read by an element op over `domain` split at
// `split` (-1: not yet fixed), with ATen's broadcasting: the whole domain, one
// value per row ([R..., 1...]), one per row position ([C...] or [1..., C...]),
// or a single value. Other broadcasts are not fused.
std::optional<Placement> Place(const Sizes& shape, const Sizes& domain, int split) {
  if (shape == domain) return Placement{Extent::kElement, split};
  const int n = static_cast<int>(domain.size());
  // A row value of a split domain, even of one element (one row).
  if (split >= 0 && split < n && shape == RowShape(domain, split, true))
    return Placement{Extent::kRow, split};
  if (Numel(shape) == 1) return Placement{Extent::kOne, split};
  if (static_cast<int>(shape.size()) == n) {
    int j = n;  // start of the trailing run of 1s
    while (j > 0 && shape[j - 1] == 1) --j;
    if (split >= 0) j = split;
    if (j < n && shape == RowShape(domain, j, true)) return Placement{Extent::kRow, j};
  }
  size_t lead = 0;
  while (lead < shape.size() && shape[lead] == 1) ++lead;
  const int j = n - static_cast<int>(shape.size() - lead);
  if (j > 0 && (split < 0 || split == j) &&
      std::equal(shape.begin() + lead, shape.end(), domain.begin() + j)) {
    return Placement{Extent::kColumn, j};
  }
  return std::nullopt;
}

// An op with one output of `dtype` (float32 unless its rule says otherwise),
// not yet claimed by a pass.
bool Candidate(const CompileNode& n, c10::ScalarType dtype = c10::ScalarType::Float) {
  return !n.dead && !n.folded && !n.kernel && n.kind == ir::NodeKind::kOp && n.num_outputs() == 1 &&
         n.shape(0).dtype() == dtype && n.shape(0).numel() > 0;
}

bool FloatOrBool(c10::ScalarType t) { return t == c10::ScalarType::Float || t == c10::ScalarType::Bool; }

bool IsCast(const CompileNode& n) { return n.op == "aten::_to_copy"; }

// A _to_copy that only changes the dtype: no layout, device, pinning or memory
// format other than what a kernel output has (non_blocking means nothing here).
bool PlainCast(const CompileNode& n) {
  const std::vector<ir::Arg>& args = n.args;
  if (args.size() != 7 || args[0].kind != ir::Arg::Kind::kOperand) return false;
  for (size_t a = 1; a < args.size(); ++a) {
    if (args[a].kind != ir::Arg::Kind::kAttr) return false;
  }
  const auto none_or = [&](size_t a, auto&& ok) { return args[a].attr.isNone() || ok(args[a].attr); };
  return none_or(2,
                 [](const c10::IValue& v) {
                   return v.isInt() && v.toInt() == static_cast<int64_t>(c10::kStrided);
                 }) &&
         args[3].attr.isNone() &&
         none_or(4, [](const c10::IValue& v) { return v.isBool() && !v.toBool(); }) &&
         none_or(6, [](const c10::IValue& v) {
           return v.isInt() && (v.toInt() == static_cast<int64_t>(c10::MemoryFormat::Preserve) ||
                                v.toInt() == static_cast<int64_t>(c10::MemoryFormat::Contiguous));
         });
}

// How many leading arguments of a member the kernel reads: a reduction reads
// its input (dims and keepdim are the frame), a cast its input (the dtype is
// in the rule name), other ops all.
size_t KernelArgs(const CompileNode& n) { return IsReduction(n.op) || IsCast(n) ? 1 : n.args.size(); }

// Whether an op of `rule` may read a tensor of `dtype`. Ops computing float32
// take any dtype a kernel loads (ATen converts it to float32 too); comparisons
// float32 or bool (an integer comparison is not a float32 one); a cast to
// float32 anything, to another dtype only what float32 holds exactly (ATen
// converts directly, without passing through float32).
bool ReadsDtype(const CompileNode& n, const std::string& rule, c10::ScalarType dtype) {
  if (!KernelLoads(dtype)) return false;
  if (IsCast(n)) return n.shape(0).dtype() == c10::ScalarType::Float || ExactInFloat(dtype);
  if (ResultDtype(rule) != c10::ScalarType::Float) return FloatOrBool(dtype);
  return true;
}

// A reduction (sum, mean, amax, amin; no dtype argument) of a float32 tensor
// over some of its dims: the tensor's sizes, the dims sorted and made
// non-negative, and keepdim.
struct Reduction {
  Sizes domain;
  std::vector<int64_t> dims;
  bool keepdim = false;
};

std::optional<Reduction> ReductionOf(const CompileGraph& g, const CompileNode& n) {
  if (!Candidate(n) || !IsReduction(n.op)) return std::nullopt;
  const std::vector<ir::Arg>& args = n.args;
  if (args.size() < 3 || args[0].kind != ir::Arg::Kind::kOperand || args[1].kind != ir::Arg::Kind::kAttr ||
      args[2].kind != ir::Arg::Kind::kAttr || !args[1].attr.isIntList() || !args[2].attr.isBool() ||
      (args.size() == 4 && !(args[3].kind == ir::Arg::Kind::kAttr && args[3].attr.isNone()))) {
    return std::nullopt;
  }
  const ValueRef v = n.operands[args[0].operands[0]];
  const CompileNode& src = g.nodes[v.node];
  if (src.is_scalar_leaf() || src.shape(v.index).dtype() != c10::ScalarType::Float) return std::nullopt;
  Reduction r{src.shape(v.index).sizes(), args[1].attr.toIntVector(), args[2].attr.toBool()};
  if (r.dims.empty()) return std::nullopt;  // sum(dim=[]) reduces everything: a library call
  const int64_t n_dims = static_cast<int64_t>(r.domain.size());
  for (int64_t& d : r.dims) d = d < 0 ? d + n_dims : d;
  std::sort(r.dims.begin(), r.dims.end());
  for (size_t i = 0; i < r.dims.size(); ++i) {
    if (r.dims[i] < 0 || r.dims[i] >= n_dims || r.dims[i] != r.dims[0] + static_cast<int64_t>(i)) {
      return std::nullopt;  // not one run of dims
    }
  }
  return r;
}

// The split of a reduction a row kernel can compute (sum, mean, amax or amin
// of a float32 tensor over its trailing dims), or -1.
int RowReductionSplit(const CompileGraph& g, const CompileNode& n) {
  const std::optional<Reduction> r = ReductionOf(g, n);
  if (!r || r->dims.back() != static_cast<int64_t>(r->domain.size()) - 1) return -1;
  const int split = static_cast<int>(r->dims.front());
  return n.shape(0).sizes() == RowShape(r->domain, split, r->keepdim) ? split : -1;
}

// The split of a reduction a column kernel can compute (sum, mean, amax or
// amin of a float32 tensor over its leading dims, not all: a bias gradient),
// or -1. The
// split is the number of reduced dims.
int ColumnReductionSplit(const CompileGraph& g, const CompileNode& n) {
  if (!IsReduction(n.op)) return -1;
  const std::optional<Reduction> r = ReductionOf(g, n);
  const int split = r ? static_cast<int>(r->dims.size()) : -1;
  if (!r || r->dims.front() != 0 || split >= static_cast<int>(r->domain.size())) return -1;
  Sizes expected(r->domain.begin() + split, r->domain.end());
  if (r->keepdim) expected.insert(expected.begin(), split, 1);
  return n.shape(0).sizes() == expected ? split : -1;
}

// The name of an op's codegen rule: the op, then each string attribute in
// brackets ("aten::gelu[tanh]"); a cast, its target dtype ("aten::_to_copy[Long]").
std::string RuleName(const CompileNode& n) {
  if (IsCast(n)) return CastRule(n.shape(0).dtype()).value_or(n.op);  // none: not generated
  std::string name = n.op;
  for (const ir::Arg& a : n.args) {
    if (a.kind == ir::Arg::Kind::kAttr && a.attr.isString())
      absl::StrAppend(&name, "[", a.attr.toStringRef(), "]");
  }
  return name;
}

// An elementwise op codegen can express: every argument an operand (a tensor
// of a dtype its rule reads, or a scalar leaf), a number attribute or a string
// attribute naming its rule; or a plain cast.
bool Elementwise(const CompileGraph& g, const CompileNode& n) {
  if (n.kind != ir::NodeKind::kOp || (IsCast(n) && !PlainCast(n))) return false;
  const std::string rule = RuleName(n);
  const c10::ScalarType result = ResultDtype(rule);
  const c10::ScalarType dtype = n.num_outputs() == 1 ? n.shape(0).dtype() : result;
  if (!Candidate(n, result == c10::ScalarType::Float && RoundsTo(rule, dtype) ? dtype : result)) return false;
  std::vector<bool> scalar;
  for (size_t i = 0; i < KernelArgs(n); ++i) {
    const ir::Arg& a = n.args[i];
    if (a.kind == ir::Arg::Kind::kAttr && a.attr.isString()) continue;
    if (IsNumberAttr(a)) {
      scalar.push_back(true);
      continue;
    }
    if (a.kind != ir::Arg::Kind::kOperand) return false;
    const ValueRef v = n.operands[a.operands[0]];
    const CompileNode& src = g.nodes[v.node];
    if (src.is_scalar_leaf()) {
      scalar.push_back(true);
    } else {
      // A folded constant of one element (where(c, x, 0.0)'s 0.0, made by a
      // factory and folded) is read as one value; larger ones stay ATen inputs.
      if ((src.folded && src.folded->numel() != 1) || !ReadsDtype(n, rule, src.shape(v.index).dtype())) {
        return false;
      }
      scalar.push_back(false);
    }
  }
  return CanGenerate(rule, scalar);
}

struct Group {
  std::vector<int32_t> members;
  // -1 while no node outside the group has read it. Then the position of its
  // last member at that moment: the kernel runs there, before every outside
  // reader. A later node still joins if all it reads from outside the group
  // comes before that position (softmax after a loss that read log-softmax).
  int32_t anchor = -1;
  Sizes domain;
  int split = -1;  // row kernels: dims before the row; -1 while undecided
  // A column kernel's group: it has column reductions, so it runs by columns
  // and holds no row values (a row reduction needs whole rows).
  bool columns = false;
  bool row_values = false;
};

// Where a node would sit in a group: the domain and split, its result's extent
// and each tensor operand's.
struct Frame {
  Sizes domain;
  int split = -1;
  Extent extent = Extent::kElement;
  std::vector<Extent> operand_extents;  // per operand of the node (scalars: unused)
};

}  // namespace

CompileNode MakeFusedKernelNode(const FusedKernel& kernel, const std::string& library,
                                const std::vector<ir::Shape>& input_shapes,
                                const std::vector<ir::Shape>& output_shapes) {
  auto call = [&](const char* op, std::vector<ir::Arg> args) {
    CompileNode n;
    n.op = op;
    n.args = std::move(args);
    n.shapes = output_shapes;
    n.local_hash = ir::LocalHash(n.kind, n.op, n.args, n.shapes, n.scalar);
    return n;
  };
  std::vector<int32_t> tensors, scalars;
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    (static_cast<int32_t>(i) < kernel.num_inputs ? tensors : scalars).push_back(static_cast<int32_t>(i));
  }
  // The dtype of every input and output (c10::ScalarType codes).
  std::vector<int64_t> input_dtypes, output_dtypes;
  for (int32_t i = 0; i < kernel.num_inputs; ++i)
    input_dtypes.push_back(static_cast<int64_t>(kernel.InputDtype(i)));
  for (int32_t i = 0; i < static_cast<int32_t>(kernel.outputs.size()); ++i) {
    output_dtypes.push_back(static_cast<int64_t>(kernel.OutputDtype(i)));
  }
  // The node's arguments are the call's fields in a fixed order: they name
  // it in graph text and its hash. Lowering reads the call from the node's
  // FusedKernel and shapes (a typed runtime::KernelCall), not from these.
  std::vector<ir::Arg> args = {ir::Arg::Attr(c10::IValue(library)), ir::Arg::Attr(c10::IValue(kernel.name)),
                               ir::Arg::OperandList(tensors), ir::Arg::OperandList(scalars)};
  auto attr = [&](c10::IValue v) { args.push_back(ir::Arg::Attr(std::move(v))); };
  if (kernel.row_length > 0) {
    // output_sizes holds each output's rank, then its sizes.
    std::vector<int64_t> extents, output_extents, sizes;
    for (Extent e : kernel.input_extents) extents.push_back(static_cast<int64_t>(e));
    for (int32_t v : kernel.outputs) output_extents.push_back(static_cast<int64_t>(kernel.ExtentOf(v)));
    for (const ir::Shape& shape : output_shapes) {
      sizes.push_back(static_cast<int64_t>(shape.sizes().size()));
      sizes.insert(sizes.end(), shape.sizes().begin(), shape.sizes().end());
    }
    attr(kernel.rows);
    attr(kernel.row_length);
    attr(extents);
    attr(output_extents);
    attr(sizes);
    attr(input_dtypes);
    attr(output_dtypes);
    return call(kFusedRowKernelOp, std::move(args));
  }
  attr(output_shapes[0].sizes());
  attr(static_cast<int64_t>(kernel.outputs.size()));
  attr(std::vector<int64_t>{});  // no output reuses an input (the executor may decide otherwise)
  attr(input_dtypes);
  attr(output_dtypes);
  return call(kFusedKernelOp, std::move(args));
}

absl::StatusOr<bool> ElementwiseFusion::Run(CompileGraph& g) {
  const int32_t size = static_cast<int32_t>(g.nodes.size());
  std::vector<int32_t> group_of(size, -1);
  std::vector<Extent> extent_of(size, Extent::kElement);   // a member's result in its group
  std::vector<std::vector<Extent>> operand_extents(size);  // how a member reads its operands
  std::vector<Group> groups;

  // The frames node i could take: as a reduction over its operand's domain; as
  // an op on row values of an operand's group; as an element op over its own
  // shape.
  auto frames_for = [&](int32_t i) {
    const CompileNode& n = g.nodes[i];
    std::vector<Frame> frames;
    // A reduction over the trailing dims (a row value) or the leading ones (a
    // column value), in its operand's domain.
    const int row_split = RowReductionSplit(g, n);
    const int split = row_split >= 0 ? row_split : ColumnReductionSplit(g, n);
    if (split >= 0) {
      const ValueRef v = n.operands[n.args[0].operands[0]];
      frames.push_back(Frame{g.nodes[v.node].shape(v.index).sizes(), split,
                             row_split >= 0 ? Extent::kRow : Extent::kColumn,
                             std::vector<Extent>(n.operands.size(), Extent::kElement)});
      return frames;
    }
    if (!Elementwise(g, n)) return frames;
    const Sizes& out = n.shape(0).sizes();
    for (const ValueRef& v : n.operands) {
      const int32_t gi = group_of[v.node];
      if (gi < 0 || groups[gi].split < 0) continue;
      const Group& group = groups[gi];
      if (out != RowShape(group.domain, group.split, true) &&
          out != RowShape(group.domain, group.split, false)) {
        continue;
      }
      Frame f{group.domain, group.split, Extent::kRow, {}};
      bool ok = true;
      for (const ValueRef& u : n.operands) {
        const Sizes& shape = g.nodes[u.node].shape(u.index).sizes();
        if (g.nodes[u.node].is_scalar_leaf()) {
          f.operand_extents.push_back(Extent::kOne);
        } else if (shape == out) {
          f.operand_extents.push_back(Extent::kRow);
        } else if (Numel(shape) == 1) {
          f.operand_extents.push_back(Extent::kOne);
        } else {
          ok = false;
        }
      }
      if (ok) frames.push_back(std::move(f));
    }
    // Over its own shape, split as one of its operands' groups over that shape
    // is, or as its operands' broadcasts need.
    std::vector<int> splits;
    for (const ValueRef& v : n.operands) {
      const int32_t gi = group_of[v.node];
      if (gi >= 0 && groups[gi].domain == out && groups[gi].split >= 0 &&
          std::count(splits.begin(), splits.end(), groups[gi].split) == 0) {
        splits.push_back(groups[gi].split);
      }
    }
    splits.push_back(-1);
    for (int split : splits) {
      Frame f{out, split, Extent::kElement, {}};
      bool ok = true;
      for (const ValueRef& u : n.operands) {
        if (g.nodes[u.node].is_scalar_leaf()) {
          f.operand_extents.push_back(Extent::kOne);
          continue;
        }
        std::optional<Placement> p = Place(g.nodes[u.node].shape(u.index).sizes(), out, f.split);
        if (!p) {
          ok = false;
          break;
        }
        f.split = p->split;
        f.operand_extents.push_back(p->extent);
      }
      if (ok) frames.push_back(std::move(f));
    }
    return frames;
  };

  // Where the value of node u exists once kernels are placed: a member of a
  // group at the group's anchor (or, still open, not before the end).
  auto AvailableAt = [&](int32_t u) {
    if (group_of[u] < 0) return u;
    return groups[group_of[u]].anchor >= 0 ? groups[group_of[u]].anchor : size;
  };
  // The first read from outside fixes where a group's kernel runs.
  auto close = [&](int32_t gi) {
    if (gi >= 0 && groups[gi].anchor < 0) groups[gi].anchor = groups[gi].members.back();
  };

  for (int32_t i = 0; i < size; ++i) {
    const CompileNode& n = g.nodes[i];
    if (n.dead) continue;
    int32_t chosen = -1;
    std::vector<Frame> frames = frames_for(i);
    for (size_t fi = 0; fi < frames.size() && chosen < 0; ++fi) {
      const Frame& f = frames[fi];
      // The open groups among the operands this frame can merge: same domain, a
      // compatible split, and every operand from them read with the extent it
      // has there. None has been read from outside, so one kernel at this node
      // can compute them all.
      std::vector<int32_t> merge;
      int split = f.split;
      bool columns = f.extent == Extent::kColumn, row_values = f.extent == Extent::kRow;
      for (const ValueRef& v : n.operands) {
        const int32_t gi = group_of[v.node];
        if (gi < 0 || std::count(merge.begin(), merge.end(), gi) > 0) continue;
        if (groups[gi].anchor >= 0 &&
            !std::all_of(n.operands.begin(), n.operands.end(), [&](const ValueRef& u) {
              return group_of[u.node] == gi || AvailableAt(u.node) < groups[gi].anchor;
            })) {
          continue;
        }
        const Group& group = groups[gi];
        if (group.domain != f.domain || (group.split >= 0 && split >= 0 && group.split != split)) continue;
        // Column reductions and row values never share a kernel.
        if ((f.extent == Extent::kColumn && group.row_values) ||
            (f.extent == Extent::kRow && group.columns)) {
          continue;
        }
        bool consistent = true;
        for (size_t k = 0; k < n.operands.size(); ++k) {
          // A column reduction's result exists only once its kernel has run.
          consistent &=
              group_of[n.operands[k].node] != gi || (extent_of[n.operands[k].node] == f.operand_extents[k] &&
                                                     extent_of[n.operands[k].node] != Extent::kColumn);
        }
        if (!consistent || (group.columns && row_values) || (group.row_values && columns)) continue;
        if (group.split >= 0) split = group.split;
        columns |= group.columns;
        row_values |= group.row_values;
        merge.push_back(gi);
      }
      // A read group joins only alone: the members of others may come after its anchor.
      for (int32_t gi : merge) {
        if (groups[gi].anchor < 0) continue;
        merge = {gi};
        split = groups[gi].split >= 0 ? groups[gi].split : f.split;
        break;
      }
      if (merge.empty() && fi + 1 < frames.size()) continue;  // a later frame may join a group
      if (merge.empty()) {
        chosen = static_cast<int32_t>(groups.size());
        groups.push_back(Group{{}, -1, f.domain, split});
      } else {
        chosen = merge[0];
        groups[chosen].split = split;
        for (size_t m = 1; m < merge.size(); ++m) {
          Group& other = groups[merge[m]];
          groups[chosen].columns |= other.columns;
          groups[chosen].row_values |= other.row_values;
          for (int32_t member : other.members) group_of[member] = chosen;
          std::vector<int32_t>& members = groups[chosen].members;
          members.insert(members.end(), other.members.begin(), other.members.end());
          std::sort(members.begin(), members.end());  // program order, for codegen
          other.members.clear();
        }
      }
      groups[chosen].members.push_back(i);  // the latest node: order kept
      groups[chosen].columns |= f.extent == Extent::kColumn;
      groups[chosen].row_values |= f.extent == Extent::kRow;
      group_of[i] = chosen;
      extent_of[i] = f.extent;
      operand_extents[i] = f.operand_extents;
    }
    for (const ValueRef& v : n.operands) {
      if (group_of[v.node] != chosen) close(group_of[v.node]);
    }
  }
  for (const ValueRef& v : g.outputs) close(group_of[v.node]);

  // Who reads each node from outside its group (graph outputs count).
  std::vector<bool> read_outside(size, false);
  for (int32_t i = 0; i < size; ++i) {
    if (g.nodes[i].dead) continue;
    for (const ValueRef& v : g.nodes[i].operands) {
      if (group_of[v.node] >= 0 && group_of[v.node] != group_of[i]) read_outside[v.node] = true;
    }
  }
  for (const ValueRef& v : g.outputs) read_outside[v.node] = true;

  bool changed = false;
  int kernel_index = 0;
  // Kernels with the same body share one function (an expanded foreach makes
  // one identical kernel per tensor): summary and arity -> name.
  absl::flat_hash_map<std::string, std::string> name_of_body;
  absl::flat_hash_map<int32_t, ValueRef> replacement;  // member -> kernel output
  for (Group& group : groups) {
    if (group.members.size() < 2) continue;  // one op: the ATen call is as good
    // A group is a row kernel once anything in it is not one value per element.
    bool row_kernel = group.split >= 0;
    for (int32_t m : group.members) {
      for (size_t k = 0; k < g.nodes[m].operands.size(); ++k) {
        row_kernel |= !g.nodes[g.nodes[m].operands[k].node].is_scalar_leaf() &&
                      operand_extents[m][k] != Extent::kElement;
      }
    }
    const int split = group.split >= 0 ? group.split : std::max(0, static_cast<int>(group.domain.size()) - 1);
    auto kernel = std::make_shared<FusedKernel>();
    if (row_kernel) {
      kernel->row_length = Numel(c10::IntArrayRef(group.domain).slice(split));
      kernel->rows = Numel(c10::IntArrayRef(group.domain).slice(0, split));
    }
    absl::flat_hash_map<int32_t, int32_t> value_of_member;  // node -> kernel value
    // Tensor inputs (with the extent they are read with), then scalar inputs.
    std::vector<std::pair<ValueRef, Extent>> tensor_inputs;
    std::vector<ValueRef> scalar_inputs;
    std::vector<ir::Shape> input_shapes, scalar_shapes;
    // An operand made by an earlier kernel's member: that member's own
    // shape. (The kernel took the slot of its anchor, so the slot's node now
    // has the kernel's outputs, and index v.index of those is another value.)
    auto shape_of = [&](ValueRef v) -> const ir::Shape& {
      auto it = replacement.find(v.node);
      if (it != replacement.end()) v = it->second;
      return g.nodes[v.node].shape(v.index);
    };
    auto tensor_input = [&](ValueRef v, Extent e) {
      if (!row_kernel) e = Extent::kElement;
      auto it = std::find(tensor_inputs.begin(), tensor_inputs.end(), std::make_pair(v, e));
      if (it != tensor_inputs.end()) return static_cast<int32_t>(it - tensor_inputs.begin());
      tensor_inputs.emplace_back(v, e);
      input_shapes.push_back(shape_of(v));
      return static_cast<int32_t>(tensor_inputs.size() - 1);
    };
    auto scalar_input = [&](ValueRef v) {
      auto it = std::find(scalar_inputs.begin(), scalar_inputs.end(), v);
      if (it != scalar_inputs.end()) return static_cast<int32_t>(it - scalar_inputs.begin());
      scalar_inputs.push_back(v);
      scalar_shapes.push_back(shape_of(v));
      return static_cast<int32_t>(scalar_inputs.size() - 1);
    };
    // The tensor operand feeding each argument of a member (-1: not a tensor
    // operand), reductions reading their first argument only.
    auto arg_operand = [&](const CompileNode& n, size_t a) -> int32_t {
      const ir::Arg& arg = n.args[a];
      if (arg.kind != ir::Arg::Kind::kOperand || a >= KernelArgs(n)) return -1;
      return arg.operands[0];
    };
    // Tensor inputs first (values 0..), so number them in a first sweep.
    for (int32_t m : group.members) {
      const CompileNode& n = g.nodes[m];
      for (size_t a = 0; a < n.args.size(); ++a) {
        const int32_t k = arg_operand(n, a);
        if (k < 0) continue;
        const ValueRef v = n.operands[k];
        if (group_of[v.node] != group_of[m] && !g.nodes[v.node].is_scalar_leaf()) {
          tensor_input(v, operand_extents[m][k]);
        }
      }
    }
    kernel->num_inputs = static_cast<int32_t>(tensor_inputs.size());
    for (const auto& input : tensor_inputs) kernel->input_extents.push_back(input.second);
    for (const ir::Shape& shape : input_shapes) kernel->input_dtypes.push_back(shape.dtype());
    if (!row_kernel) kernel->input_extents.clear();
    for (int32_t m : group.members) {
      const CompileNode& n = g.nodes[m];
      FusedOp op{RuleName(n), {}, row_kernel ? extent_of[m] : Extent::kElement};
      const c10::ScalarType dtype = n.shape(0).dtype();
      if (dtype != c10::ScalarType::Float && ResultDtype(op.op) == c10::ScalarType::Float)
        op.rounding = dtype;
      for (size_t a = 0; a < n.args.size(); ++a) {
        const ir::Arg& arg = n.args[a];
        if (a >= KernelArgs(n)) break;
        if (arg.kind == ir::Arg::Kind::kAttr && arg.attr.isString()) continue;  // in the rule name
        if (arg.kind == ir::Arg::Kind::kAttr) {
          FusedOp::Operand literal;
          literal.literal =
              arg.attr.isBool() ? (arg.attr.toBool() ? 1.0 : 0.0) : arg.attr.toScalar().toDouble();
          op.operands.push_back(literal);
          continue;
        }
        const int32_t k = arg.operands[0];
        const ValueRef v = n.operands[k];
        if (g.nodes[v.node].is_scalar_leaf()) {
          op.operands.push_back({true, scalar_input(v), std::nullopt});
        } else if (group_of[v.node] == group_of[m]) {
          op.operands.push_back({false, value_of_member.at(v.node), std::nullopt});
        } else {
          op.operands.push_back({false, tensor_input(v, operand_extents[m][k]), std::nullopt});
        }
      }
      value_of_member[m] = kernel->num_inputs + static_cast<int32_t>(kernel->ops.size());
      kernel->ops.push_back(std::move(op));
    }
    kernel->num_scalars = static_cast<int32_t>(scalar_inputs.size());
    // Outputs: members read outside the group, in member order.
    absl::flat_hash_map<int32_t, int32_t> output_of_member;
    std::vector<ir::Shape> output_shapes;
    for (int32_t m : group.members) {
      if (!read_outside[m]) continue;
      output_of_member[m] = static_cast<int32_t>(kernel->outputs.size());
      kernel->outputs.push_back(value_of_member.at(m));
      kernel->output_dtypes.push_back(g.nodes[m].shape(0).dtype());
      output_shapes.push_back(g.nodes[m].shape(0));
    }
    if (kernel->outputs.empty()) continue;  // nothing reads it: DCE's business
    const std::string body =
        absl::StrCat(kernel->num_inputs, ":", kernel->num_scalars, ":", KernelSummary(*kernel));
    auto [named, is_new] = name_of_body.try_emplace(body, absl::StrCat("tn_k", kernel_index));
    if (is_new) ++kernel_index;
    kernel->name = named->second;

    // The kernel takes its anchor's place (the last member before any outside
    // reader); the other members die.
    const int32_t at = group.anchor >= 0 ? group.anchor : group.members.back();
    std::vector<ir::Shape> all_inputs = input_shapes;
    all_inputs.insert(all_inputs.end(), scalar_shapes.begin(), scalar_shapes.end());
    CompileNode fused = MakeFusedKernelNode(*kernel, "", all_inputs, output_shapes);
    for (const auto& input : tensor_inputs) fused.operands.push_back(input.first);
    fused.operands.insert(fused.operands.end(), scalar_inputs.begin(), scalar_inputs.end());
    fused.kernel = kernel;
    for (int32_t m : group.members) g.nodes[m].dead = true;
    g.nodes[at] = std::move(fused);
    for (const auto& [member, output] : output_of_member) replacement[member] = ValueRef{at, output};
    changed = true;
  }
  // Readers of members read the kernels' outputs (one pass for all groups;
  // kernel operands too, which may be other kernels' members).
  auto rewire = [&](ValueRef& v) {
    auto it = replacement.find(v.node);
    if (it != replacement.end()) v = it->second;
  };
  for (CompileNode& n : g.nodes) {
    if (n.dead) continue;
    for (ValueRef& v : n.operands) rewire(v);
  }
  for (ValueRef& v : g.outputs) rewire(v);
  return changed;
}

}  // namespace torch_neuron::compiler
