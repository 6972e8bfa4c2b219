// The shape registry's recorder (DESIGN.md "Shape registry"): a TraceObserver
// that keeps every distinct op signature the device was asked to run (operator
// and overload, each argument's dtype and shape or value) with how many times
// it ran, under the tag of the model or script that ran it. Signatures are
// de-duplicated in memory; torch_neuron/registry/ writes them into SQLite.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "lazy/trace_observer.h"

namespace torch_neuron::registry {

// The record format's version, written into every registry file.
inline constexpr int kFormatVersion = 1;

// One signature and its count.
struct Record {
  std::string tag;              // the model or script that ran it
  std::string op;               // "aten::add.Tensor"
  std::string args;             // EncodeArguments' JSON
  std::string fallback_reason;  // non-empty: the op ran through the CPU fallback
  int64_t count = 0;
};

// Appends the JSON array describing `args` (the arguments of `schema`, in its
// order) to `out`. One element per argument:
//   null                                  None, or an undefined tensor
//   true / false, 3, 0.5, "Infinity", "str" bool, int, float, string arguments
//   [1, 2]                                int, float and bool lists
//   {"tensor": "float32", "shape": [2, 3]}  a tensor; "strides" when it is not
//                                         contiguous, "cpu": true and "value" for a
//                                         CPU scalar tensor (a wrapped Python number)
//   {"tensors": [...]}                    a tensor list (elements as above)
//   {"dtype": "bfloat16"}, {"layout": "strided"}, {"memory_format": "..."},
//   {"device": "neuron"}, {"generator": true}, {"complex": [re, im]},
//   {"unsupported": "<kind>"}            an argument the registry cannot describe
void EncodeArguments(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args, std::string* out);

// The recording observer. Thread-safe.
class ShapeRecorder final : public lazy::TraceObserver {
 public:
  void OnTracedOp(const lazy::TracedOp& op) override;

  // The tag recorded with the signatures that follow.
  void SetTag(std::string tag);
  std::string tag() const;

  // The signatures recorded since the last Take(), which forgets them.
  std::vector<Record> Take();
  // Distinct (tag, signature) entries held now.
  size_t size() const;

 private:
  struct Entry {
    int64_t count = 0;
  };
  mutable absl::Mutex mu_;
  std::string tag_ ABSL_GUARDED_BY(mu_);
  // Key: tag '\0' op '\0' args '\0' fallback reason.
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// The process's recorder: installed as a trace observer by Start(), removed by
// Stop() (its records stay until taken). Start() twice is one recorder.
ShapeRecorder& GlobalRecorder();
void StartRecording();
void StopRecording();
bool IsRecording();

}  // namespace torch_neuron::registry
