#include "lazy/lazy_tensor.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lazy/data_leaves.h"
#include "lazy/ran_values.h"
#include "runtime/fork_guard.h"

namespace torch_neuron::lazy {
namespace {

// Every live lazy tensor, in the order they were made (ids grow): a sorted
// array rather than a tree, so that making and dropping a tensor allocates
// nothing here (a std::map node each before). A
// dropped tensor leaves an empty slot behind, swept once they outnumber the
// live ones.
class LiveRegistry {
 public:
  void Add(int64_t id, const LazyTensorPtr& t) {
    absl::MutexLock lock(&mu_);
    // Nearly always the last: a tensor of another thread may have been added
    // between this one's id and now.
    auto pos = live_.end();
    while (pos != live_.begin() && std::prev(pos)->id > id) --pos;
    live_.insert(pos, Entry{id, t});
    ++count_;
  }
  void Remove(int64_t id) {
    absl::MutexLock lock(&mu_);
    auto it = std::lower_bound(live_.begin(), live_.end(), id,
                               [](const Entry& e, int64_t value) { return e.id < value; });
    if (it == live_.end() || it->id != id || it->removed) return;
    it->removed = true;
    it->tensor.reset();
    --count_;
    if (live_.size() >= 64 && live_.size() - count_ > count_) {
      live_.erase(std::remove_if(live_.begin(), live_.end(), [](const Entry& e) { return e.removed; }),
                  live_.end());
    }
  }
  // Both release the references they took after unlocking: the last one to
  // go would destroy its tensor, which unregisters itself (taking mu_).
  std::vector<LazyTensorPtr> Pending(int device) {
    std::vector<LazyTensorPtr> out;
    std::vector<LazyTensorPtr> others;
    {
      absl::MutexLock lock(&mu_);
      for (const Entry& e : live_) {
        LazyTensorPtr t = e.tensor.lock();
        if (t == nullptr) continue;
        (t->device() == device && t->is_pending() ? out : others).push_back(std::move(t));
      }
    }
    return out;
  }
  std::vector<const runtime::DeviceData*> Buffers(int device) {
    std::vector<const runtime::DeviceData*> out;
    std::vector<LazyTensorPtr> held;
    {
      absl::MutexLock lock(&mu_);
      for (const Entry& e : live_) {
        LazyTensorPtr t = e.tensor.lock();
        if (t == nullptr) continue;
        if (t->device() == device && t->data() != nullptr) out.push_back(t->data().get());
        held.push_back(std::move(t));
      }
    }
    return out;
  }
  int64_t Count() {
    absl::MutexLock lock(&mu_);
    return count_;
  }

 private:
  struct Entry {
    int64_t id;
    std::weak_ptr<LazyTensor> tensor;
    bool removed = false;
  };
  absl::Mutex mu_;
  std::vector<Entry> live_ ABSL_GUARDED_BY(mu_);  // sorted by id
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;        // entries not removed
};

LiveRegistry& Registry() {
  static auto* registry = new LiveRegistry();
  return *registry;
}

std::atomic<int64_t> next_id{1};

}  // namespace

LazyTensor::LazyTensor(Token, int device, ir::Shape shape)
    : id_(next_id.fetch_add(1)), device_(device), shape_(std::move(shape)) {}

LazyTensor::~LazyTensor() {
  // A forked child may have inherited the registry's lock held by another of
  // the parent's threads; it never traces, so it leaves the registry alone
  // (tensors dropped at its exit must not wait for that lock).
  if (runtime::InBadFork()) return;
  Registry().Remove(id_);
  // A node that ran may die with this tensor (its pending value, or its
  // buffer the only one left of what the node ran into): the table lets go.
  pending_ = ir::Value();
  data_leaf_ = ir::Value();
  data_ = nullptr;
  RanValues::Global().Sweep();
}

LazyTensorPtr LazyTensor::FromValue(ir::Value value, int device) {
  LazyTensorPtr t = std::make_shared<LazyTensor>(Token{}, device, value.shape());
  t->pending_ = std::move(value);
  Registry().Add(t->id_, t);
  return t;
}

LazyTensorPtr LazyTensor::FromData(runtime::DeviceDataPtr data) {
  LazyTensorPtr t =
      std::make_shared<LazyTensor>(Token{}, data->device(), ir::Shape(data->dtype(), data->sizes()));
  t->data_ = std::move(data);
  Registry().Add(t->id_, t);
  return t;
}

void LazyTensor::set_view_base(const std::shared_ptr<LazyTensor>& base) {
  view_base_ = base;
  lost_write_ = base->lost_write_;
}

void LazyTensor::RecordWriteIntoView(const std::string& op) {
  for (std::shared_ptr<LazyTensor> base = view_base_.lock(); base != nullptr;
       base = base->view_base_.lock()) {
    if (base->lost_write_.empty()) base->lost_write_ = op;
  }
}

void LazyTensor::CheckNoLostWrite() const {
  TORCH_CHECK(lost_write_.empty(), "this neuron tensor misses a write: ", lost_write_,
              " wrote into a view of it below functionalization (inside a composite or custom "
              "op's kernel, such as a torch.library.custom_op), where views are copies on a lazy "
              "device; write through the tensor itself or return the view instead");
}

ir::Value LazyTensor::GetValue() {
  if (pending_) return pending_;
  if (!data_leaf_) {
    // One leaf per buffer, shared by every tensor holding it.
    data_leaf_ = ir::Value{DataLeaves::Global().LeafFor(data_, shape_, size_from_data_), 0};
  }
  return data_leaf_;
}

namespace {
std::atomic<bool> sizes_from_data_seen{false};
}  // namespace

bool SizesFromDataSeen() { return sizes_from_data_seen.load(std::memory_order_relaxed); }

void LazyTensor::MarkSizeFromData() {
  if (size_from_data_) return;
  size_from_data_ = true;
  sizes_from_data_seen.store(true, std::memory_order_relaxed);
}

void LazyTensor::SetData(runtime::DeviceDataPtr data) {
  shape_ = ir::Shape(data->dtype(), data->sizes());
  data_ = std::move(data);
  data_leaf_ = ir::Value();
  pending_ = ir::Value();
}

void LazyTensor::SetPending(ir::Value value) {
  shape_ = value.shape();
  pending_ = std::move(value);
  data_ = nullptr;
  data_leaf_ = ir::Value();
}

std::vector<LazyTensorPtr> PendingTensors(int device) { return Registry().Pending(device); }

std::vector<const runtime::DeviceData*> LiveBuffers(int device) { return Registry().Buffers(device); }

namespace {

struct PendingDraws {
  absl::Mutex mu;
  std::map<int, std::vector<ir::NodePtr>> by_device ABSL_GUARDED_BY(mu);
};

PendingDraws& Draws() {
  static auto* draws = new PendingDraws();
  return *draws;
}

}  // namespace

void AddPendingDraw(int device, ir::NodePtr node) {
  absl::MutexLock lock(&Draws().mu);
  Draws().by_device[device].push_back(std::move(node));
}

std::vector<ir::NodePtr> TakePendingDraws(int device) {
  absl::MutexLock lock(&Draws().mu);
  std::vector<ir::NodePtr> out;
  out.swap(Draws().by_device[device]);
  return out;
}

bool HasPendingDraws(int device) {
  absl::MutexLock lock(&Draws().mu);
  auto it = Draws().by_device.find(device);
  return it != Draws().by_device.end() && !it->second.empty();
}

int64_t LiveTensorCount() { return Registry().Count(); }

}  // namespace torch_neuron::lazy
