// The compiler fingerprint: everything that changes the executable a graph
// compiles to (project and torch versions, the target's ISA and, at tier 1, its
// toolchain, tier, every option). It is part of the cache key and is stored
// in, and checked against, every NEFF.
#pragma once

#include "compiler/compiler.h"
#include "compiler/target.h"
#include "ir/hash.h"
#include "proto/neff.pb.h"

namespace torch_neuron::compiler {

proto::CompilerFingerprint MakeFingerprint(const CompileOptions& options, const Target& target);

// Canonical text of a fingerprint (logs, `python -m torch_neuron.cache info`).
std::string FingerprintText(const proto::CompilerFingerprint& fingerprint);

// XXH3-128 of a fingerprint's serialized form (computed once by callers that
// key many graphs with one fingerprint).
ir::hash_t HashFingerprint(const proto::CompilerFingerprint& fingerprint);

// A fingerprint with its hash.
struct KeyedFingerprint {
  proto::CompilerFingerprint fingerprint;
  ir::hash_t hash = 0;
};

// The fingerprint of `options` for `target`, built (and hashed) once per
// distinct options and target description (tier 1's includes the codegen id
// and the target's toolchain, probed once).
const KeyedFingerprint& FingerprintFor(const CompileOptions& options, const Target& target);

// FingerprintFor the default options at `opt_level`, for the host target with
// the default toolchain (tests, tools).
const proto::CompilerFingerprint& FingerprintFor(int opt_level);

// The cache key of a graph: XXH3-128 over its canonical hash and the fingerprint's hash.
ir::hash_t CacheKey(ir::hash_t graph_hash, ir::hash_t fingerprint_hash);
inline ir::hash_t CacheKey(ir::hash_t graph_hash, const proto::CompilerFingerprint& fingerprint) {
  return CacheKey(graph_hash, HashFingerprint(fingerprint));
}

}  // namespace torch_neuron::compiler
