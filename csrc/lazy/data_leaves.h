// DataLeaves: the one IR leaf that stands for each device buffer.
//
// Every tensor holding a buffer must read it as one graph parameter: two leaves
// for one buffer would make a graph bind it twice, and an in-place update
// through one would not be seen through the other. So the lazy layer keeps, per
// DeviceData, the leaf it made for it, here rather than on the DeviceData
// (runtime/ knows nothing of the IR).
//
// An entry holds its leaf weakly: the leaf owns the buffer, not the other way
// round. While the leaf lives, so does its DeviceData, whose address therefore
// names no other buffer; once it died the entry is stale and the next LeafFor
// at that address makes a new leaf. Stale entries are dropped all at once when
// the table has doubled since the last sweep (amortized constant per LeafFor).
// Thread-safe.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "ir/node.h"
#include "runtime/device_data.h"

namespace torch_neuron::lazy {

class DataLeaves {
 public:
  static DataLeaves& Global();

  // The live leaf of `data`, or a new device-data leaf of `shape` for it,
  // recorded as its leaf (`size_from_data`: see LazyTensor::size_from_data).
  ir::NodePtr LeafFor(const runtime::DeviceDataPtr& data, const ir::Shape& shape,
                      bool size_from_data = false);

  // Entries whose leaf is alive (sweeps first); for tests.
  size_t size();
  // Entries held, stale ones included (no sweep); for tests.
  size_t entries();

 private:
  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  absl::flat_hash_map<const runtime::DeviceData*, std::weak_ptr<const ir::Node>> leaves_ ABSL_GUARDED_BY(mu_);
  size_t sweep_at_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torch_neuron::lazy
