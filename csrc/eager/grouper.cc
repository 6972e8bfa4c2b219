#include "eager/grouper.h"

#include "absl/numeric/int128.h"

namespace torch_neuron::eager {
namespace {

// A 64-bit finalizer (splitmix64's): every input bit reaches every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t FoldKey(ir::hash_t op_key) {
  return Mix(absl::Uint128Low64(op_key) ^ Mix(absl::Uint128High64(op_key)));
}

uint64_t ExtendPrefix(uint64_t prefix, uint64_t folded_key) {
  return Mix(prefix * 0x9e3779b97f4a7c15ULL + folded_key + 1);
}

}  // namespace

bool Grouper::Add(ir::hash_t op_key) {
  if (ended_) {
    prefix_ = 0;
    size_ = 0;
    ended_ = false;
  }
  const uint64_t key = FoldKey(op_key);
  prefix_ = ExtendPrefix(prefix_, key);
  ++size_;
  const uint64_t pair = Mix(previous_ * 0xff51afd7ed558ccdULL ^ key);
  previous_ = key;
  ended_ = size_ >= options_.max_ops || (size_ >= options_.min_ops && (pair & options_.mask) == 0);
  return ended_;
}

void Grouper::Reset() {
  previous_ = 0;
  prefix_ = 0;
  size_ = 0;
  ended_ = false;
}

}  // namespace torch_neuron::eager
