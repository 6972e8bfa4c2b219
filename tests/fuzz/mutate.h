// Random mutations of a seed input for the bounded fuzz runs in ctest (byte
// flips, truncation, insertion, splicing in a piece of the seed).
#pragma once

#include <cstddef>
#include <random>
#include <string>

namespace torch_neuron::fuzz {

inline size_t Pick(std::mt19937_64& rng, size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); }

// One mutation of `input`, splicing from `seed`.
inline void MutateOnce(std::string& input, const std::string& seed, std::mt19937_64& rng) {
  switch (Pick(rng, 4)) {
    case 0:  // flip bits
      if (!input.empty()) input[Pick(rng, input.size())] ^= static_cast<char>(1 + Pick(rng, 255));
      break;
    case 1:  // truncate
      input.resize(Pick(rng, input.size() + 1));
      break;
    case 2:  // insert random bytes
      input.insert(Pick(rng, input.size() + 1), std::string(1 + Pick(rng, 8), static_cast<char>(rng())));
      break;
    case 3:  // splice a piece of the seed elsewhere
      if (!input.empty()) {
        const size_t from = Pick(rng, seed.size()), len = Pick(rng, seed.size() - from + 1);
        input.replace(Pick(rng, input.size()), len, seed.substr(from, len));
      }
      break;
  }
}

}  // namespace torch_neuron::fuzz
