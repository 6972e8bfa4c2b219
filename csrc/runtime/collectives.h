// Collectives as graph ops. torch.distributed's "neuron" backend
// (torch_neuron/distributed.py) traces each collective on neuron tensors as one
// of the neuron:: ops below, so a training step with its gradient all-reduces
// stays one graph. When the graph runs, the op's host kernel runs the collective
// on the host buffers behind device memory, over a gloo process group the
// backend registered in torch's group registry under the op's `group` name.
//
// Collectives have effects beyond their result (the peers wait for them), so
// the tracer runs each exactly once and in trace order, as it does random
// draws, and the compiler never folds one.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <string_view>

namespace torch_neuron::runtime {

// The neuron:: collective ops (schemas and registrations in aten/registration.cc):
//   all_reduce(Tensor self, str reduce_op, str group) -> Tensor
//   broadcast(Tensor self, int src, str group) -> Tensor
//   all_gather_into_tensor(Tensor self, int world_size, str group) -> Tensor   (dim 0 grows)
//   reduce_scatter_tensor(Tensor self, str reduce_op, int world_size, str group) -> Tensor
//   all_to_all_single(Tensor self, int[] output_split_sizes, int[] input_split_sizes,
//                     str group) -> Tensor
//   send(Tensor self, int dst, int tag, str group) -> Tensor   (an empty token)
//   recv(Tensor self, int src, int tag, str group) -> Tensor   (like self)
// reduce_op is one of sum, avg, product, min, max, band, bor, bxor; avg is a
// sum divided by the group's size (gloo has no average). ir::IsCollectiveOp
// (ir/op_traits.h) names them for the tracer and the compiler.

// Their host kernels (CPU key: the collective on the buffers behind device
// memory, when the graph runs) ...
at::Tensor AllReduce(const at::Tensor& self, c10::string_view reduce_op, c10::string_view group);
at::Tensor Broadcast(const at::Tensor& self, int64_t src, c10::string_view group);
at::Tensor AllGatherIntoTensor(const at::Tensor& self, int64_t world_size, c10::string_view group);
at::Tensor ReduceScatterTensor(const at::Tensor& self, c10::string_view reduce_op, int64_t world_size,
                               c10::string_view group);
at::Tensor AllToAllSingle(const at::Tensor& self, c10::IntArrayRef output_split_sizes,
                          c10::IntArrayRef input_split_sizes, c10::string_view group);
at::Tensor Send(const at::Tensor& self, int64_t dst, int64_t tag, c10::string_view group);
at::Tensor Recv(const at::Tensor& self, int64_t src, int64_t tag, c10::string_view group);

// ... and their Meta kernels: the shapes the tracer records.
at::Tensor AllReduceMeta(const at::Tensor& self, c10::string_view reduce_op, c10::string_view group);
at::Tensor BroadcastMeta(const at::Tensor& self, int64_t src, c10::string_view group);
at::Tensor AllGatherIntoTensorMeta(const at::Tensor& self, int64_t world_size, c10::string_view group);
at::Tensor ReduceScatterTensorMeta(const at::Tensor& self, c10::string_view reduce_op, int64_t world_size,
                                   c10::string_view group);
at::Tensor AllToAllSingleMeta(const at::Tensor& self, c10::IntArrayRef output_split_sizes,
                              c10::IntArrayRef input_split_sizes, c10::string_view group);
at::Tensor SendMeta(const at::Tensor& self, int64_t dst, int64_t tag, c10::string_view group);
at::Tensor RecvMeta(const at::Tensor& self, int64_t src, int64_t tag, c10::string_view group);

}  // namespace torch_neuron::runtime
