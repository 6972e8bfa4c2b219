// CompileRequest (DESIGN.md "Seams", 3): a canonical graph written out as a
// self-contained protobuf (proto/compile_request.proto), and read back into a
// graph that owns its nodes. What one process sends another to compile; the
// reader validates everything and recomputes the graph hash, so any bytes give
// either the graph the writer had or an error, never a crash.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/compiler.h"
#include "ir/graph.h"
#include "proto/compile_request.pb.h"

namespace torch_neuron::compiler {

inline constexpr uint32_t kCompileRequestFormat = 1;
// Requests larger than this are refused unread (a graph of a few hundred
// thousand nodes is a few tens of MB).
inline constexpr size_t kMaxCompileRequestBytes = size_t{256} << 20;

// `graph` and the options that change its program (the target and its
// toolchain are the compiling machine's, named by its fingerprint, not the
// request's).
// UNIMPLEMENTED for an attribute with no serialized form (a complex scalar).
absl::StatusOr<proto::CompileRequest> MakeCompileRequest(const ir::CanonicalGraph& graph,
                                                         const CompileOptions& options);

// MakeCompileRequest into `out` (cleared first), which may live on an arena:
// a request is thousands of small messages, freed together.
absl::Status WriteCompileRequest(const ir::CanonicalGraph& graph, const CompileOptions& options,
                                 proto::CompileRequest* out);

// A graph read from a request: the nodes it owns and the canonical graph over
// them (parameter leaves carry no data), with the request's options.
struct RequestGraph {
  std::vector<ir::NodePtr> nodes;
  ir::CanonicalGraph graph;
  CompileOptions options;
};

// What the reader does with the stored graph hash: check the nodes hash to it,
// or (fuzzing only: a mutated graph reaches the compiler) take the nodes' hash.
enum class StoredHash { kVerify, kReplace };

// INVALID_ARGUMENT for a request no writer makes (bad references, kinds,
// dtypes, shapes, versions), DATA_LOSS when the nodes do not hash to the
// stored graph hash.
absl::StatusOr<std::unique_ptr<RequestGraph>> ReadCompileRequest(const proto::CompileRequest& request,
                                                                 StoredHash stored = StoredHash::kVerify);

// Parses serialized bytes (at most kMaxCompileRequestBytes), then ReadCompileRequest.
absl::StatusOr<std::unique_ptr<RequestGraph>> ParseCompileRequest(std::string_view bytes,
                                                                  StoredHash stored = StoredHash::kVerify);

// The 16 bytes a request (and a NEFF) stores a graph hash as.
std::string GraphHashBytes(ir::hash_t hash);

}  // namespace torch_neuron::compiler
