// Builds the generated kernels of one graph into a shared object with the
// system C++ compiler: each kernel is its own translation unit, compiled in
// parallel (one process per core), then linked. The toolchain (compiler path,
// version, flags) is part of the compiler fingerprint.
//
// Thread-safe: each build works in its own temporary directory.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::compiler {

struct Toolchain {
  std::string compiler;  // path or name on PATH ("c++")
  std::string version;   // first line of `compiler --version`, "" if it did not run
  std::vector<std::string> flags;

  // The host toolchain of C++ compiler `cxx` ("" for "c++"; the config reads
  // CXX once), probed (its --version) once per compiler.
  static const Toolchain& For(const std::string& cxx);
  // Canonical text for the fingerprint.
  std::string Describe() const;
};

// Compiled kernel objects by content: the object file a toolchain made of a
// kernel's source, kept in memory and, given a directory, on disk (one file per
// object, written atomically), so that graphs generating the same kernel build
// it once (in one process, or in all the processes sharing the directory). It
// speeds builds and never changes what they make. The directory is bounded:
// when a write takes it over `max_disk_bytes`, the least recently used objects
// go (a hit refreshes an object's time). Thread-safe.
class KernelObjectCache {
 public:
  explicit KernelObjectCache(std::string dir = "", size_t max_memory_entries = 4096,
                             int64_t max_disk_bytes = int64_t{1} << 30);
  // The key of `source` built by `toolchain`.
  static std::string Key(const std::string& source, const Toolchain& toolchain);
  std::optional<std::string> Find(const std::string& key);
  void Put(const std::string& key, const std::string& object);
  // Forgets an entry (an object the linker refused).
  void Drop(const std::string& key);

 private:
  // Removes the least recently used objects until the directory holds at most
  // 3/4 of the bound.
  void Prune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const size_t max_memory_entries_;
  const int64_t max_disk_bytes_;
  absl::Mutex mu_;
  std::map<std::string, std::string> memory_ ABSL_GUARDED_BY(mu_);
  // The directory's size as this object knows it (a scan, plus its own writes):
  // -1 before the first scan.
  int64_t disk_bytes_ ABSL_GUARDED_BY(mu_) = -1;
};

// (kernel name, C++ source) pairs in, the shared object's bytes out. A failed
// compile is FAILED_PRECONDITION naming the kernel and the compiler's first
// error lines; a compiler that cannot run at all is UNAVAILABLE. With `objects`,
// kernels already built are taken from it and new ones added (counted in
// compile.kernel.reuse.count and compile.kernel.build.count).
absl::StatusOr<std::string> BuildSharedObject(const std::vector<std::pair<std::string, std::string>>& kernels,
                                              const Toolchain& toolchain,
                                              KernelObjectCache* objects = nullptr);

}  // namespace torch_neuron::compiler
