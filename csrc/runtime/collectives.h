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

#include <string_view>

namespace torch_neuron::runtime {

// The neuron:: collective ops (schemas in collectives.cc):
//   all_reduce(Tensor self, str reduce_op, str group) -> Tensor
//   broadcast(Tensor self, int src, str group) -> Tensor
//   all_gather_into_tensor(Tensor self, int world_size, str group) -> Tensor   (dim 0 grows)
//   reduce_scatter_tensor(Tensor self, str reduce_op, int world_size, str group) -> Tensor
//   all_to_all_single(Tensor self, int[] output_split_sizes, int[] input_split_sizes,
//                     str group) -> Tensor
//   send(Tensor self, int dst, int tag, str group) -> Tensor   (an empty token)
//   recv(Tensor self, int src, int tag, str group) -> Tensor   (like self)
// reduce_op is one of sum, avg, product, min, max, band, bor, bxor; avg is a
// sum divided by the group's size (gloo has no average).
bool IsCollectiveOp(std::string_view op);

}  // namespace torch_neuron::runtime
