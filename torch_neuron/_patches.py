"""Every torch function torch_neuron replaces, in one table (issue 48).

PyTorch gives a device most of what it needs through hooks (dispatch keys,
the PrivateUse1 hooks, ``torch.serialization.register_package``); for these
functions it gives none. Each entry says which function is replaced, by what,
the original's signature as torch 2.13.0 has it, and which PyTorch limitation
the replacement works around. Every replacement acts on neuron tensors (or on
what concerns neuron) and otherwise calls the original it keeps.

``install()`` (once, at import) checks each original's signature first: where
a torch upgrade changed a function, its entry is left out with one warning
naming it and the limitation, since the replacement may no longer fit, and
tests/python/test_patches.py fails. ``installed()`` and ``skipped()`` say what
happened.

Patched elsewhere, each with its own check: the two functions of
``torch._subclasses.meta_utils`` whose code constants ``_fake_tensors`` widens
(fake tensors of neuron tensors, checked both-or-neither); the decomposition
tables' Dynamo-disabled functions ``_lazy_dynamo`` stands in for; and
``_dynamo_hooks``' registrations when Dynamo is imported. docs/DISPATCH.md
lists all of them as PyTorch reports them (``torch_neuron.debug.overrides()``).
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from dataclasses import dataclass
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class Patch:
    target: str  # the attribute replaced, "torch.Tensor.copy_"
    replacement: str  # what replaces it, "torch_neuron._tensor_support._neuron_copy_"
    # The original's signature (``signature_of``); None where torch has no
    # such attribute and the entry adds it.
    signature: Optional[str]
    limitation: str  # the PyTorch limitation the replacement works around
    # The replacement is a factory: called with the original, it returns the
    # function that replaces it.
    wraps: bool = False


_SUPPORT = "torch_neuron._tensor_support."
_SERIALIZATION = "torch_neuron._serialization."

PATCHES: Tuple[Patch, ...] = (
    Patch("torch._tensor_str._str_intern", _SUPPORT + "_neuron_str_intern", "_str_intern(inp, *, tensor_contents=None)",
          "printing reads a storage-less tensor through its storage; PyTorch copies to the CPU first only for the "
          "XLA, Lazy and Meta devices, chosen by name"),
    Patch("torch.Tensor.__deepcopy__", _SUPPORT + "_neuron_deepcopy", "__deepcopy__(self, memo)",
          "deepcopy clones through the storage for PrivateUse1 devices whose tensors report one (a functional "
          "wrapper does)"),
    Patch("torch.Tensor.copy_", _SUPPORT + "_neuron_copy_", "copy_(src, non_blocking=False) -> Tensor",
          "functionalization refuses to write a plain tensor from a functional one; inference tensors skip the "
          "ADInplaceOrView kernel that handles it for other calls (lazy/bridge.cc)"),
    Patch("torch.Tensor.data_ptr", _SUPPORT + "_neuron_data_ptr", "data_ptr() -> int",
          "a storage-less tensor has no address; libraries compare data_ptr()s to find shared and tied weights"),
    Patch("torch.UntypedStorage.data_ptr", _SUPPORT + "_neuron_storage_data_ptr", "data_ptr(C)",
          "as Tensor.data_ptr, for the storages of views (safetensors and accelerate key weights by them)"),
    Patch("torch.UntypedStorage.resize_", _SUPPORT + "_neuron_storage_resize", "resize_(C)",
          "FSDP2 frees and re-allocates unsharded parameters by resizing their storages to 0 and back"),
    Patch("torch.Tensor.numpy", _SUPPORT + "_neuron_numpy", "numpy(*, force=False) -> numpy.ndarray",
          "numpy() refuses every tensor not on the CPU, where CUDA users' code reads results with .cpu().numpy()"),
    Patch("torch.Tensor.__dlpack__", _SUPPORT + "_neuron_dlpack",
          "__dlpack__(self, *, stream: typing.Any | None = -1, max_version: tuple[int, int] | None = None, "
          "dl_device: tuple[enum.IntEnum, int] | None = None, copy: bool | None = None)",
          "PyTorch picks a PrivateUse1 tensor's DLPack device by the name 'privateuse1', not the renamed "
          "one, and its export reads data_ptr(), which a lazy tensor has only after a sync"),
    Patch("torch.Tensor.__dlpack_device__", _SUPPORT + "_neuron_dlpack_device",
          "__dlpack_device__(self) -> tuple[enum.IntEnum, int]", "as __dlpack__"),
    Patch("torch.utils.dlpack.to_dlpack", _SUPPORT + "_neuron_to_dlpack", "to_dlpack(tensor) -> PyCapsule",
          "as __dlpack__"),
    Patch("torch._C._from_dlpack", _SUPPORT + "_neuron_from_dlpack_capsule", "_from_dlpack(C)",
          "PyTorch reads a kDLExtDev capsule into a plain PrivateUse1 tensor around the address (from_blob), "
          "outside functionalization and the lazy tensors; a neuron capsule stands for its neuron tensor"),
    Patch("torch.asarray", _SUPPORT + "_neuron_asarray",
          "asarray(obj: Any, *, dtype: Optional[dtype], device: Optional[DeviceLikeType], copy: Optional[bool] "
          "= None, requires_grad: Optional[bool] = None) -> Tensor # noqa: B950",
          "as torch._C._from_dlpack, for the capsules asarray reads itself (in C++)"),
    Patch("torch._C._set_default_dtype", _SUPPORT + "_finish_work_before_default_dtype", "_set_default_dtype(C)",
          "traced ops take torch's default dtype again when their graph runs on the device's thread: a change of "
          "the default first runs what is traced", wraps=True),
    Patch("torch._C._set_default_tensor_type", _SUPPORT + "_finish_work_before_default_tensor_type",
          "_set_default_tensor_type(C)", "as _set_default_dtype", wraps=True),
    Patch("torch.Tensor._reduce_ex_internal", _SERIALIZATION + "_neuron_reduce_ex_internal",
          "_reduce_ex_internal(self, proto)",
          "pickling (torch.save, multiprocessing) reads a PrivateUse1 tensor through its storage"),
    Patch("torch._utils._rebuild_tensor_v2", _SERIALIZATION + "_rebuild_tensor_v2",
          "_rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None)",
          "torch.load rebuilds a tensor over its storage; a neuron tensor is not a view of one (the replacement "
          "keeps torch._utils' name, so saved files load without torch_neuron)"),
    Patch("torch._utils._rebuild_device_tensor_from_cpu_tensor",
          _SERIALIZATION + "_rebuild_device_tensor_from_cpu_tensor",
          "_rebuild_device_tensor_from_cpu_tensor(data, dtype, device, requires_grad)",
          "torch.load refuses a callable map_location for storage-less backends' tensors"),
    Patch("torch.UntypedStorage.neuron", _SERIALIZATION + "_storage_neuron",
          "wrap_storage_to(self, device=None, non_blocking=False)",
          "torch's generated storage.neuron() copies a storage to the device, where neuron tensors have none; a "
          "callable map_location answers with it inside torch.load, which then marks the storage for the tensor "
          "rebuilt over it"),
    Patch("torch.nn.Module._apply", "torch_neuron._module_support._wrap_apply", "_apply(self, fn, recurse=True)",
          "Module.to() keeps a Parameter object only where the tensor types match, or under a process-wide "
          "switch that changes every device's conversions", wraps=True),
    Patch("torch.library.Library.impl", "torch_neuron._custom_ops._wrap_library_impl",
          "impl(self, op_name, fn, dispatch_key='', *, with_keyset=False, allow_override=True)",
          "a library's Python PrivateUse1 kernel would run below functionalization, on unwrapped tensors",
          wraps=True),
)


def _resolve(path: str):
    """The object at dotted `path` and its owner; (None, None) if missing."""
    module_path, attr = path.rsplit(".", 1)
    parts = module_path.split(".")
    owner = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        child = getattr(owner, part, None)
        if child is None:
            child = importlib.import_module(".".join(parts[: i + 1]))
        owner = child
    return owner, getattr(owner, attr, None)


def signature_of(fn) -> str:
    """``name(parameters)``: a Python function's own signature; a C function's
    documented one, or ``name(C)`` where it documents none."""
    name = getattr(fn, "__name__", "?")
    try:
        return f"{name}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        doc = (getattr(fn, "__doc__", None) or "").strip().splitlines()
        first = doc[0].strip() if doc else ""
        return first if re.match(r"\w+\(", first) else f"{name}(C)"


def check(patch: Patch) -> Optional[str]:
    """Why `patch` must not be applied here, or None."""
    _, original = _resolve(patch.target)
    if patch.signature is None:
        if original is not None and not _is_ours(original):
            return f"{patch.target} exists in this torch ({signature_of(original)}); torch_neuron would replace it"
        return None
    if original is None:
        return f"{patch.target} is not in this torch"
    found = signature_of(getattr(original, "__wrapped__", original) if _is_ours(original) else original)
    if found != patch.signature:
        return f"{patch.target} is now {found}, not {patch.signature}"
    return None


def _is_ours(fn) -> bool:
    code = getattr(fn, "__code__", None)
    return code is not None and "torch_neuron" in code.co_filename.replace("\\", "/").split("/")


_installed: List[str] = []
_skipped: List[Tuple[str, str]] = []


def install(patches: Tuple[Patch, ...] = PATCHES) -> None:
    for patch in patches:
        if patch.target in _installed:
            continue
        problem = check(patch)
        if problem is not None:
            _skipped.append((patch.target, problem))
            warnings.warn(
                f"torch_neuron: {problem}: left as torch has it, so what it works around comes back for neuron "
                f"tensors ({patch.limitation}). Update torch_neuron for this torch (torch_neuron/_patches.py).",
                RuntimeWarning, stacklevel=2)
            continue
        owner, original = _resolve(patch.target)
        _, replacement = _resolve(patch.replacement)
        if patch.wraps:
            replacement = replacement(original)
        setattr(owner, patch.target.rsplit(".", 1)[1], replacement)
        _installed.append(patch.target)


def installed() -> List[str]:
    """The targets replaced, in table order."""
    return list(_installed)


def skipped() -> List[Tuple[str, str]]:
    """(target, why) of the entries left out on this torch."""
    return list(_skipped)


__all__ = ["Patch", "PATCHES", "check", "install", "installed", "signature_of", "skipped"]
