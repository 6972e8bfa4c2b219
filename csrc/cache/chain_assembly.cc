#include "cache/chain_assembly.h"

#include <string>
#include <utility>

#include "c10/util/Exception.h"
#include "cache/remote_provider.h"

namespace torch_neuron::cache {

std::unique_ptr<AssembledChain> AssembleChain(const CacheConfig& config, const ServiceLevel& service,
                                              std::vector<CompileObserver> observers) {
  auto assembled = std::make_unique<AssembledChain>();
  std::vector<std::unique_ptr<ExecutableProvider>> chain;
  auto memory = std::make_unique<MemoryProvider>(static_cast<size_t>(config.memory_entries),
                                                 static_cast<size_t>(config.memory_mb) << 20);
  assembled->memory = memory.get();
  chain.push_back(std::move(memory));
  const bool with_service = config.compile_service != "off";
  if (config.enabled) {
    const std::string dir = config.dir.empty() ? DefaultCacheDir() : config.dir;
    assembled->disk = std::make_unique<DiskCache>(dir, config.max_mb << 20, config.read_only);
    // The service coordinates processes itself: the key lock is then held
    // only around the re-check and the write.
    chain.push_back(std::make_unique<DiskProvider>(assembled->disk.get(), /*lock_until_kept=*/!with_service));
  }
  std::unique_ptr<ExecutableProvider> remote;
  if (!config.remote_cache.empty()) {
    absl::StatusOr<RedisAddress> address = ParseRedisUrl(config.remote_cache);
    if (address.ok()) {
      remote = std::make_unique<RemoteProvider>(*std::move(address), config.remote_cache_key);
    } else {
      TORCH_WARN_ONCE("torch_neuron: ", address.status().message(), "; no remote compile cache");
    }
  }
  if (with_service) {
    chain.push_back(service(std::move(remote)));
  } else if (remote != nullptr) {
    chain.push_back(std::move(remote));
  }
  auto compile = std::make_unique<LocalCompileProvider>();
  for (CompileObserver& observer : observers) compile->AddObserver(std::move(observer));
  chain.push_back(std::move(compile));
  assembled->chain = std::make_unique<ProviderChain>(std::move(chain));
  return assembled;
}

}  // namespace torch_neuron::cache
