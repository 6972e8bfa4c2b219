"""Fake tensors of neuron tensors, so that torch.compile takes them (issue 47).

Dynamo and AOTAutograd trace with fake tensors: each real input is described
and copied into a meta tensor by ``torch._subclasses.meta_utils``
(``MetaTensorDescriber.describe_tensor``, then ``MetaConverter.meta_tensor``).
A tensor under functionalization is described twice: the wrapper, and the
tensor inside it, whose storage is read. A neuron tensor is such a wrapper
around a storage-less NeuronTensorImpl, so that read raised ``Cannot access
storage of TensorImpl`` and every backend failed.

PyTorch already knows this kind of tensor: XLA's and Lazy's are the same
(PyTorch's FunctionalTensorWrapper around a storage-less impl), and both
functions treat them by device name, ``device.type not in ("xla", "lazy")``:
the wrapper is described as the tensor itself (its sizes, strides, storage
offset and autograd metadata; its FunctionalStorageImpl as the storage, which
carries the size in bytes and aliasing between views), never unwrapped or
synced. That is exactly right for neuron tensors too; the wrapper mirrors the
CPU's metadata (lazy/tensor_impl.h).

``install()`` adds "neuron" to that device tuple in those two functions, by
replacing the tuple constant in their code objects: the one change is that a
tensor whose device type is "neuron" takes the XLA branch. CPU, meta and every
other device's tensors take the branches they took before. Each function must
hold the constant exactly once; if a torch upgrade changes that, nothing is
patched and the import warns (``torch.compile`` on neuron tensors then fails
as before), and tests/python/test_torch_compile.py fails on the patch check.
"""

from __future__ import annotations

import warnings

from torch._subclasses import meta_utils

_DEVICE = "neuron"
_TORCH_TUPLE = ("xla", "lazy")
_PATCHED_TUPLE = _TORCH_TUPLE + (_DEVICE,)

# The functions whose device test names the storage-less functional devices.
_TARGETS = (
    (meta_utils.MetaTensorDescriber, "describe_tensor"),
    (meta_utils.MetaConverter, "meta_tensor"),
)


def _count(code, const) -> int:
    # `==` would also match a list or an equal tuple of other types; the
    # compiler folds both `in ("xla", "lazy")` and `in ["xla", "lazy"]` into a
    # tuple constant.
    return sum(1 for c in code.co_consts if type(c) is tuple and c == const)


def patched_functions() -> list[str]:
    """The qualified names of the functions that treat neuron tensors as XLA's
    (both targets once ``install()`` succeeded)."""
    return [
        f"{owner.__name__}.{name}"
        for owner, name in _TARGETS
        if _count(getattr(owner, name).__code__, _PATCHED_TUPLE) == 1
    ]


def install() -> bool:
    """Patches both functions, or neither. Returns whether they are patched
    (idempotent)."""
    todo = []
    for owner, name in _TARGETS:
        fn = getattr(owner, name)
        code = fn.__code__
        if _count(code, _PATCHED_TUPLE) == 1:
            continue
        if _count(code, _TORCH_TUPLE) != 1:
            warnings.warn(
                f"torch_neuron: torch.compile cannot take neuron tensors: "
                f"torch._subclasses.meta_utils.{owner.__name__}.{name} no longer tests the "
                f"device type against {_TORCH_TUPLE} (torch_neuron/_fake_tensors.py)",
                RuntimeWarning,
                stacklevel=2,
            )
            return False
        consts = tuple(
            _PATCHED_TUPLE if type(c) is tuple and c == _TORCH_TUPLE else c for c in code.co_consts
        )
        todo.append((fn, code.replace(co_consts=consts)))
    for fn, code in todo:
        fn.__code__ = code
    return True
