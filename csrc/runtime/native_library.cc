#include "runtime/native_library.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::runtime {
namespace {

struct Library {
  std::string bytes;
  void* handle = nullptr;  // loaded on first lookup; never unloaded (kernels may be running)
  absl::flat_hash_map<std::string, void*> symbols;
};

class Registry {
 public:
  void Register(const std::string& name, std::string bytes) {
    absl::MutexLock lock(&mu_);
    auto& slot = libraries_[name];
    if (slot == nullptr) slot = std::make_unique<Library>(Library{std::move(bytes)});
  }

  absl::StatusOr<void*> Find(const std::string& name, const std::string& symbol) {
    absl::MutexLock lock(&mu_);
    auto it = libraries_.find(name);
    if (it == libraries_.end()) {
      return absl::NotFoundError(absl::StrCat("no native library ", name, " is registered"));
    }
    Library& lib = *it->second;
    auto cached = lib.symbols.find(symbol);
    if (cached != lib.symbols.end()) return cached->second;
    if (lib.handle == nullptr) {
      absl::Status status = Load(name, lib);
      if (!status.ok()) return status;
    }
    void* fn = dlsym(lib.handle, symbol.c_str());
    if (fn == nullptr) {
      return absl::NotFoundError(absl::StrCat("native library ", name, " has no kernel ", symbol));
    }
    return lib.symbols[symbol] = fn;
  }

 private:
  // dlopen needs a file: a private temporary copy, removed once loaded.
  static absl::Status Load(const std::string& name, Library& lib) {
    std::string path = (std::filesystem::temp_directory_path() / "torch_neuron_kernels_XXXXXX").string();
    const int fd = mkstemp(path.data());
    if (fd < 0) return absl::UnavailableError("cannot create a file for a native library");
    close(fd);
    {
      std::ofstream out(path, std::ios::binary);
      out.write(lib.bytes.data(), static_cast<std::streamsize>(lib.bytes.size()));
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    const char* error = handle == nullptr ? dlerror() : nullptr;
    std::filesystem::remove(path);
    if (handle == nullptr) {
      return absl::DataLossError(absl::StrCat(
          "native library ", name, " does not load: ", error != nullptr ? error : "unknown error"));
    }
    // Kernels of another ABI would be called with the wrong arguments.
    const auto* version = static_cast<const int*>(dlsym(handle, kernel_abi::kVersionSymbol));
    if (version == nullptr || *version != kernel_abi::kVersion) {
      const std::string built_for =
          version == nullptr ? std::string("no kernel ABI") : absl::StrCat("kernel ABI ", *version);
      dlclose(handle);
      return absl::FailedPreconditionError(absl::StrCat("native library ", name, " was generated for ",
                                                        built_for, "; this runtime calls kernel ABI ",
                                                        kernel_abi::kVersion, " (recompile the program)"));
    }
    lib.handle = handle;
    return absl::OkStatus();
  }

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Library>> libraries_ ABSL_GUARDED_BY(mu_);
};

Registry& Libraries() {
  static auto* registry = new Registry();
  return *registry;
}

}  // namespace

void RegisterNativeLibrary(const std::string& name, std::string bytes) {
  Libraries().Register(name, std::move(bytes));
}

void LoadNativeObjects(const std::vector<std::pair<std::string, std::string>>& objects) {
  for (const auto& [name, bytes] : objects) Libraries().Register(name, bytes);
}

absl::StatusOr<KernelFn> FindKernel(const std::string& name, const std::string& symbol) {
  absl::StatusOr<void*> fn = Libraries().Find(name, symbol);
  if (!fn.ok()) return fn.status();
  return reinterpret_cast<KernelFn>(*fn);
}

absl::StatusOr<StridedKernelFn> FindStridedKernel(const std::string& name, const std::string& symbol) {
  absl::StatusOr<void*> fn = Libraries().Find(name, absl::StrCat(symbol, kernel_abi::kStridedSuffix));
  if (!fn.ok()) return fn.status();
  return reinterpret_cast<StridedKernelFn>(*fn);
}

}  // namespace torch_neuron::runtime
