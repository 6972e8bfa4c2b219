#include "runtime/device_assert.h"

#include <ATen/ops/_assert_async.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ne.h>

namespace torch_neuron::runtime {

at::Tensor AssertAsync(const at::Tensor& self, std::optional<c10::string_view> msg) {
  if (msg) {
    at::_assert_async(self, *msg);
  } else {
    at::_assert_async(self);
  }
  return at::ne(self, 0);
}

at::Tensor AssertAsyncMeta(const at::Tensor& self, std::optional<c10::string_view>) {
  return at::empty(self.sizes(), self.options().dtype(at::kBool));
}

}  // namespace torch_neuron::runtime
