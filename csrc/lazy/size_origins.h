// SizeOrigins: where the size parameters of a size-generic region's trace
// came from, so that its program can run at other sizes without a trace.
//
// A torch.compile region whose sizes Dynamo made symbolic is traced
// size-generic (tracer.h): each SymInt argument of a traced op becomes a
// scalar parameter of the program holding the value it had in this trace.
// To run the program at other sizes its caller (torch_neuron/_compile_backend.py)
// must know, for each such parameter, which of its own size expressions it
// is. While a recorder is installed on the thread, the caller arms it before
// each op of its graph with the origin of every int argument of that op (an
// expression of its own, numbered, or a literal); the tracer notes, for each
// scalar parameter leaf it binds, the origin the armed op gave that argument,
// or "unknown" for a parameter of an op nobody armed (an op traced inside
// another's kernel). A size-dependent value bound as a constant (a 0 or 1,
// which the graph holds as a constant) makes the trace unfit to run at other
// sizes. Thread-compatible: one recorder per thread, used by that thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "ir/node.h"

namespace torch_neuron::lazy {

class SizeOrigins {
 public:
  static constexpr int64_t kLiteral = -1;  // the same value at every size
  static constexpr int64_t kUnknown = -2;  // an op nobody armed

  // Arms the recorder for the next traced op named `op` ("aten::view", no
  // overload; its "_copy" form matches too): `args[i][j]` is the origin of
  // element j of argument i (element 0 of a scalar argument); an empty
  // `args[i]` gives none.
  void Arm(std::string op, std::vector<std::vector<int64_t>> args);

  // Called by the tracer when it binds op `name`: whether the armed origins
  // are that op's (then they are taken).
  bool Take(const std::string& name);
  // The origin the taken op gave element `element` of argument `arg`.
  int64_t OriginOf(size_t arg, size_t element) const;
  // Notes a parameter leaf and its origin; a constant (not a parameter) of
  // a size-dependent origin makes the trace unfit.
  void Note(const ir::NodePtr& leaf, int64_t origin);

  // The origin of parameter leaf `leaf`: kUnknown for one never noted.
  int64_t Get(const ir::Node* leaf) const;
  // How many parameter leaves were noted with a size's origin (>= 0): a
  // program whose parameters hold fewer lost one (a node that kept a size
  // otherwise, an op dropped or merged with an earlier one).
  int64_t sizes_noted() const { return sizes_noted_; }
  // Whether a size-dependent value was bound as a constant, or an op given
  // a size was never bound as itself (taken by a shortcut that keeps sizes in
  // its node, or traced as other ops).
  bool baked() const { return baked_ || (armed_ && AnySize(args_)); }

 private:
  bool armed_ = false;
  std::string op_;
  std::vector<std::vector<int64_t>> args_;
  std::vector<std::vector<int64_t>> taken_;
  static bool AnySize(const std::vector<std::vector<int64_t>>& args);
  absl::flat_hash_map<const ir::Node*, int64_t> leaves_;
  std::vector<ir::NodePtr> held_;  // the noted leaves, alive while noted
  bool baked_ = false;
  int64_t sizes_noted_ = 0;
};

// The recorder installed on this thread (null: none). Returns the previous.
SizeOrigins* SetSizeOrigins(SizeOrigins* origins);
SizeOrigins* CurrentSizeOrigins();

}  // namespace torch_neuron::lazy
