"""Checks that fail for a known reason.

Each entry is (op, dtype, kind, error, reason), all but the reason glob patterns;
the first entry matching a failed check gives its reason. An entry is a decision
or a limit we know of, with its cause, not a bug waiting to be noticed: a failing
check that matches none shows in docs/CONFORMANCE.md as a plain failure.
"""

KNOWN_FAILURES = [
    ("chalf", "*", "*", "*ComplexHalf*", "complex32 (chalf) is not a neuron dtype: complex64 and "
     "complex128 are"),
    ("sparse.*", "*", "*", "*", "sparse layouts are not supported: neuron tensors are strided"),
    ("to_sparse", "*", "*", "*", "sparse layouts are not supported: neuron tensors are strided"),
    ("polygamma.*", "float32", "inplace", "*custom (non-ATen) operator*",
     "upstream: functionalization has no kernel for polygamma_ (its functional form "
     "polygamma(n, self) orders the arguments differently), so no lazy device can run it"),
    ("addbmm", "float32", "inplace", "*broadcast shape*",
     "the CPU's addbmm_ resizes a [1] or scalar input to the result's shape; neuron "
     "raises the usual in-place broadcast error instead"),
    ("nn.functional.linear_cross_entropy.chunked*", "*", "*", "*misses a write*",
     "its chunked implementation is a Python custom op that writes into views of its "
     "result below functionalization, where views of lazy tensors are copies: the "
     "result would miss those writes, so reading it raises instead"),
]
