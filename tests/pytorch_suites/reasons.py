"""Neuron failures of PyTorch's suites that have a known reason.

Each entry is (suite, test, message, reason), the first three glob patterns
(the test pattern matches the test's name, the message pattern the first line
of its error); the first entry that matches a failure gives its reason. An
entry is a decision or a limit we know of, with its cause, not a bug waiting
to be noticed: a failure matching none shows in docs/PYTORCH_SUITES.md under
"Failures without a written reason".
"""

SPARSE = ("sparse layouts (COO, CSR; sparse gradients of Embedding/EmbeddingBag(sparse=True)) are "
          "not supported on neuron: a NotImplementedError names the op that makes one, at the call "
          "(docs/SUPPORT.md)")

EXPECTED_FAILURES = [
    ("*", "*", "NotImplementedError: sparse layouts are not supported on neuron*", SPARSE),
    # OpInfo's sample-input wrapper re-raises a sample's error as a bare Exception
    # naming the sample (test_masked's strided tests also try sparse masks).
    ("*", "*", "Exception: sparse layouts are not supported on neuron*", SPARSE),
    ("*", "*", "RuntimeError: Found a custom (non-ATen) operator whose output has alias annotations*",
     "upstream: PyTorch's functionalization refuses prims' view ops (prims.broadcast_in_dim, "
     "prims.real/imag/conj), which the tests reach through torch._refs; it only knows aten views, so "
     "no functionalizing device can run them (torch._refs callers get it on every lazy device)"),
    ("*", "*", "TypeError: neuron devices do not support dtype QUInt8*",
     "quantized dtypes are not supported on neuron: a TypeError names the dtype at the call "
     "(docs/SUPPORT.md)"),
    ("test_view_ops.py", "test_memory_format_resize__neuron", "*",
     "functionalization's resize_ of a tensor to as many elements or fewer replays the tensor as "
     "a contiguous view and drops memory_format (PyTorch's resize_ kernel for functional tensors); "
     "resizing to more elements keeps it"),
    ("*", "*", "*Attempted to set the storage of a tensor on device*",
     "set_ with a storage: a neuron storage has no host memory and functional tensors cannot be "
     "re-pointed at another storage; use as_strided for the same view"),
    ("test_view_ops.py", "test_contiguous_neuron", "*set the storage*",
     "set_ with a storage: a neuron storage has no host memory and functional tensors cannot be "
     "re-pointed at another storage; use as_strided for the same view"),
    ("test_view_ops.py", "test_view_copy_output_contiguous_neuron", "*",
     "a *_copy op called by hand reports the strides of the view it copies (functionalization "
     "emits the same ops for views, whose strides must be the view's); values are right "
     "(docs/SUPPORT.md)"),
    ("test_reductions.py", "test_dim_ndim_limit_*", "*RuntimeError not raised*",
     "the CPU's reductions refuse a tensor of more than 64 dims (a limit of their dim mask) in the "
     "kernel, not in the Meta kernel: neuron raises the CPU's error when the graph runs (at the next "
     "sync), not at the call"),
    # Errors that depend on tensor values: a lazy device knows the values only when the graph
    # runs, so the CPU's error comes at the next sync (naming the op and its source line),
    # outside the test's assertRaises (docs/SUPPORT.md).
    ("nn/test_embedding.py", "test_embedding_bag_out_of_bounds_idx_*", "*RuntimeError not raised*",
     "index values: embedding_bag's 'Expected idx >= 0 && idx < num_embeddings' is raised when the "
     "graph runs (at the next sync), not at the call"),
    ("test_indexing.py", "test_trivial_fancy_out_of_bounds_neuron", "*IndexError not raised*",
     "index values: 'index 10 is out of bounds' is raised when the graph runs (at the next sync), "
     "not at the call"),
    ("test_indexing.py", "test_boolean_assignment_value_mismatch_neuron", "*Exception not raised*",
     "mask values: how many elements a bool mask selects, and so whether the values fit, is known "
     "when the graph runs; the CPU's shape-mismatch error is raised at the next sync"),
    ("test_indexing.py", "test_boolean_assignment_value_mismatch_neuron",
     "*\"shape mismatch\" does not match \"Index put requires the source and destination dtypes match*",
     "mask values, and the order of two checks: the CPU checks a masked assignment's value shape "
     "(which depends on how many elements the mask selects) before the dtypes; neuron checks the "
     "dtypes at the call (the CPU's message) and the shape when the graph runs"),
    ("test_segment_reductions.py", "test_unsafe_flag_neuron_*", "*RuntimeError not raised*",
     "length values: segment_reduce's 'Expected all rows of lengths along axis to sum to "
     "data.size(...)' (unsafe=False) is raised when the graph runs (at the next sync), not at the "
     "call"),
    # Tests that expect CUDA's behaviour on every device but the CPU.
    ("nn/test_embedding.py", "test_EmbeddingBag_per_sample_weights_failures_*", "*expected scalar type*",
     "the test expects CUDA's wording ('expected scalar type') on devices other than the CPU; "
     "neuron raises the CPU's error ('Expected tensor for argument #1 'weight' to have the same "
     "type as tensor for argument #1 'per_sample_weights''), at the call"),
    ("test_linalg.py", "test_*_errors_and_warnings_neuron*",
     "*does not match \"result type * can't be cast to the desired output type *",
     "an out= tensor of a dtype the result cannot be cast to (eigenvalues or a solution into an "
     "int tensor) is refused at the call, with PyTorch's generic out= words ('result type "
     "ComplexFloat can't be cast to the desired output type Int') before the linalg op's own "
     "check, whose words the test expects"),
    ("test_linalg.py", "test_linalg_lstsq_input_checks_neuron_*", "*is not supported on CUDA*",
     "the test expects CUDA's words ('`driver` other than `gels` is not supported on CUDA') on "
     "devices other than the CPU; neuron accepts the CPU's drivers and refuses others with the "
     "CPU's error ('parameter `driver` should be one of ...'), at the call"),
    ("test_linalg.py", "test_eig_with_nan_neuron_*", "*RuntimeError not raised*",
     "input values: linalg.eig's 'input tensor should not contain infs or NaNs' is raised when "
     "the graph runs (at the next sync), not at the call"),
    ("test_linalg.py", "test_inv_ex_singular_neuron_*", "*_LinAlgError not raised*",
     "input values: inv_ex(check_errors=True) of a singular matrix raises the CPU's _LinAlgError "
     "when the graph runs (at the next sync), not at the call"),
    # Decisions and limits of a functionalizing device.
    ("*", "*", "RuntimeError: *(*): the out= argument * is a view of shape *",
     "an out= view that the result must grow (values[::2] of 3 elements for 6 results) is refused at "
     "the call with a message naming the argument and both shapes: PyTorch's functionalization "
     "cannot resize a view to a larger size (the CPU re-strides the view over its base); a "
     "contiguous out= of any size, or a view of the right size, works"),
    ("test_tensor_creation_ops.py", "test_like_fn_stride_proparation_vs_tensoriterator_unary_op_neuron",
     "NotImplementedError: aten::fill_: writing into a tensor whose elements share memory*",
     "writing into a tensor whose elements overlap in memory (empty_strided with overlapping "
     "strides, then fill_) is refused at the call: functionalization replays writes element by "
     "element and cannot express several elements sharing one location (docs/SUPPORT.md)"),
    ("test_view_ops.py", "test_conj_imag_view_neuron_*", "AssertionError: False is not true*",
     "the conjugate and negative bits are resolved when an op is traced, not kept as tensor flags: "
     "t.conj().imag is a view of t with the right values, and writes through it reach t, but its "
     "is_neg() is False (is_conj() likewise)"),
    ("test_view_ops.py", "test_flatten_view_neuron", "*more than one element of the written-to tensor*",
     "a write through a view whose elements repeat (as_strided with a zero stride, then v[i] = x): "
     "functionalization cannot tell which repeated element the write meant, so the CPU's 'more "
     "than one element of the written-to tensor refers to a single memory location' is raised when "
     "the view or its base is next used; the CPU writes the shared memory (docs/SUPPORT.md)"),
    ("test_view_ops.py", "test_imag_noncomplex_neuron_*", "*more than one element of the written-to tensor*",
     "not this test's error: test_flatten_view (run before it in the same process) leaves a write "
     "through a zero-stride view traced; its graph fails at the next sync, which is this test's "
     "first"),
]
