#include "base/config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace torch_neuron {
namespace {

absl::Status Invalid(const std::string& name, const std::string& value, const std::string& expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, "='", value, "' is not valid: expected ", expected, "."));
}

absl::StatusOr<int64_t> ParseInt(const std::string& name, const std::string& value, int64_t lo, int64_t hi) {
  int64_t parsed = 0;
  std::string expected = absl::StrCat("an integer from ", lo, " to ", hi);
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &parsed)) {
    return Invalid(name, value, expected);
  }
  if (parsed < lo || parsed > hi) return Invalid(name, value, expected);
  return parsed;
}

absl::StatusOr<bool> ParseBool(const std::string& name, const std::string& value) {
  std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  return Invalid(name, value, "one of 0, 1, true, false, on, off");
}

Config& MutableGlobal() {
  static Config config;
  return config;
}

}  // namespace

absl::StatusOr<Config> ConfigFromEnvironment(const std::function<std::string(const std::string&)>& lookup) {
  return ApplyEnvironment(Config(), lookup);
}

absl::StatusOr<Config> ApplyEnvironment(Config c,
                                        const std::function<std::string(const std::string&)>& lookup) {
  if (std::string v = lookup("TORCH_NEURON_MODE"); !v.empty()) {
    std::string m = absl::AsciiStrToLower(absl::StripAsciiWhitespace(v));
    if (m == "lazy") {
      c.mode = ExecutionMode::kLazy;
    } else if (m == "eager") {
      c.mode = ExecutionMode::kEager;
    } else {
      return Invalid("TORCH_NEURON_MODE", v, "'lazy' or 'eager'");
    }
  }
  if (std::string v = lookup("TORCH_NEURON_NUM_DEVICES"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(int64_t n, ParseInt("TORCH_NEURON_NUM_DEVICES", v, 1, kMaxDevices));
    c.devices.num_devices = static_cast<int>(n);
  }
  if (std::string v = lookup("TORCH_NEURON_MEMORY_LIMIT_MB"); !v.empty()) {
    // 0 means unlimited; the upper bound (1 PiB) only guards against overflow.
    TN_ASSIGN_OR_RETURN(int64_t mb, ParseInt("TORCH_NEURON_MEMORY_LIMIT_MB", v, 0, int64_t{1} << 30));
    c.devices.memory_limit_bytes = mb << 20;
  }
  if (std::string v = lookup("TORCH_NEURON_FALLBACK"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.trace.allow_cpu_fallback, ParseBool("TORCH_NEURON_FALLBACK", v));
  }
  if (std::string v = lookup("TORCH_NEURON_CACHE_DIR"); !v.empty()) c.cache.dir = v;
  if (std::string v = lookup("TORCH_NEURON_CACHE_MAX_MB"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.cache.max_mb, ParseInt("TORCH_NEURON_CACHE_MAX_MB", v, 1, int64_t{1} << 30));
  }
  if (std::string v = lookup("TORCH_NEURON_CACHE_MEMORY_ENTRIES"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.cache.memory_entries,
                        ParseInt("TORCH_NEURON_CACHE_MEMORY_ENTRIES", v, 1, int64_t{1} << 24));
  }
  if (std::string v = lookup("TORCH_NEURON_CACHE_MEMORY_MB"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.cache.memory_mb, ParseInt("TORCH_NEURON_CACHE_MEMORY_MB", v, 1, int64_t{1} << 30));
  }
  if (std::string v = lookup("TORCH_NEURON_CACHE"); !v.empty()) {
    std::string m = absl::AsciiStrToLower(absl::StripAsciiWhitespace(v));
    if (m == "readonly" || m == "read-only" || m == "ro") {
      c.cache.read_only = true;
    } else {
      absl::StatusOr<bool> enabled = ParseBool("TORCH_NEURON_CACHE", v);
      if (!enabled.ok()) return Invalid("TORCH_NEURON_CACHE", v, "one of 0, 1, readonly");
      c.cache.enabled = *enabled;
    }
  }
  if (std::string v = lookup("TORCH_NEURON_COMPILE_SERVICE"); !v.empty()) {
    std::string m = absl::AsciiStrToLower(absl::StripAsciiWhitespace(v));
    if (m == "off" || m == "0" || m == "false" || m == "no") {
      c.cache.compile_service = "off";
    } else if (m == "auto" || m == "1" || m == "on") {
      c.cache.compile_service = "auto";
    } else if (absl::StartsWith(v, "/")) {
      c.cache.compile_service = v;
    } else {
      return Invalid("TORCH_NEURON_COMPILE_SERVICE", v,
                     "'off', 'auto' or the absolute path of a service's socket");
    }
  }
  if (std::string v = lookup("TORCH_NEURON_REMOTE_CACHE"); !v.empty()) {
    const bool redis = absl::StartsWith(v, "redis://") && v.size() > std::string_view("redis://").size();
    const bool rediss = absl::StartsWith(v, "rediss://") && v.size() > std::string_view("rediss://").size();
    if (!redis && !rediss) {
      // Shown without what precedes an '@': it may be a password.
      const size_t at = v.rfind('@');
      return Invalid("TORCH_NEURON_REMOTE_CACHE", at == std::string::npos ? v : "...@" + v.substr(at + 1),
                     "a redis[s]://[[user]:password@]host[:port][/db] URL");
    }
    c.cache.remote_cache = v;
  }
  {
    const std::string key = lookup("TORCH_NEURON_REMOTE_CACHE_KEY");
    const std::string key_file = lookup("TORCH_NEURON_REMOTE_CACHE_KEY_FILE");
    if (!key.empty() && !key_file.empty()) {
      return absl::InvalidArgumentError(
          "set one of TORCH_NEURON_REMOTE_CACHE_KEY and TORCH_NEURON_REMOTE_CACHE_KEY_FILE, not both");
    }
    c.cache.remote_cache_key = key;
    if (!key_file.empty()) {
      std::ifstream in(key_file, std::ios::binary);
      if (!in.is_open()) {
        return absl::InvalidArgumentError(
            absl::StrCat("TORCH_NEURON_REMOTE_CACHE_KEY_FILE: cannot read ", key_file));
      }
      std::stringstream text;
      text << in.rdbuf();
      c.cache.remote_cache_key = std::string(absl::StripTrailingAsciiWhitespace(text.str()));
      if (c.cache.remote_cache_key.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("TORCH_NEURON_REMOTE_CACHE_KEY_FILE: ", key_file, " holds no key"));
      }
    }
  }
  for (auto [name, slot] : {std::pair{"TORCH_NEURON_SERVICE_IDLE_S", &c.cache.service_idle_s},
                            std::pair{"TORCH_NEURON_SERVICE_TIMEOUT_S", &c.cache.service_timeout_s}}) {
    if (std::string v = lookup(name); !v.empty()) {
      double seconds = 0;
      if (!absl::SimpleAtod(v, &seconds) || !(seconds > 0) || seconds > 1e7) {
        return Invalid(name, v, "a number of seconds greater than 0");
      }
      *slot = seconds;
    }
  }
  if (std::string v = lookup("TORCH_NEURON_IR_DEBUG"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.trace.ir_debug, ParseBool("TORCH_NEURON_IR_DEBUG", v));
  }
  if (std::string v = lookup("TORCH_NEURON_DEBUG"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.compile.debug, ParseBool("TORCH_NEURON_DEBUG", v));
  }
  if (std::string v = lookup("TORCH_NEURON_DEBUG_DIR"); !v.empty()) c.compile.debug_dir = v;
  // The conventional variable of build tools, not a TORCH_NEURON_ one: the host
  // toolchain that builds tier-1 kernels.
  if (std::string v = lookup("CXX"); !v.empty()) c.compile.cxx = v;
  if (std::string v = lookup("TORCH_NEURON_TEST_FAULT_OP"); !v.empty()) c.compile.test_fault_op = v;
  if (std::string v = lookup("TORCH_NEURON_REGISTRY_TAG"); !v.empty()) c.registry_tag = v;
  if (std::string v = lookup("TORCH_NEURON_SHAPE_REGISTRY"); !v.empty()) {
    c.shape_registry = v;
  }
  if (std::string v = lookup("TORCH_NEURON_OPT_LEVEL"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(int64_t level, ParseInt("TORCH_NEURON_OPT_LEVEL", v, 0, 1));
    c.compile.opt_level = static_cast<int>(level);
  }
  if (std::string v = lookup("TORCH_NEURON_AUTOGRAD_THREAD"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.autograd_thread, ParseBool("TORCH_NEURON_AUTOGRAD_THREAD", v));
  }
  if (std::string v = lookup("TORCH_NEURON_STEP_ON_OPTIMIZER"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.step_on_optimizer, ParseBool("TORCH_NEURON_STEP_ON_OPTIMIZER", v));
  }
  if (std::string v = lookup("TORCH_NEURON_COMPILE_FALLBACK"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.compile_fallback, ParseBool("TORCH_NEURON_COMPILE_FALLBACK", v));
  }
  if (std::string v = lookup("TORCH_NEURON_DYNAMIC_SHAPES"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.trace.dynamic_shapes, ParseBool("TORCH_NEURON_DYNAMIC_SHAPES", v));
  }
  if (std::string v = lookup("TORCH_NEURON_EAGER_GROUPS"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.run.eager_groups, ParseBool("TORCH_NEURON_EAGER_GROUPS", v));
  }
  if (std::string v = lookup("TORCH_NEURON_TIERED_COMPILE"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.compile.tiered, ParseBool("TORCH_NEURON_TIERED_COMPILE", v));
  }
  if (std::string v = lookup("TORCH_NEURON_LAUNCH_BLOCKING"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(c.run.launch_blocking, ParseBool("TORCH_NEURON_LAUNCH_BLOCKING", v));
  }
  if (std::string v = lookup("TORCH_NEURON_KERNEL_THREADS"); !v.empty()) {
    TN_ASSIGN_OR_RETURN(int64_t threads, ParseInt("TORCH_NEURON_KERNEL_THREADS", v, 0, 256));
    c.run.kernel_threads = static_cast<int>(threads);
  }
  return c;
}

absl::StatusOr<Config> ConfigFromMap(const std::map<std::string, std::string>& env) {
  return ConfigFromEnvironment([&env](const std::string& name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  });
}

absl::Status InitGlobalConfig() {
  TN_ASSIGN_OR_RETURN(Config c, ConfigFromEnvironment([](const std::string& name) {
                        const char* v = std::getenv(name.c_str());
                        return v == nullptr ? std::string() : std::string(v);
                      }));
  MutableGlobal() = std::move(c);
  return absl::OkStatus();
}

const Config& GlobalConfig() { return MutableGlobal(); }

ScopedConfigOverride::ScopedConfigOverride(Config config) : saved_(MutableGlobal()) {
  MutableGlobal() = std::move(config);
}

ScopedConfigOverride::~ScopedConfigOverride() { MutableGlobal() = std::move(saved_); }

const char* ExecutionModeName(ExecutionMode mode) { return mode == ExecutionMode::kLazy ? "lazy" : "eager"; }

}  // namespace torch_neuron
