// LazyTensor: the value behind one neuron tensor. Either pending (an IR value
// that has not run yet) or materialized (a buffer in device memory). Every live
// LazyTensor is registered, so mark_step can find all pending work.
//
// Not thread-safe: tracing mutates tensors on the thread that owns them; the
// buffers they point to are thread-safe (runtime::DeviceData).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Generator.h>

#include "ir/node.h"
#include "runtime/device_data.h"

namespace torch_neuron::lazy {

// A device buffer as an IR leaf payload.
struct DeviceDataLeaf : public ir::LeafData {
  explicit DeviceDataLeaf(runtime::DeviceDataPtr d, bool from_data = false)
      : data(std::move(d)), size_from_data(from_data) {}
  runtime::DeviceDataPtr data;
  // The buffer's sizes came from data (LazyTensor::size_from_data).
  bool size_from_data;
};

// Whether `leaf` (a kDeviceData leaf) holds a buffer whose sizes came from data.
inline bool LeafSizeFromData(const ir::Node& leaf) {
  const auto* payload = static_cast<const DeviceDataLeaf*>(leaf.data().get());
  return payload != nullptr && payload->size_from_data;
}

// The buffer of a kDeviceData leaf, or nullptr for a leaf that holds none (a
// graph copied for a compile, an undefined output's placeholder).
inline const runtime::DeviceDataPtr* LeafBuffer(const ir::Node& leaf) {
  const auto* payload = static_cast<const DeviceDataLeaf*>(leaf.data().get());
  return payload == nullptr || payload->data == nullptr ? nullptr : &payload->data;
}

// A generator random ops draw from, as an IR leaf payload.
struct GeneratorLeaf : public ir::LeafData {
  explicit GeneratorLeaf(at::Generator g) : generator(std::move(g)) {}
  at::Generator generator;
};

class LazyTensor {
  struct Token {  // the constructor is for FromValue and FromData only
    explicit Token() = default;
  };

 public:
  static std::shared_ptr<LazyTensor> FromValue(ir::Value value, int device);
  static std::shared_ptr<LazyTensor> FromData(runtime::DeviceDataPtr data);
  // Public for make_shared (one allocation for the tensor and its count);
  // the Token keeps it to this class.
  LazyTensor(Token, int device, ir::Shape shape);
  ~LazyTensor();
  LazyTensor(const LazyTensor&) = delete;
  LazyTensor& operator=(const LazyTensor&) = delete;

  int64_t id() const { return id_; }
  int device() const { return device_; }
  const ir::Shape& shape() const { return shape_; }

  // True while the tensor's value is an op that has not run.
  bool is_pending() const { return static_cast<bool>(pending_); }
  const ir::Value& pending() const { return pending_; }
  const runtime::DeviceDataPtr& data() const { return data_; }

  // The value to use as an operand: the pending op, or a device-data leaf for
  // the buffer (one leaf per buffer, so `x * x` reads one parameter).
  ir::Value GetValue();

  // Materialized: the value now lives in `data`.
  void SetData(runtime::DeviceDataPtr data);
  // Replaced by a new pending value (in-place updates on the device).
  void SetPending(ir::Value value);

  // Views below functionalization (inside a composite or custom op's kernel)
  // are copies of the viewed values, not aliases: a write into one does not
  // reach the viewed tensor (its base). Code that writes into a view and reads
  // the view back is fine; a base that missed such a write is stale, views of
  // it inherit that, an out= write over a stale tensor makes it whole again,
  // and any other read of a stale tensor raises instead of computing with
  // values that miss the write. Tracing thread only.
  void set_view_base(const std::shared_ptr<LazyTensor>& base);
  // Called when `op` wrote into this tensor: marks every base up the view chain.
  void RecordWriteIntoView(const std::string& op);
  // Whether the tensor's sizes came from data: the result of an op whose
  // output shape depends on its operands' values (nonzero, masked_select,
  // unique: the CPU fallback's data-dependent ops), or of an op that read
  // such a tensor and whose shape is not that of an operand of fixed size
  // (tracer.cc). Lazy mode traces the ops that read such a tensor with their
  // SymInt arguments as parameters, and the graphs holding them size-generic
  // (graph_executor.cc), so a count that changes from step to step (a
  // mixture-of-experts router's tokens per expert) is a run-time value, not a
  // new graph (issue 49). Materializing keeps it.
  bool size_from_data() const { return size_from_data_; }
  void MarkSizeFromData();
  // For a value written in place into a tensor whose sizes did not come from
  // data (neuron_inplace.cc): its sizes are that tensor's.
  void ClearSizeFromData() { size_from_data_ = false; }

  // `op` overwrote the whole tensor (out=).
  void ClearStale() { lost_write_.clear(); }
  // Raises if a write into one of this tensor's views was lost.
  void CheckNoLostWrite() const;

 private:
  const int64_t id_;
  const int device_;
  ir::Shape shape_;
  ir::Value pending_;
  runtime::DeviceDataPtr data_;
  ir::Value data_leaf_;  // cached leaf for data_
  std::weak_ptr<LazyTensor> view_base_;
  std::string lost_write_;  // the op that wrote into a view of this tensor
  bool size_from_data_ = false;
};

// Whether any tensor was ever marked size_from_data in this process: until
// then syncs skip looking for such tensors.
bool SizesFromDataSeen();

using LazyTensorPtr = std::shared_ptr<LazyTensor>;

// Live tensors of `device` with pending values, in creation order.
std::vector<LazyTensorPtr> PendingTensors(int device);

// The buffers live materialized tensors of `device` hold (a buffer may appear
// more than once). Only for identity checks: the pointers are not owned.
std::vector<const runtime::DeviceData*> LiveBuffers(int device);

// Number of live LazyTensors (tests, leak checks).
int64_t LiveTensorCount();

// Random ops traced on `device` that have not run yet, in trace order. Each
// sync of the device runs them all, first and in this order, whether or not
// their results are used: the device generator advances as on the CPU, and a
// draw never runs twice (its node is then read through materialized leaves).
// Collectives and device asserts (runtime/device_assert.h), which nothing may
// read either, run the same way.
void AddPendingDraw(int device, ir::NodePtr node);
std::vector<ir::NodePtr> TakePendingDraws(int device);
bool HasPendingDraws(int device);

}  // namespace torch_neuron::lazy
