#include "runtime/collectives.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <array>
#include <string>
#include <vector>

namespace torch_neuron::runtime {
namespace {

// The gloo backend that carries the collectives of `group`. It is registered
// by the Python backend for the queue threads alone: collectives on CPU tensors
// go over another one, so the two streams never interleave on one channel.
c10::intrusive_ptr<c10d::Backend> HostBackend(c10::string_view group) {
  return c10d::resolve_process_group(std::string(group))->getBackend(c10::DeviceType::CPU);
}

struct Reduction {
  c10d::ReduceOp op = c10d::ReduceOp::SUM;
  bool average = false;
};

Reduction ParseReduction(c10::string_view name) {
  static const std::array<std::pair<std::string_view, c10d::ReduceOp::RedOpType>, 7> kOps = {{
      {"sum", c10d::ReduceOp::SUM},
      {"product", c10d::ReduceOp::PRODUCT},
      {"min", c10d::ReduceOp::MIN},
      {"max", c10d::ReduceOp::MAX},
      {"band", c10d::ReduceOp::BAND},
      {"bor", c10d::ReduceOp::BOR},
      {"bxor", c10d::ReduceOp::BXOR},
  }};
  const std::string_view n(name.data(), name.size());
  if (n == "avg") return Reduction{c10d::ReduceOp::SUM, true};
  for (const auto& [text, op] : kOps) {
    if (n == text) return Reduction{op, false};
  }
  TORCH_CHECK(false, "unknown reduce op '", n, "' (sum, avg, product, min, max, band, bor, bxor)");
}

// Waits for a collective. Gloo reports a dead or hung peer with its own
// exception types; they become c10::Errors, which the executor reports with
// the op and the graph that ran it (a std::exception would lose both).
void Wait(const c10::intrusive_ptr<c10d::Work>& work) {
  try {
    work->wait();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    TORCH_CHECK(false,
                "the collective failed (a peer process died, or did not take part before "
                "the process group's timeout): ",
                e.what());
  }
}

// A fresh contiguous copy: the ops are functional, and gloo writes in place.
at::Tensor Buffer(const at::Tensor& self) { return self.clone(at::MemoryFormat::Contiguous); }

void Reduce(const at::Tensor& buffer, const Reduction& r, const c10::intrusive_ptr<c10d::Backend>& backend) {
  std::vector<at::Tensor> tensors{buffer};
  c10d::AllreduceOptions opts;
  opts.reduceOp = r.op;
  Wait(backend->allreduce(tensors, opts));
  if (r.average) {
    TORCH_CHECK(at::isFloatingType(buffer.scalar_type()) || at::isComplexType(buffer.scalar_type()),
                "ReduceOp.AVG needs a floating-point tensor, got ", buffer.scalar_type());
    buffer.div_(backend->getSize());
  }
}

}  // namespace

at::Tensor AllReduce(const at::Tensor& self, c10::string_view reduce_op, c10::string_view group) {
  at::Tensor buffer = Buffer(self);
  Reduce(buffer, ParseReduction(reduce_op), HostBackend(group));
  return buffer;
}

at::Tensor Broadcast(const at::Tensor& self, int64_t src, c10::string_view group) {
  std::vector<at::Tensor> tensors{Buffer(self)};
  c10d::BroadcastOptions opts;
  opts.rootRank = src;
  Wait(HostBackend(group)->broadcast(tensors, opts));
  return tensors[0];
}

namespace {

std::vector<int64_t> GatheredSizes(const at::Tensor& self, int64_t world_size) {
  TORCH_CHECK(self.dim() >= 1, "all_gather_into_tensor takes a tensor of at least one dimension");
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[0] *= world_size;
  return sizes;
}

}  // namespace

at::Tensor AllGatherIntoTensor(const at::Tensor& self, int64_t world_size, c10::string_view group) {
  c10::intrusive_ptr<c10d::Backend> backend = HostBackend(group);
  TORCH_CHECK(backend->getSize() == world_size, "all_gather_into_tensor traced for ", world_size,
              " ranks ran on a group of ", backend->getSize());
  at::Tensor out = at::empty(GatheredSizes(self, world_size), self.options());
  std::vector<std::vector<at::Tensor>> outputs{out.chunk(world_size)};
  std::vector<at::Tensor> inputs{self.contiguous()};
  Wait(backend->allgather(outputs, inputs));
  return out;
}

namespace {

std::vector<int64_t> ScatteredSizes(const at::Tensor& self, int64_t world_size) {
  TORCH_CHECK(self.dim() >= 1 && self.size(0) % world_size == 0,
              "reduce_scatter_tensor takes a "
              "tensor whose first dimension divides by the group's size ",
              world_size, ", got ", self.sizes());
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[0] /= world_size;
  return sizes;
}

}  // namespace

// An all-reduce of which each rank keeps its own slice: gloo's reduce-scatter
// is not in every build, and the result is the same.
at::Tensor ReduceScatterTensor(const at::Tensor& self, c10::string_view reduce_op, int64_t world_size,
                               c10::string_view group) {
  c10::intrusive_ptr<c10d::Backend> backend = HostBackend(group);
  const int64_t chunk = ScatteredSizes(self, world_size)[0];
  at::Tensor buffer = Buffer(self);
  Reduce(buffer, ParseReduction(reduce_op), backend);
  return buffer.narrow(0, backend->getRank() * chunk, chunk).clone();
}

namespace {

std::vector<int64_t> AllToAllSizes(const at::Tensor& self, c10::IntArrayRef output_split_sizes) {
  TORCH_CHECK(self.dim() >= 1, "all_to_all_single takes a tensor of at least one dimension");
  std::vector<int64_t> sizes = self.sizes().vec();
  if (!output_split_sizes.empty()) {
    sizes[0] = 0;
    for (int64_t s : output_split_sizes) sizes[0] += s;
  }
  return sizes;
}

}  // namespace

at::Tensor AllToAllSingle(const at::Tensor& self, c10::IntArrayRef output_split_sizes,
                          c10::IntArrayRef input_split_sizes, c10::string_view group) {
  at::Tensor out = at::empty(AllToAllSizes(self, output_split_sizes), self.options());
  at::Tensor in = self.contiguous();
  std::vector<int64_t> out_splits = output_split_sizes.vec();
  std::vector<int64_t> in_splits = input_split_sizes.vec();
  Wait(HostBackend(group)->alltoall_base(out, in, out_splits, in_splits));
  return out;
}

at::Tensor Send(const at::Tensor& self, int64_t dst, int64_t tag, c10::string_view group) {
  std::vector<at::Tensor> tensors{self.contiguous()};
  Wait(HostBackend(group)->send(tensors, static_cast<int>(dst), static_cast<int>(tag)));
  return at::empty({0}, self.options());
}

at::Tensor Recv(const at::Tensor& self, int64_t src, int64_t tag, c10::string_view group) {
  std::vector<at::Tensor> tensors{at::empty(self.sizes(), self.options())};
  Wait(HostBackend(group)->recv(tensors, static_cast<int>(src), static_cast<int>(tag)));
  return tensors[0];
}

namespace {

at::Tensor LikeMeta(const at::Tensor& self) { return at::empty(self.sizes(), self.options()); }

}  // namespace

at::Tensor AllReduceMeta(const at::Tensor& self, c10::string_view, c10::string_view) {
  return LikeMeta(self);
}
at::Tensor BroadcastMeta(const at::Tensor& self, int64_t, c10::string_view) { return LikeMeta(self); }
at::Tensor AllGatherIntoTensorMeta(const at::Tensor& self, int64_t world_size, c10::string_view) {
  return at::empty(GatheredSizes(self, world_size), self.options());
}
at::Tensor ReduceScatterTensorMeta(const at::Tensor& self, c10::string_view, int64_t world_size,
                                   c10::string_view) {
  return at::empty(ScatteredSizes(self, world_size), self.options());
}
at::Tensor AllToAllSingleMeta(const at::Tensor& self, c10::IntArrayRef output_split_sizes, c10::IntArrayRef,
                              c10::string_view) {
  return at::empty(AllToAllSizes(self, output_split_sizes), self.options());
}
at::Tensor SendMeta(const at::Tensor& self, int64_t, int64_t, c10::string_view) {
  return at::empty({0}, self.options());
}
at::Tensor RecvMeta(const at::Tensor& self, int64_t, int64_t, c10::string_view) { return LikeMeta(self); }

}  // namespace torch_neuron::runtime
