"""Checks that fail for a known reason.

Each entry is (op, dtype, kind, error, reason), all but the reason glob patterns;
the first entry matching a failed check gives its reason. An entry is a decision
or a limit we know of, with its cause, not a bug waiting to be noticed: a failing
check that matches none shows in docs/CONFORMANCE.md as a plain failure.
"""

KNOWN_FAILURES = [
    ("as_strided*", "*", "*", "*reaches storage outside that tensor's own elements*",
     "as_strided with a storage offset or strides reaching past a view's own elements "
     "(OpInfo's partial views, or a strided view's gaps) is refused by name: a neuron view "
     "holds its own elements, not its base's storage (docs/SUPPORT.md)"),
    ("as_strided.partial_views", "float32", "forward_ad", "*has_fw_view*",
     "the same limit seen from forward AD: the tangent of a partial view (a view at an "
     "offset into a larger base) is laid out over its base's storage, as on the CPU, but "
     "as_strided of that tangent on neuron does not keep the base's storage layout (a neuron "
     "view holds its own elements), so PyTorch's internal assertion that a view's tangent has "
     "its primal's layout fails"),
    ("view_as_complex", "float32", "noncontig", "*last dimension with stride 1*",
     "the CPU refuses the same strided input (view_as_complex needs a last dimension of "
     "stride 1); neuron reports the CPU's strides, so it refuses it too"),
    ("sparse.*", "*", "*", "*", "sparse layouts are not supported: neuron tensors are strided"),
    ("to_sparse", "*", "*", "*", "sparse layouts are not supported: neuron tensors are strided"),
    ("polygamma.*", "float32", "inplace", "*custom (non-ATen) operator*",
     "upstream: functionalization has no kernel for polygamma_ (its functional form "
     "polygamma(n, self) orders the arguments differently), so no lazy device can run it"),
    ("addbmm", "float32", "inplace", "*broadcast shape*",
     "the CPU's addbmm_ resizes a [1] or scalar input to the result's shape; neuron "
     "raises the usual in-place broadcast error instead"),
]
