// The provider chain of a process, assembled from the cache sub-config:
// memory, then disk (unless TORCH_NEURON_CACHE=0), then the compile service
// (unless TORCH_NEURON_COMPILE_SERVICE=off), which reads and writes Redis
// (TORCH_NEURON_REMOTE_CACHE) for its clients, then the compiler here. Without
// a service, or when it cannot answer, Redis is asked from this process. With
// no service below the disk, the disk's key lock is held across the compile, so
// one process compiles a graph and the others load its NEFF.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "base/config.h"
#include "cache/compile_provider.h"
#include "cache/disk_cache.h"
#include "cache/executable_provider.h"

namespace torch_neuron::cache {

// Makes the compile service's level of the chain, given the remote level it
// stands in front of (nullptr: no remote cache). service/ sits above cache/,
// so whoever assembles the chain passes it in (service::MakeServiceLevel).
using ServiceLevel =
    std::function<std::unique_ptr<ExecutableProvider>(std::unique_ptr<ExecutableProvider> remote)>;

// An assembled chain and the parts of it that are asked for by name.
struct AssembledChain {
  std::unique_ptr<DiskCache> disk;  // under the disk level (nullptr: none); outlives the chain
  std::unique_ptr<ProviderChain> chain;
  MemoryProvider* memory = nullptr;  // the chain's first provider
};

// The chain `config` describes; `service` makes its service level when
// config.compile_service is not "off". `observers` see every compile here.
// An invalid remote URL is warned about once and leaves the remote level out.
std::unique_ptr<AssembledChain> AssembleChain(const CacheConfig& config, const ServiceLevel& service,
                                              std::vector<CompileObserver> observers);

}  // namespace torch_neuron::cache
