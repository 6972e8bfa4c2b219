"""Checks that fail for a known reason.

Each entry is (op, dtype, kind, error, reason), all but the reason glob patterns;
the first entry matching a failed check gives its reason. An entry is a decision
or a limit we know of, with its cause, not a bug waiting to be noticed: a failing
check that matches none shows in docs/CONFORMANCE.md as a plain failure.
"""

_REPLACE_CAST = (
    "upstream conflict: functionalization's replace_ casts an in-place op's result of "
    "another dtype with _to_copy and asserts the result is unwrapped, but _to_copy's "
    "functionalization kernel leaves results of devices other than XLA/Lazy unwrapped, "
    "so the neuron kernel must wrap them")

KNOWN_FAILURES = [
    ("*", "*", "*", "*dtype Complex*",
     "complex dtypes are not neuron dtypes (by design: DESIGN.md's dtype set); FFTs, "
     "complex constructors and eigen-decompositions produce them"),
    ("hash_tensor", "*", "*", "*UInt64*", "uint64 is not a neuron dtype"),
    ("sparse.*", "*", "*", "*", "sparse layouts are not supported: neuron tensors are strided"),
    ("to_sparse", "*", "*", "*", "sparse layouts are not supported: neuron tensors are strided"),
    ("eq", "float32", "inplace", "*INTERNAL ASSERT*", _REPLACE_CAST),
    ("ne", "float32", "inplace", "*INTERNAL ASSERT*", _REPLACE_CAST),
    ("lt", "float32", "inplace", "*INTERNAL ASSERT*", _REPLACE_CAST),
    ("le", "float32", "inplace", "*INTERNAL ASSERT*", _REPLACE_CAST),
    ("gt", "float32", "inplace", "*INTERNAL ASSERT*", _REPLACE_CAST),
    ("ge", "float32", "inplace", "*INTERNAL ASSERT*", _REPLACE_CAST),
    ("logical_*", "float32", "inplace", "*INTERNAL ASSERT*", _REPLACE_CAST),
    ("_batch_norm_with_update", "bfloat16", "forward", "*INTERNAL ASSERT*", _REPLACE_CAST),
    ("nn.functional.cosine_similarity", "bfloat16", "forward", "*INTERNAL ASSERT*", _REPLACE_CAST),
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
