#include "lazy/data_leaves.h"

#include <algorithm>

#include "lazy/lazy_tensor.h"

namespace torch_neuron::lazy {
namespace {

// A table below this size is never swept.
constexpr size_t kMinSweepSize = 1024;

}  // namespace

DataLeaves& DataLeaves::Global() {
  static DataLeaves* table = new DataLeaves();  // outlives exit-time syncs
  return *table;
}

void DataLeaves::SweepLocked() {
  // Erasing an entry releases a weak reference only: no node is destroyed here.
  absl::erase_if(leaves_, [](const auto& entry) { return entry.second.expired(); });
  sweep_at_ = std::max(kMinSweepSize, leaves_.size() * 2);
}

ir::NodePtr DataLeaves::LeafFor(const runtime::DeviceDataPtr& data, const ir::Shape& shape,
                                bool size_from_data) {
  absl::MutexLock lock(&mu_);
  std::weak_ptr<const ir::Node>& slot = leaves_[data.get()];
  // The live leaf even if it does not say its sizes came from data: one leaf
  // per buffer comes first (a graph would bind the buffer twice).
  if (ir::NodePtr leaf = slot.lock()) return leaf;
  ir::NodePtr leaf = ir::Node::MakeDeviceData(shape, std::make_shared<DeviceDataLeaf>(data, size_from_data));
  slot = leaf;
  if (leaves_.size() >= std::max(kMinSweepSize, sweep_at_)) SweepLocked();
  return leaf;
}

size_t DataLeaves::entries() {
  absl::MutexLock lock(&mu_);
  return leaves_.size();
}

size_t DataLeaves::size() {
  absl::MutexLock lock(&mu_);
  SweepLocked();
  return leaves_.size();
}

}  // namespace torch_neuron::lazy
