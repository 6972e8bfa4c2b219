#include "compiler/compiler.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "compiler/compile_request.h"
#include "compiler/constant_folding.h"
#include "compiler/cse.h"
#include "compiler/dce.h"
#include "compiler/decomposition.h"
#include "compiler/elementwise_fusion.h"
#include "compiler/foreach_expansion.h"
#include "compiler/lowering.h"
#include "compiler/fault_injection.h"
#include "compiler/fingerprint.h"
#include "compiler/pass_pipeline.h"
#include "ir/hash.h"
#include "neff/neff_writer.h"

namespace torch_neuron::compiler {
namespace {

// Builds the fused kernels of `g` into one shared object and names it in each
// kernel node. The object's name and bytes (the NEFF carries them; the
// runtime makes them callable when it loads the program).
absl::StatusOr<std::pair<std::string, std::string>> BuildKernels(CompileGraph& g, const Target& target,
                                                                 std::string* sources) {
  std::vector<std::pair<std::string, std::string>> kernels;
  absl::flat_hash_set<std::string> built;  // kernels of one body share a name
  for (const CompileNode& n : g.nodes) {
    if (n.dead || !n.kernel || !built.insert(n.kernel->name).second) continue;
    kernels.emplace_back(n.kernel->name, KernelSource(*n.kernel));
    absl::StrAppend(sources, kernels.back().second, "\n");
  }
  if (kernels.empty()) return std::pair<std::string, std::string>();
  // The ABI version symbol the runtime checks when it loads the library.
  kernels.emplace_back("tn_kernel_abi", AbiVersionSource());
  absl::StatusOr<std::string> bytes = target.BuildKernels(kernels);
  if (!bytes.ok()) return bytes.status();
  const std::string name = absl::StrCat("tn_", ir::HashToHex(ir::Hash(*bytes)));
  for (CompileNode& n : g.nodes) {
    if (n.dead || !n.kernel) continue;
    std::vector<ir::Shape> inputs, outputs;
    for (const ValueRef& v : n.operands) inputs.push_back(g.nodes[v.node].shape(v.index));
    for (int k = 0; k < n.num_outputs(); ++k) outputs.push_back(n.shape(k));
    CompileNode named = MakeFusedKernelNode(*n.kernel, name, inputs, outputs);
    named.operands = std::move(n.operands);
    named.kernel = std::move(n.kernel);
    n = std::move(named);
  }
  return std::make_pair(name, *std::move(bytes));
}

PassPipeline MakePipeline(const CompileOptions& options) {
  PassPipeline pipeline;
  if (!options.fault_op.empty()) pipeline.AddPass<FaultInjection>(options.fault_op);
  if (options.cse) pipeline.AddPass<CommonSubexpressionElimination>();
  if (options.fold_constants) pipeline.AddPass<ConstantFolding>(options.max_fold_elements);
  pipeline.AddPass<DeadCodeElimination>();
  if (options.opt_level >= 1) {
    pipeline.AddPass<ForeachExpansion>();
    pipeline.AddPass<Decomposition>();
    // Decompositions of one input share their first steps (softmax and
    // log-softmax of the same logits): merged, fusion computes them once.
    if (options.cse) pipeline.AddPass<CommonSubexpressionElimination>();
    pipeline.AddPass<ElementwiseFusion>();
  }
  return pipeline;
}

}  // namespace

std::vector<std::string> PassNames(const CompileOptions& options) {
  return MakePipeline(options).PassNames();
}

namespace {

// `fingerprint`: what the NEFF says compiled it, the caller's options' even
// when the kernels did not build and this is the tier-0 fallback (which the
// provider keeps out of persistent caches), or a size-generic graph compiled at
// tier 0 whatever was asked.
absl::StatusOr<CompileResult> CompileRead(const RequestGraph& read, const CompileOptions& given,
                                          const Target& target,
                                          const proto::CompilerFingerprint& fingerprint) {
  CompileOptions options = given;
  // A size-generic graph's program serves every size with its hash: only the
  // passes that decide nothing from sizes run (CSE merges equal computations,
  // constant folding reads only constants, whose sizes are fixed, dead code
  // elimination reads the wiring), and every op is an ATen call that takes
  // its sizes from its operands and its SymInt parameters when it runs.
  // Fusion, decomposition and tier-1 kernels build sizes into code.
  if (read.graph.size_generic) options.opt_level = 0;
  CompileGraph g = CompileGraph::FromCanonical(read.graph);
  absl::StatusOr<bool> changed = MakePipeline(options).Run(g);
  if (!changed.ok()) return changed.status();
  CompileResult result;
  std::pair<std::string, std::string> library;
  if (options.opt_level >= 1) {
    absl::StatusOr<std::pair<std::string, std::string>> built =
        BuildKernels(g, target, &result.kernel_sources);
    if (!built.ok()) {
      CompileOptions tier0 = options;
      tier0.opt_level = 0;
      absl::StatusOr<CompileResult> fallback = CompileRead(read, tier0, target, fingerprint);
      if (fallback.ok()) {
        fallback->kernel_sources = std::move(result.kernel_sources);
        fallback->tier1_error = std::string(built.status().message());
      }
      return fallback;
    }
    library = *std::move(built);
  }
  // On an arena, as the request (lazy/executable_cache.cc): thousands of small
  // messages, freed at once.
  google::protobuf::Arena arena;
  proto::NeffPayload& payload = *google::protobuf::Arena::CreateMessage<proto::NeffPayload>(&arena);
  absl::Status lowered =
      LowerToProgram(g, /*views_in_place=*/options.opt_level >= 1, library.first, &payload);
  if (!lowered.ok()) return lowered;
  payload.mutable_program()->set_size_generic(read.graph.size_generic);
  *payload.mutable_fingerprint() = fingerprint;
  payload.set_graph_hash(GraphHashBytes(read.graph.hash));
  if (!library.first.empty()) {
    proto::NativeObject* object = payload.add_native_objects();
    object->set_name(std::move(library.first));
    object->set_code(std::move(library.second));
  }
  absl::StatusOr<std::string> neff = neff::WriteNeff(payload);
  if (!neff.ok()) return neff.status();
  result.neff = *std::move(neff);
  result.optimized_text = g.ToText();
  return result;
}

}  // namespace

absl::StatusOr<CompileResult> Compile(const proto::CompileRequest& request, const CompileOptions& options,
                                      const Target& target) {
  absl::StatusOr<std::unique_ptr<RequestGraph>> read = ReadCompileRequest(request);
  if (!read.ok()) return read.status();
  return CompileRead(**read, options, target, FingerprintFor(options, target).fingerprint);
}

}  // namespace torch_neuron::compiler
