// Bindings of the compile cache and the NEFF reader (python -m torch_neuron.cache).
#include <pybind11/stl.h>

#include "base/config.h"
#include "cache/disk_cache.h"
#include "cache/entry_signature.h"
#include "cache/remote_provider.h"
#include "compiler/compiler.h"
#include "compiler/fingerprint.h"
#include "ir/hash.h"
#include "lazy/executable_cache.h"
#include "neff/neff_reader.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_neuron::python {
namespace {

py::dict Inspect(const std::string& bytes) {
  absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(bytes, nullptr);
  RaiseIfError(loaded.status());
  const proto::NeffPayload& p = loaded->payload;
  py::dict d;
  d["fingerprint"] = compiler::FingerprintText(p.fingerprint());
  d["current_fingerprint"] =
      p.fingerprint().SerializeAsString() == lazy::CurrentFingerprint().SerializeAsString();
  d["instructions"] = loaded->program->instructions.size();
  d["nodes"] = loaded->program->num_nodes;
  d["inputs"] = p.signature().inputs_size();
  d["outputs"] = p.signature().outputs_size();
  d["source_lines"] = p.source_map_size();
  d["native_objects"] = loaded->program->native_objects.size();
  return d;
}

}  // namespace

void BindCache(py::module_& m) {
  m.def("_cache_default_dir", [] { return cache::DefaultCacheDir(); });
  m.def("_current_fingerprint", [] { return compiler::FingerprintText(lazy::CurrentFingerprint()); });
  // Entries of the cache at `dir`, oldest first: (key, path, bytes, mtime).
  m.def("_cache_list", [](const std::string& dir) {
    std::vector<std::tuple<std::string, std::string, int64_t, int64_t>> out;
    for (const cache::DiskEntry& e : cache::DiskCache(dir, 0, true).List()) {
      out.emplace_back(e.key, e.path, e.bytes, e.mtime_seconds);
    }
    return out;
  });
  // Validates one NEFF as the runtime would: ("ok", ""), ("other", why) for
  // an intact entry of another compiler fingerprint or format version (a
  // shared cache holds other settings' entries: they are not this process's to
  // judge beyond their checksum), or ("bad", why).
  m.def("_neff_check", [](const py::bytes& data) {
    absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(std::string(data), &lazy::CurrentFingerprint());
    if (loaded.ok()) return std::make_pair(std::string("ok"), std::string());
    const bool other = loaded.status().code() == absl::StatusCode::kFailedPrecondition;
    return std::make_pair(std::string(other ? "other" : "bad"), std::string(loaded.status().message()));
  });
  m.def("_neff_inspect", [](const py::bytes& data) { return Inspect(std::string(data)); });
  m.def("_cache_prune", [](const std::string& dir, int64_t max_bytes) {
    RaiseIfError(cache::DiskCache(dir, max_bytes, false).Prune());
  });
  m.def("_cache_clear",
        [](const std::string& dir) { RaiseIfError(cache::DiskCache(dir, 0, false).Clear()); });
  // The remote level: its executables' keys, and a verification of each (a
  // corrupt entry, and with a fleet key one it did not sign, is deleted):
  // (valid, of other compiler settings, [bad keys]).
  m.def("_remote_keys", [](const std::string& url) {
    absl::StatusOr<cache::RedisAddress> address = cache::ParseRedisUrl(url);
    RaiseIfError(address.status());
    cache::RedisConnection redis(*address);
    absl::StatusOr<std::vector<std::string>> keys = redis.Keys(cache::kRemoteKeyPrefix);
    RaiseIfError(keys.status());
    return *keys;
  });
  m.def("_remote_verify", [](const std::string& url) {
    absl::StatusOr<cache::RedisAddress> address = cache::ParseRedisUrl(url);
    RaiseIfError(address.status());
    cache::RedisConnection redis(*address);
    absl::StatusOr<std::vector<std::string>> keys = redis.Keys(cache::kRemoteKeyPrefix);
    RaiseIfError(keys.status());
    int valid = 0, others = 0;
    std::vector<std::string> bad;
    for (const std::string& key : *keys) {
      absl::StatusOr<std::string> bytes = redis.Get(key);
      if (bytes.status().code() == absl::StatusCode::kNotFound) continue;
      RaiseIfError(bytes.status());
      const std::string& fleet_key = GlobalConfig().cache.remote_cache_key;
      absl::StatusOr<std::string_view> payload =
          fleet_key.empty() ? absl::StatusOr<std::string_view>(cache::UncheckedPayload(*bytes))
                            : cache::OpenEntry(fleet_key, key, *bytes);
      absl::StatusOr<neff::LoadedNeff> loaded = payload.ok()
                                                    ? neff::ReadNeff(*payload, nullptr)
                                                    : absl::StatusOr<neff::LoadedNeff>(payload.status());
      if (!loaded.ok()) {
        bad.push_back(key);
        RaiseIfError(redis.Delete(key));
      } else if (loaded->payload.fingerprint().SerializeAsString() !=
                 lazy::CurrentFingerprint().SerializeAsString()) {
        ++others;
      } else {
        ++valid;
      }
    }
    return py::make_tuple(valid, others, bad);
  });
}

}  // namespace torch_neuron::python
