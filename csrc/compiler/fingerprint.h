// The compiler fingerprint: everything that changes the executable a graph
// compiles to (project and torch versions, target, tier, every option). It is
// part of the cache key and is stored in, and checked against, every NEFF.
#pragma once

#include "compiler/compiler.h"
#include "ir/hash.h"
#include "proto/neff.pb.h"

namespace torch_neuron::compiler {

proto::CompilerFingerprint MakeFingerprint(const CompileOptions& options);

// Canonical text of a fingerprint (logs, `python -m torch_neuron.cache info`).
std::string FingerprintText(const proto::CompilerFingerprint& fingerprint);

// The fingerprint of the default compile options at `opt_level`, built once
// per level (tier 1's includes the codegen id and the host toolchain, probed
// once).
const proto::CompilerFingerprint& FingerprintFor(int opt_level);

// XXH3-128 of a fingerprint's serialized form (computed once by callers that
// key many graphs with one fingerprint).
ir::hash_t HashFingerprint(const proto::CompilerFingerprint& fingerprint);

// The cache key of a graph: XXH3-128 over its canonical hash and the fingerprint's hash.
ir::hash_t CacheKey(ir::hash_t graph_hash, ir::hash_t fingerprint_hash);
inline ir::hash_t CacheKey(ir::hash_t graph_hash, const proto::CompilerFingerprint& fingerprint) {
  return CacheKey(graph_hash, HashFingerprint(fingerprint));
}

}  // namespace torch_neuron::compiler
