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

An operator with its own autograd (every ``torch.library.custom_op``) keeps it,
so its kernel runs below autograd, and so below functionalization: a
CompositeExplicitAutograd kernel (custom_op's default) or a PrivateUse1 one.
There a view of a new tensor is a copy of a traced value, and a write through
it (transformers' ``grouped_mm_fallback``: ``torch.mm(...,
out=output[start:end])``) would be lost; the lazy tensor refuses it ("misses a
write"). Such an operator, whatever its autograd, gets a Functionalize kernel
(csrc/lazy/functionalized_custom_ops.h) that runs its kernel on the functional
wrappers of neuron calls, functionalized as a CompositeImplicitAutograd kernel
is; other calls run the kernel that was there. It lives as long as the library
that registered the operator's kernel. Operators that declare a written
argument get none (the header says why).
"""

from __future__ import annotations

import functools

import torch

from . import _C

_SKIPPED_NAMESPACES = ("aten::", "prims::", "neuron::", "c10d::", "_c10d_functional::")
_lib_by_namespace = {}
_installed = set()
_original_library_impl = None


def _has_python_kernel(name: str, key: str) -> bool:
    if not torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
        return False
    # "PrivateUse1: registered at /path/module.py:36 :: (none) [ boxed ]", and
    # "CompositeExplicitAutograd[alias]: registered at ..." for an alias key.
    prefixes = (f"{key}: registered at ", f"{key}[alias]: registered at ")
    for line in torch._C._dispatch_dump(name).splitlines():
        for prefix in prefixes:
            if line.startswith(prefix):
                where = line[len(prefix):].split(" :: ")[0]
                return where.rsplit(":", 1)[0].endswith(".py")
    return False


def _has_python_neuron_kernel(name: str) -> bool:
    return _has_python_kernel(name, "PrivateUse1")


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


def _needs_functionalized_kernel(name: str) -> bool:
    """Whether neuron calls of `name` reach a Python kernel of its own below
    functionalization (module docstring)."""
    if name.startswith(_SKIPPED_NAMESPACES) or "::" not in name:
        return False
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd"):
        return False  # runs above functionalization already
    entry = torch._library.simple_registry.singleton.get(name)
    if entry is not None and entry.effect.effect is not None:
        return False  # AOTAutograd threads effect tokens, and refuses a Functionalize kernel
    if name not in _C._functionalized_custom_ops() and torch._C._dispatch_has_kernel_for_dispatch_key(
            name, "Functionalize"):
        return False  # the library handles functionalization itself
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
        # A PrivateUse1 kernel wins over a composite one; without autograd of
        # its own it runs above functionalization (_maybe_install).
        return name not in _installed and _has_python_kernel(name, "PrivateUse1") and _has_own_autograd(name)
    return _has_python_kernel(name, "CompositeExplicitAutograd")


def _maybe_functionalize(name: str, library=None) -> None:
    if not _needs_functionalized_kernel(name) or not _C._functionalize_custom_op(name):
        return
    if library is not None:
        library._registration_handles.append(
            torch._library.utils.RegistrationHandle(lambda: _C._unfunctionalize_custom_op(name)))


def _library_impl(self, op_name, fn, dispatch_key="", *args, **kwargs):
    result = _original_library_impl(self, op_name, fn, dispatch_key, *args, **kwargs)
    if dispatch_key in ("PrivateUse1", "CompositeExplicitAutograd") and isinstance(op_name, str):
        name = op_name if "::" in op_name else f"{self.ns}::{op_name}"
        if dispatch_key == "PrivateUse1":
            _maybe_install(name)
        _maybe_functionalize(name, self)
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
            _maybe_functionalize(name)


def installed() -> list:
    """The operators this module gave a neuron kernel, sorted (for tests)."""
    return sorted(_installed)


def functionalized() -> list:
    """The operators whose kernels neuron calls run functionalized, sorted."""
    return _C._functionalized_custom_ops()
