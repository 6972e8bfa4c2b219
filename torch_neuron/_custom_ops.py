"""Custom operators with Python kernels for PrivateUse1, on neuron tensors.

A library that defines its own operator and registers a Python kernel for
PrivateUse1 (FSDP2's ``fsdp::all_gather_copy_in``, ``fsdp::split_with_sizes_copy``
and ``fsdp::chunk_cat`` do, for every accelerator) writes that kernel in torch
ops, for tensors that hold their memory. A neuron tensor is a functionalization
wrapper over a traced value: PyTorch's functionalization either refuses such an
operator ("Found a custom (non-ATen) operator whose output has alias
annotations", for ``out=`` lists) or unwraps the arguments and runs the kernel
on the traced values below it, where its in-place writes and ``out=`` calls have
no functionalization to turn them into graph ops.

So each such operator gets a kernel at AutogradPrivateUse1 (the neuron tensors'
own key; CPU and other devices are untouched) that runs its PrivateUse1 Python
kernel right there, on the wrapped tensors: the kernel's torch ops are then
recorded like the user's own (functionalized, traced, differentiable), as if
the operator were a composite of them. Operators with their own autograd
kernel, and C++ kernels (c10d's collectives, which the neuron process group
serves), are left alone.

Operators registered before ``import torch_neuron`` are found by a scan;
later ones as their PrivateUse1 kernel is registered: ``Library.impl`` is
wrapped, since PyTorch calls nothing when a kernel is registered, and a
backend's AutogradPrivateUse1 fallback cannot be replaced (PyTorch registers
its own). The wrapper calls the original for every registration and adds the
neuron kernel after a PrivateUse1 one only (``__wrapped__`` is the original).
"""

from __future__ import annotations

import functools

import torch

_SKIPPED_NAMESPACES = ("aten::", "prims::", "neuron::", "c10d::", "_c10d_functional::")
_lib_by_namespace = {}
_installed = set()
_original_library_impl = None


def _has_python_neuron_kernel(name: str) -> bool:
    if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
        return False
    for line in torch._C._dispatch_dump(name).splitlines():
        # "PrivateUse1: registered at /path/module.py:36 :: (none) [ boxed ]"
        if line.startswith("PrivateUse1: registered at "):
            where = line[len("PrivateUse1: registered at "):].split(" :: ")[0]
            return where.rsplit(":", 1)[0].endswith(".py")
    return False


def _has_own_autograd(name: str) -> bool:
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
               for key in ("Autograd", "AutogradPrivateUse1", "CompositeImplicitAutograd"))


def _overload_of(name: str):
    namespace, rest = name.split("::", 1)
    op_name, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), op_name), overload or "default")


def _run_neuron_kernel_above_functionalization(op):
    neuron_only = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)

    def kernel(*args, **kwargs):
        return op.redispatch(neuron_only, *args, **kwargs)

    return kernel


def _maybe_install(name: str) -> None:
    if name in _installed or name.startswith(_SKIPPED_NAMESPACES) or "::" not in name:
        return
    if not _has_python_neuron_kernel(name) or _has_own_autograd(name):
        return
    op = _overload_of(name)
    namespace = name.split("::", 1)[0]
    lib = _lib_by_namespace.get(namespace)
    if lib is None:
        lib = _lib_by_namespace[namespace] = torch.library.Library(namespace, "IMPL")
    _installed.add(name)
    qualified = name.split("::", 1)[1]
    _original_library_impl(lib, qualified, _run_neuron_kernel_above_functionalization(op),
                           "AutogradPrivateUse1")


def _library_impl(self, op_name, fn, dispatch_key="", *args, **kwargs):
    result = _original_library_impl(self, op_name, fn, dispatch_key, *args, **kwargs)
    if dispatch_key == "PrivateUse1" and isinstance(op_name, str):
        name = op_name if "::" in op_name else f"{self.ns}::{op_name}"
        _maybe_install(name)
    return result


def _wrap_library_impl(original):
    """The replacement of torch.library.Library.impl (_patches.py)."""
    global _original_library_impl
    _original_library_impl = original
    functools.update_wrapper(_library_impl, original)
    _library_impl.__module__, _library_impl.__qualname__ = __name__, "_library_impl"
    return _library_impl


def install() -> None:
    """After _patches.install(): the operators libraries registered before
    torch_neuron was imported."""
    if _original_library_impl is None:  # left out on this torch (_patches.py warned)
        return
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith(_SKIPPED_NAMESPACES):
            _maybe_install(name)


def installed() -> list:
    """The operators this module gave a neuron kernel, sorted (for tests)."""
    return sorted(_installed)
