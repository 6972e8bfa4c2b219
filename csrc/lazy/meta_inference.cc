#include "lazy/meta_inference.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <absl/container/flat_hash_map.h>
#include <absl/synchronization/mutex.h>

#include <memory>
#include <utility>
#include <vector>

#include "lazy/fused_optimizers.h"
#include "lazy/neuron_meta.h"
#include "lazy/structured_meta.h"
#include "lazy/tensor_impl.h"

namespace torch_neuron::lazy {
namespace {

// A cached result is shared, not copied: copying its shape, layout and count
// vectors cost several allocations per traced op. nullptr: no Meta result.
class MetaCache {
 public:
  std::shared_ptr<const MetaResult> Get(ir::hash_t key, bool* found) {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    *found = it != cache_.end();
    return *found ? it->second : nullptr;
  }
  void Put(ir::hash_t key, std::shared_ptr<const MetaResult> result) {
    absl::MutexLock lock(&mu_);
    if (cache_.size() > 100000) cache_.clear();  // bound memory for pathological programs
    cache_[key] = std::move(result);
  }
  void Clear() {
    absl::MutexLock lock(&mu_);
    cache_.clear();
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<ir::hash_t, std::shared_ptr<const MetaResult>> cache_ ABSL_GUARDED_BY(mu_);
};

MetaCache& Metas() {
  static auto* cache = new MetaCache();
  return *cache;
}

// The layouts of a Meta kernel's returns, in order; false if one is not a
// meta tensor (or list of them).
bool CollectLayouts(const torch::jit::Stack& returns, std::vector<TensorLayout>* layouts) {
  for (const c10::IValue& v : returns) {
    if (v.isTensor()) {
      layouts->push_back(v.toTensor().defined() ? TensorLayout::Of(v.toTensor()) : TensorLayout{});
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) layouts->push_back(TensorLayout::Of(t));
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

void ClearMetaCache() { Metas().Clear(); }

std::shared_ptr<const MetaResult> InferMeta(const c10::OperatorHandle& op, ir::hash_t key,
                                            const std::optional<c10::OperatorHandle>& view_of,
                                            MetaFixup fixup,
                                            const std::function<torch::jit::Stack()>& build_stack) {
  bool found = false;
  std::shared_ptr<const MetaResult> cached = Metas().Get(key, &found);
  if (found) return cached;
  std::optional<MetaResult> result;
  torch::jit::Stack meta_stack = build_stack();
  if (std::optional<MetaResult> fused = FusedStepMeta(op, meta_stack)) {
    // A fused optimizer step's functional form has its own rule (fused_optimizers.h).
    auto shared = std::make_shared<const MetaResult>(*std::move(fused));
    Metas().Put(key, shared);
    return shared;
  }
  std::optional<std::vector<TensorLayout>> view_layouts;
  if (view_of) {
    // The view's own Meta kernel first: where it refuses the input (view() of
    // a transposed tensor), the user's view op fails here as on the CPU,
    // although the *_copy form would accept it.
    torch::jit::Stack view_args = meta_stack;
    try {
      RunNeuronMeta(*view_of, &view_args);
      std::vector<TensorLayout> layouts;
      if (CollectLayouts(view_args, &layouts)) view_layouts = std::move(layouts);
    } catch (const c10::NotImplementedError&) {
      // No Meta kernel for the view: the copy's layouts stand.
    }
  }
  try {
    torch::jit::Stack args;
    if (fixup != nullptr) args = meta_stack;
    const c10::DispatchKeySet meta_keys(c10::DispatchKey::Meta);
    if (const c10::KernelFunction* kernel = StructuredMetaKernel(op)) {
      kernel->callBoxed(op, meta_keys, &meta_stack);
    } else {
      RunNeuronMeta(op, &meta_stack);
    }
    MetaResult r;
    bool ok = true;
    for (const c10::IValue& v : meta_stack) {
      if (v.isTensor() && !v.toTensor().defined()) {
        // A backward op's output it was asked not to compute (output_mask):
        // an Undefined shape, returned as an undefined tensor.
        r.shapes.emplace_back(c10::ScalarType::Undefined, std::vector<int64_t>{});
        r.layouts.emplace_back();
        r.counts.push_back(-1);
      } else if (v.isTensor()) {
        const at::Tensor& t = v.toTensor();
        // A sparse result (a sparse gradient) is refused by the CPU fallback,
        // at the call, rather than traced into a graph that cannot hold it.
        ok &= t.is_meta() && t.layout() == c10::kStrided;
        r.shapes.emplace_back(t.scalar_type(), t.sizes().vec());
        r.layouts.push_back(TensorLayout::Of(t));
        r.counts.push_back(-1);
      } else if (v.isTensorList()) {
        std::vector<at::Tensor> list = v.toTensorVector();
        for (const at::Tensor& t : list) {
          ok &= t.is_meta() && t.layout() == c10::kStrided;
          r.shapes.emplace_back(t.scalar_type(), t.sizes().vec());
          r.layouts.push_back(TensorLayout::Of(t));
        }
        r.counts.push_back(static_cast<int>(list.size()));
      } else {
        ok = false;
      }
    }
    if (ok && fixup != nullptr) {
      const std::vector<ir::Shape> before = r.shapes;
      fixup(op.schema(), args, &r);
      // A corrected shape gets the contiguous layout of its new sizes.
      for (size_t i = 0; i < r.shapes.size(); ++i) {
        if (!(r.shapes[i] == before[i])) r.layouts[i] = TensorLayout{};
      }
    }
    if (ok) result = std::move(r);
  } catch (const std::exception&) {
    // No Meta kernel, a data-dependent one (Python meta registrations raise
    // NotImplementedError) or inputs the op refuses: the CPU fallback decides.
    result = std::nullopt;
  }
  if (result && view_layouts && view_layouts->size() == result->layouts.size()) {
    result->layouts = std::move(*view_layouts);
  }
  std::shared_ptr<const MetaResult> shared =
      result ? std::make_shared<const MetaResult>(*std::move(result)) : nullptr;
  Metas().Put(key, shared);
  return shared;
}

}  // namespace torch_neuron::lazy
