#include "compiler/host/native_build.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/metrics.h"
#include "base/owned_file.h"
#include "ir/hash.h"
#include "base/profiler.h"

namespace torch_neuron::compiler {
namespace {

namespace fs = std::filesystem;

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command; its exit status and combined output.
std::pair<int, std::string> Run(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "could not start a shell"};
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string FirstLines(const std::string& text, int count) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (static_cast<int>(lines.size()) > count) lines.resize(count);
  return absl::StrJoin(lines, "\n");
}

// The toolchain of C++ compiler `cxx`, with its version probed.
Toolchain* Probe(const std::string& cxx) {
  auto* t = new Toolchain();
  t->compiler = cxx.empty() ? "c++" : cxx;
  // -O3 -march=native: vectorized loops for this machine's ISA; no FMA
  // contraction, so a fused kernel rounds each op like the CPU's own kernels;
  // no errno, so math calls may be vectorized. No trapping math: kernels never
  // read the FP exception flags, and without it GCC will not if-convert a
  // select over a division (tanh's (1 - e) / (1 + e) or the Taylor branch)
  // where the target has no masked stores: on AVX2 (Zen 3) the bias + tanh row
  // kernel stayed scalar, 13.7 ms against 2.7 ms vectorized on one thread.
  // Results do not change: rounding, NaN and signed zeros are as before.
  t->flags = {"-O3",
              "-march=native",
              "-fPIC",
              "-fno-math-errno",
              "-fno-trapping-math",
              "-ffp-contract=off",
              "-fno-semantic-interposition"};
  auto [status, output] = Run(Quote(t->compiler) + " --version");
  if (status == 0) t->version = FirstLines(output, 1);
  // GCC does not take a local __restrict__ pointer at its word, so a flat
  // kernel's direct loop is versioned on runtime alias checks, one per pair
  // of an output and another pointer: 15 for AdamW's 4 inputs and 3 outputs,
  // past GCC's default limit of 10, and the loop stayed scalar.
  if (status == 0 && t->version.find("clang") == std::string::npos) {
    t->flags.push_back("--param=vect-max-version-for-alias-checks=64");
  }
  return t;
}

}  // namespace

const Toolchain& Toolchain::For(const std::string& cxx) {
  static absl::Mutex mu(absl::kConstInit);  // lock order: a leaf, after FingerprintFor's
  static auto* probed = new std::map<std::string, const Toolchain*>();
  absl::MutexLock lock(&mu);
  const Toolchain*& t = (*probed)[cxx];
  if (t == nullptr) t = Probe(cxx);
  return *t;
}

std::string Toolchain::Describe() const {
  return absl::StrCat(compiler, " (", version.empty() ? "not found" : version, ") ",
                      absl::StrJoin(flags, " "));
}

KernelObjectCache::KernelObjectCache(std::string dir, size_t max_memory_entries, int64_t max_disk_bytes)
    : dir_(std::move(dir)), max_memory_entries_(max_memory_entries), max_disk_bytes_(max_disk_bytes) {
  if (!dir_.empty()) {
    std::error_code ignored;
    fs::create_directories(dir_, ignored);
  }
}

std::string KernelObjectCache::Key(const std::string& source, const Toolchain& toolchain) {
  return ir::HashToHex(ir::Hash(absl::StrCat(toolchain.Describe(), "\n", source)));
}

std::optional<std::string> KernelObjectCache::Find(const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    auto it = memory_.find(key);
    if (it != memory_.end()) return it->second;
  }
  if (dir_.empty()) return std::nullopt;
  const fs::path path = fs::path(dir_) / (key + ".o");
  // An object another user could have written is linked into nothing here
  // (base/owned_file.h): it is built again and written over.
  absl::StatusOr<std::string> read = ReadOwnedFile(path.string());
  if (read.status().code() == absl::StatusCode::kPermissionDenied)
    metrics::Increment("cache.untrusted.count");
  if (!read.ok() || read->empty()) return std::nullopt;
  std::string object = *std::move(read);
  std::error_code ignored;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ignored);  // recently used
  absl::MutexLock lock(&mu_);
  if (memory_.size() < max_memory_entries_) memory_[key] = object;
  return object;
}

void KernelObjectCache::Put(const std::string& key, const std::string& object) {
  {
    absl::MutexLock lock(&mu_);
    if (max_memory_entries_ > 0) {
      if (memory_.size() >= max_memory_entries_) memory_.erase(memory_.begin());
      memory_[key] = object;
    }
  }
  if (dir_.empty()) return;
  // Written under a unique name, then renamed: a reader sees all of it or nothing.
  const fs::path final_path = fs::path(dir_) / (key + ".o");
  const fs::path tmp =
      fs::path(dir_) / absl::StrCat(".", key, ".", ::getpid(), ".",
                                    std::hash<std::thread::id>()(std::this_thread::get_id()), ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(object.data(), static_cast<std::streamsize>(object.size()));
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return;
    }
  }
  std::error_code error;
  // 0644 whatever the umask: Find refuses an object its group may write.
  fs::permissions(
      tmp, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read,
      error);
  fs::rename(tmp, final_path, error);
  if (error) {
    fs::remove(tmp, error);
    return;
  }
  absl::MutexLock lock(&mu_);
  if (disk_bytes_ >= 0) disk_bytes_ += static_cast<int64_t>(object.size());
  if (disk_bytes_ < 0 || disk_bytes_ > max_disk_bytes_) Prune();
}

void KernelObjectCache::Prune() {
  struct Entry {
    fs::file_time_type time;
    int64_t bytes;
    fs::path path;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().extension() != ".o") continue;
    std::error_code e;
    const int64_t bytes = static_cast<int64_t>(fs::file_size(it->path(), e));
    const fs::file_time_type time = fs::last_write_time(it->path(), e);
    if (e) continue;
    entries.push_back({time, bytes, it->path()});
    total += bytes;
  }
  if (total > max_disk_bytes_) {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.time < b.time; });
    for (const Entry& e : entries) {
      if (total <= max_disk_bytes_ / 4 * 3) break;
      std::error_code ignored;
      if (fs::remove(e.path, ignored)) {
        total -= e.bytes;
        memory_.erase(e.path.stem().string());
      }
    }
  }
  disk_bytes_ = total;
}

void KernelObjectCache::Drop(const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    memory_.erase(key);
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    fs::remove(fs::path(dir_) / (key + ".o"), ignored);
  }
}

absl::StatusOr<std::string> BuildSharedObject(const std::vector<std::pair<std::string, std::string>>& kernels,
                                              const Toolchain& toolchain, KernelObjectCache* objects) {
  static metrics::Counter* const builds = metrics::GetCounter("compile.kernel.build.count");
  static metrics::Counter* const reuses = metrics::GetCounter("compile.kernel.reuse.count");
  profiler::Scope scope("compile",
                        [&] { return absl::StrCat("kernel build (", kernels.size(), " kernels)"); });
  if (toolchain.version.empty()) {
    return absl::UnavailableError(
        absl::StrCat("the C++ compiler '", toolchain.compiler, "' does not run (set CXX to one that does)"));
  }
  std::string pattern = (fs::temp_directory_path() / "torch_neuron_build_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError("cannot create a temporary build directory");
  }
  const fs::path dir(pattern);
  struct Unit {
    std::string name;
    fs::path source, object;
    int status = 0;
    std::string output;
    std::string key;      // in `objects`
    bool reused = false;  // its object came from `objects`
  };
  std::vector<Unit> units;
  for (const auto& [name, source] : kernels) {
    Unit u{name, dir / (name + ".cc"), dir / (name + ".o")};
    if (objects != nullptr) {
      u.key = KernelObjectCache::Key(source, toolchain);
      if (std::optional<std::string> object = objects->Find(u.key)) {
        std::ofstream(u.object, std::ios::binary)
            .write(object->data(), static_cast<std::streamsize>(object->size()));
        u.reused = true;
      }
    }
    if (!u.reused) std::ofstream(u.source) << source;
    units.push_back(std::move(u));
  }
  std::vector<size_t> to_build;
  for (size_t i = 0; i < units.size(); ++i) {
    if (!units[i].reused) to_build.push_back(i);
  }
  const std::string flags = absl::StrJoin(toolchain.flags, " ");
  // One compiler process per core at a time.
  const size_t jobs = std::max(1u, std::thread::hardware_concurrency());
  for (size_t start = 0; start < to_build.size(); start += jobs) {
    std::vector<std::thread> threads;
    for (size_t j = start; j < std::min(to_build.size(), start + jobs); ++j) {
      threads.emplace_back([&, i = to_build[j]] {
        Unit& u = units[i];
        std::tie(u.status, u.output) =
            Run(absl::StrCat(Quote(toolchain.compiler), " ", flags, " -c ", Quote(u.source.string()), " -o ",
                             Quote(u.object.string())));
      });
    }
    for (std::thread& t : threads) t.join();
  }
  absl::Status error;
  for (const Unit& u : units) {
    if (u.status != 0 && error.ok()) {
      error = absl::FailedPreconditionError(absl::StrCat(
          "compiling kernel ", u.name, " failed (", toolchain.compiler, "):\n", FirstLines(u.output, 5)));
    }
  }
  std::string bytes;
  if (error.ok()) {
    std::vector<std::string> object_files;
    for (const Unit& u : units) object_files.push_back(Quote(u.object.string()));
    const fs::path library = dir / "kernels.so";
    auto [status, output] =
        Run(absl::StrCat(Quote(toolchain.compiler), " ", flags, " -shared ", absl::StrJoin(object_files, " "),
                         " -o ", Quote(library.string())));
    const bool any_reused = std::any_of(units.begin(), units.end(), [](const Unit& u) { return u.reused; });
    if (status != 0 && any_reused) {
      // A stored object the linker refuses (truncated, from another build):
      // forget the reused ones and build everything from source.
      for (const Unit& u : units) {
        if (u.reused) objects->Drop(u.key);
      }
      std::error_code ignored;
      fs::remove_all(dir, ignored);
      return BuildSharedObject(kernels, toolchain, objects);
    }
    if (status != 0) {
      error = absl::FailedPreconditionError(
          absl::StrCat("linking the kernels failed (", toolchain.compiler, "):\n", FirstLines(output, 5)));
    } else {
      std::ifstream in(library, std::ios::binary);
      std::ostringstream content;
      content << in.rdbuf();
      bytes = content.str();
      for (const Unit& u : units) {
        if (u.reused) {
          reuses->Add(1);
          continue;
        }
        builds->Add(1);
        if (objects == nullptr) continue;
        std::ifstream object_in(u.object, std::ios::binary);
        std::ostringstream object;
        object << object_in.rdbuf();
        if (!object.str().empty()) objects->Put(u.key, object.str());
      }
    }
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  if (!error.ok()) return error;
  return bytes;
}

}  // namespace torch_neuron::compiler
