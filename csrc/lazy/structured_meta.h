// The C++ Meta kernels of ATen's structured ops, which the tracer calls in
// place of the Meta kernels the dispatcher would pick.
//
// `import torch` registers Python Meta kernels (torch._refs and
// torch._meta_registrations) over the C++ ones of about 640 aten ops, add, mm
// and sum among them; the dispatcher then never reaches the C++ kernel. The
// Python kernels exist for symbolic shapes (FakeTensor under torch.compile);
// the tracer's meta tensors always have concrete sizes. Calling the Python
// kernel costs about 100 us a signature, and the first call of a process
// imports sympy (about 200 ms, through torch._prims_common's type promotion).
//
// The C++ meta function of a structured op is the one its CPU kernel runs
// before computing: its checks, its messages, its result dtype and its output
// strides are the CPU's by construction. The table here holds the functional
// overloads the tracer sees most (pointwise, matmul, reductions, softmax,
// losses, pooling); every other op keeps the dispatcher's Meta kernel, which
// stays the reference (tests/python/test_structured_meta.py traces each op of
// the table both ways and compares the IR).
#pragma once

#include <string>
#include <vector>

namespace c10 {
class KernelFunction;
class OperatorHandle;
}  // namespace c10

namespace torch_neuron::lazy {

// The C++ Meta kernel of `op`, or nullptr where the table holds none (or the
// table is switched off).
const c10::KernelFunction* StructuredMetaKernel(const c10::OperatorHandle& op);

// Whether StructuredMetaKernel answers at all (on by default); the previous
// setting. Switching clears the Meta cache, so that no result of the other
// path is served. For tests that compare the two paths.
bool SetStructuredMetaEnabled(bool enabled);

// The schema names ("aten::add.Tensor") the table holds, sorted.
std::vector<std::string> StructuredMetaOps();

}  // namespace torch_neuron::lazy
