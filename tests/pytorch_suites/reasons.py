"""Neuron failures of PyTorch's suites that have a known reason.

Each entry is (suite, test, message, reason), the first three glob patterns
(the test pattern matches the test's name, the message pattern the first line
of its error); the first entry that matches a failure gives its reason. An
entry is a decision or a limit we know of, with its cause, not a bug waiting
to be noticed: a failure matching none shows in docs/PYTORCH_SUITES.md under
"Failures without a written reason".
"""

EXPECTED_FAILURES = [
    ("*", "*", "NotImplementedError: sparse layouts are not supported on neuron*",
     "sparse layouts (COO, CSR; sparse gradients of Embedding/EmbeddingBag(sparse=True)) are not "
     "supported on neuron: a NotImplementedError names the op that makes one, at the call "
     "(docs/SUPPORT.md)"),
    ("*", "*", "BufferError: neuron tensors cannot be shared through DLPack*",
     "DLPack export of a neuron tensor is refused (BufferError): its values have no address another "
     "library could read; .cpu() first (docs/SUPPORT.md)"),
    ("*", "*", "RuntimeError: Found a custom (non-ATen) operator whose output has alias annotations*",
     "upstream: PyTorch's functionalization refuses prims' view ops (prims.broadcast_in_dim, "
     "prims.real/imag/conj), which the tests reach through torch._refs; it only knows aten views, so "
     "no functionalizing device can run them (torch._refs callers get it on every lazy device)"),
    ("*", "*", "TypeError: neuron devices do not support dtype QUInt8*",
     "quantized dtypes are not supported on neuron: a TypeError names the dtype at the call "
     "(docs/SUPPORT.md)"),
    ("*", "*", "TypeError: neuron devices do not support dtype ComplexHalf*",
     "complex32 (chalf) is not supported on neuron: a TypeError names the dtype at the call "
     "(docs/SUPPORT.md)"),
    ("test_view_ops.py", "test_memory_format_resize__neuron", "*",
     "functionalization's resize_ of a tensor to as many elements or fewer replays the tensor as "
     "a contiguous view and drops memory_format (PyTorch's resize_ kernel for functional tensors); "
     "resizing to more elements keeps it"),
    ("test_view_ops.py", "test_contiguous_neuron", "*set the storage*",
     "set_ with a storage: a neuron storage has no host memory and functional tensors cannot be "
     "re-pointed at another storage; use as_strided for the same view"),
    ("test_view_ops.py", "test_view_copy_output_contiguous_neuron", "*",
     "a *_copy op called by hand reports the strides of the view it copies (functionalization "
     "emits the same ops for views, whose strides must be the view's); values are right "
     "(docs/SUPPORT.md)"),
    ("test_indexing.py", "test_byte_mask_accumulate_neuron", "*Scalars are not equal*",
     "the test counts warnings: index_put_'s uint8-mask deprecation warning is raised where the "
     "graph runs (on the device thread, printed to stderr) instead of at the call, so Python "
     "sees one of the CPU's two warnings; the values are right"),
    ("test_indexing.py", "test_index_put_accumulate_empty_neuron", "*RuntimeError not raised*",
     "index_put_'s value-shape check for empty indices lives in the CPU kernel, not the Meta "
     "kernel: neuron raises the CPU's error when the graph runs (at the next sync), not at the "
     "call"),
    ("test_reductions.py", "test_dim_ndim_limit_*", "*RuntimeError not raised*",
     "the CPU's reductions refuse a tensor of more than 64 dims (a limit of their dim mask) in the "
     "kernel, not in the Meta kernel: neuron raises the CPU's error when the graph runs (at the next "
     "sync), not at the call"),
]
