// Passes over a CompileGraph and the pipeline that runs them in order, with the
// verifier after every pass that changed the graph.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/hlo_graph.h"

namespace torch_neuron::compiler {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  // True if the graph changed.
  virtual absl::StatusOr<bool> Run(CompileGraph& graph) = 0;
};

class PassPipeline {
 public:
  template <typename T, typename... Args>
  T& AddPass(Args&&... args) {
    auto pass = std::make_unique<T>(std::forward<Args>(args)...);
    T& ref = *pass;
    passes_.push_back(std::move(pass));
    return ref;
  }

  // Runs every pass once, in order; the verifier runs first and after each pass
  // that reports a change. The first failure is returned, prefixed by the pass.
  absl::StatusOr<bool> Run(CompileGraph& graph) const;

  std::vector<std::string> PassNames() const;

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

// Checks the graph's invariants: operands precede their users, are alive and in
// range; outputs and parameters are alive.
absl::Status VerifyGraph(const CompileGraph& graph);

}  // namespace torch_neuron::compiler
