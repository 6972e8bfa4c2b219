#include "lazy/compile_report.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/config.h"
#include "c10/util/Exception.h"
#include "compiler/compile_request.h"
#include "ir/printer.h"
#include "lazy/execution_mode.h"

namespace torch_neuron::lazy {
namespace {

// What the recompile report compares between two graphs from one place.
struct GraphSignature {
  ir::hash_t hash = 0;
  std::vector<std::string> parameters;  // shape text per parameter
  std::vector<std::string> ops;         // op and shape per node
  // The same without sizes: two graphs equal in these differ only in sizes.
  std::vector<std::string> parameter_kinds;  // kind and dtype per parameter
  std::vector<std::string> op_names;         // op and dtype per node
};

GraphSignature SignatureOf(const ir::CanonicalGraph& g) {
  GraphSignature s;
  s.hash = g.hash;
  for (int32_t p : g.parameters) {
    const ir::Node& n = *g.nodes[p];
    s.parameters.push_back(absl::StrCat(ir::NodeKindName(n.kind()), " ", n.shape().ToString()));
    s.parameter_kinds.push_back(
        absl::StrCat(ir::NodeKindName(n.kind()), " ", ir::DtypeShortName(n.shape().dtype())));
  }
  for (const ir::Node* n : g.nodes) {
    if (n->is_parameter()) continue;
    s.ops.push_back(absl::StrCat(n->op(), " ", n->shape().ToString()));
    s.op_names.push_back(absl::StrCat(n->op(), " ", ir::DtypeShortName(n->shape().dtype())));
  }
  return s;
}

// Items of `a` missing from `b`, as a multiset, in a's order.
std::vector<std::string> Missing(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::map<std::string, int> count;
  for (const std::string& x : b) ++count[x];
  std::vector<std::string> out;
  for (const std::string& x : a) {
    if (count[x] > 0) {
      --count[x];
    } else {
      out.push_back(x);
    }
  }
  return out;
}

std::string Listed(const std::vector<std::string>& items) {
  constexpr size_t kMax = 4;
  std::vector<std::string> shown(items.begin(), items.begin() + std::min(items.size(), kMax));
  std::string text = absl::StrJoin(shown, ", ");
  if (items.size() > kMax) absl::StrAppend(&text, " and ", items.size() - kMax, " more");
  return text;
}

// Names what differs between two graphs compiled at one place: the inputs whose
// dtype or shape changed, else the ops that came or went.
std::string DescribeChange(const GraphSignature& before, const GraphSignature& after) {
  std::vector<std::string> changes;
  std::vector<std::string> gone = Missing(before.parameters, after.parameters);
  std::vector<std::string> came = Missing(after.parameters, before.parameters);
  if (!gone.empty() && gone.size() == came.size()) {
    for (size_t i = 0; i < gone.size() && i < 4; ++i) {
      changes.push_back(absl::StrCat("input changed from ", gone[i], " to ", came[i]));
    }
  } else if (!gone.empty() || !came.empty()) {
    if (!gone.empty()) changes.push_back(absl::StrCat("inputs no longer taken: ", Listed(gone)));
    if (!came.empty()) changes.push_back(absl::StrCat("new inputs: ", Listed(came)));
  }
  if (changes.empty()) {
    std::vector<std::string> ops_gone = Missing(before.ops, after.ops);
    std::vector<std::string> ops_came = Missing(after.ops, before.ops);
    if (!ops_gone.empty()) changes.push_back(absl::StrCat("ops gone: ", Listed(ops_gone)));
    if (!ops_came.empty()) changes.push_back(absl::StrCat("new ops: ", Listed(ops_came)));
  }
  if (changes.empty()) changes.push_back("only attribute values or the wiring differ");
  // The same ops on inputs of the same kinds, only sizes differ: a loop whose
  // tensors grow or change length compiles once per size. Name the fixes.
  // (As multisets: the canonical order follows hashes, which cover sizes.)
  auto same = [](const std::vector<std::string>& a, const std::vector<std::string>& b) {
    return a.size() == b.size() && Missing(a, b).empty();
  };
  const bool sizes_differ = !same(before.parameters, after.parameters) || !same(before.ops, after.ops);
  if (sizes_differ && same(before.parameter_kinds, after.parameter_kinds) &&
      same(before.op_names, after.op_names)) {
    changes.push_back(
        "only sizes differ, so every new size compiles a new graph: keep the sizes fixed (for generate(), "
        "cache_implementation=\"static\"; elsewhere, pad to a few lengths), set "
        "TORCH_NEURON_DYNAMIC_SHAPES=1 "
        "(one tier-0 graph for every size) or compile the code with torch.compile(backend=\"neuron\", "
        "dynamic=True)");
  }
  return absl::StrJoin(changes, "; ");
}

class RecompileLog {
 public:
  // Records a compiled graph from `place`; returns the reason it differs from the
  // previous graph of that place ("" for the first graph there).
  std::string Record(const std::string& place, GraphSignature signature) {
    absl::MutexLock lock(&mu_);
    std::string reason;
    auto it = last_.find(place);
    if (it != last_.end() && it->second.hash != signature.hash) {
      reason = DescribeChange(it->second, signature);
    }
    last_[place] = std::move(signature);
    last_reason_ = reason;
    return reason;
  }
  std::string LastReason() const {
    absl::MutexLock lock(&mu_);
    return last_reason_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, GraphSignature> last_ ABSL_GUARDED_BY(mu_);
  std::string last_reason_ ABSL_GUARDED_BY(mu_);
};

RecompileLog& Log() {
  static auto* log = new RecompileLog();
  return *log;
}

void DumpGraph(const std::string& dir, const ir::CanonicalGraph& g, const std::string& optimized,
               const std::string& kernel_sources) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = absl::StrCat(dir, "/graph-", ir::HashToHex(g.hash), ".txt");
  std::ofstream out(path);
  out << "# torch_neuron graph " << ir::HashToHex(g.hash) << " (" << g.size() << " nodes)\n"
      << ir::ToText(g) << "# after the compiler's passes\n"
      << optimized;
  if (!kernel_sources.empty()) {
    std::ofstream(absl::StrCat(dir, "/graph-", ir::HashToHex(g.hash), ".kernels.cc")) << kernel_sources;
  }
}

}  // namespace

// Compile events, as the user sees them. The recompile report and the dumps
// read the graph back from the request (the live IR may be gone: a background
// compile outlives its sync).
void ObserveCompile(const cache::CompileEvent& event) {
  const compiler::CompileResult& result = event.result;
  if (!result.tier1_error.empty()) {
    // Tier 0 runs every graph tier 1 fuses: the graph runs, slower; say so once.
    TORCH_WARN_ONCE(
        "torch_neuron: tier-1 kernels did not build, running graphs at tier 0 "
        "(counted in compile.tier1_fallback.count): ",
        result.tier1_error);
  }
  // The settings in force when the graph compiles (a test's override turns
  // the report on after the chain was built): read here, on the compiling
  // thread. A compile is a top of its own: it may run on the tier-1 pool long
  // after the sync that asked, so no caller's sub-config reaches it.
  const CompileConfig& config = GlobalConfig().compile;
  const bool report = config.debug && !event.request.background;
  if (!report && config.debug_dir.empty()) return;
  absl::StatusOr<std::unique_ptr<compiler::RequestGraph>> read =
      compiler::ReadCompileRequest(*event.request.compile);
  if (!read.ok()) return;  // it compiled, so it reads: never here
  const ir::CanonicalGraph& g = (*read)->graph;
  if (report) {
    std::string place = CurrentSourceLocation();
    if (place.empty()) place = "<unknown>";
    std::string reason = Log().Record(place, SignatureOf(g));
    if (!reason.empty()) {
      std::fprintf(stderr, "torch_neuron: compiling a new graph (%lld nodes) at %s: %s\n",
                   static_cast<long long>(g.size()), place.c_str(), reason.c_str());
    }
  }
  if (!config.debug_dir.empty()) DumpGraph(config.debug_dir, g, result.optimized_text, result.kernel_sources);
}

std::string LastRecompileReason() { return Log().LastReason(); }

}  // namespace torch_neuron::lazy
