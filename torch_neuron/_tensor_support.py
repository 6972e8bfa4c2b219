"""Python-level support for storage-less neuron tensors.

Neuron tensors are lazy: their data is an IR value or a device buffer, and what
the user holds is PyTorch's FunctionalTensorWrapper around it. PyTorch handles
such tensors by device name for XLA and Lazy ("print via the CPU", "pickle via
the CPU") but decides for PrivateUse1 devices by ``torch._C._has_storage``,
which is true for a functional wrapper. These replacements (installed by
``_patches.py``, which says why for each) give neuron tensors the treatment
PyTorch gives storage-less backends:

- ``repr``/``str`` prints the values (read back from the device) with the
  device suffix, exactly as a CPU tensor would print them (a fake neuron
  tensor of torch.compile prints as torch prints fakes);
- checkpoints (``torch.save``/``torch.load``) are ``_serialization.py``'s;
- ``copy.deepcopy`` clones on the device;
- ``cpu_tensor.copy_(neuron_tensor)`` reads the source back first
  (functionalization refuses to write a plain tensor from a functional one;
  the copy_ kernel of lazy/bridge.cc does the same for C++ callers, except
  into inference tensors, which skip its dispatch key: this covers those);
- ``data_ptr()`` and ``untyped_storage().data_ptr()`` give virtual device
  addresses: views share their storage's, copies get their own (the values
  are read with ``.cpu()``; the storage's own reads and copies raise);
- ``neuron_tensor.numpy()`` is a sync point returning the values read back
  (like ``.cpu().numpy()``; a tensor requiring grad still needs ``.detach()``
  or ``force=True``, as on the CPU);
- DLPack (``__dlpack__``, ``to_dlpack``, ``from_dlpack``, ``asarray`` of a
  capsule) as CUDA tensors have it, with the device PyTorch maps PrivateUse1 to
  (kDLExtDev); lazy/dlpack.h says how an export syncs and what an import gives.
"""

from __future__ import annotations

import functools

import torch
import torch.utils.dlpack
import torch._tensor_str as _tensor_str
from torch._subclasses.fake_tensor import FakeTensor
from . import _C

_DEVICE = "neuron"


def _is_neuron(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == _DEVICE


_original_str_intern = _tensor_str._str_intern


def _is_fake(t) -> bool:
    """A fake tensor, or a functional wrapper of one (AOTAutograd's). A real
    neuron tensor's wrapper is looked into without a sync (torch's is_fake
    would sync it, which may trace its pending view updates)."""
    if isinstance(t, FakeTensor):
        return True
    return torch._is_functional_tensor(t) and isinstance(torch._from_functional_tensor(t), FakeTensor)


def _neuron_str_intern(inp, *, tensor_contents=None):
    if not _is_neuron(inp) or torch._C._functorch.is_functorch_wrapped_tensor(inp) or _is_fake(inp):
        # A fake neuron tensor (torch.compile's, printed by its debug logs) has
        # no values to read: torch prints it as FakeTensor(..., device=...).
        return _original_str_intern(inp, tensor_contents=tensor_contents)
    # The values come from a CPU copy; prefix and suffixes follow torch's rules.
    with torch.no_grad():
        host = inp.detach().to("cpu")
    prefix = "tensor("
    indent = len(prefix)
    suffixes = [f"device='{inp.device}'"]
    default_dtype = torch.get_default_dtype()
    if host.numel() == 0:
        if host.dim() != 1:
            suffixes.append("size=" + str(tuple(host.shape)))
        if host.dtype != default_dtype:
            suffixes.append("dtype=" + str(host.dtype))
        data = "[]"
    else:
        if not _tensor_str.PRINT_OPTS.edgeitems:
            suffixes.append("size=" + str(tuple(host.shape)))
        default_complex = torch.cdouble if default_dtype == torch.double else torch.cfloat
        if host.dtype not in (default_dtype, default_complex, torch.int64, torch.bool):
            suffixes.append("dtype=" + str(host.dtype))
        data = _tensor_str._tensor_str(host, indent)
    if tensor_contents is not None:
        data = tensor_contents
    if inp.grad_fn is not None:
        name = type(inp.grad_fn).__name__
        if name == "CppFunction":
            name = inp.grad_fn.name().rsplit("::", 1)[-1]
        suffixes.append(f"grad_fn=<{name}>")
    elif inp.requires_grad:
        suffixes.append("requires_grad=True")
    return _tensor_str._add_suffixes(prefix + data, suffixes, indent, force_newline=False)


_original_deepcopy = torch.Tensor.__deepcopy__


def _neuron_deepcopy(self, memo):
    if not _is_neuron(self) or type(self) is not torch.Tensor:
        return _original_deepcopy(self, memo)
    if id(self) in memo:
        return memo[id(self)]
    with torch.no_grad():
        new = self.clone()
    new.requires_grad_(self.requires_grad)
    if self.grad is not None:
        new.grad = self.grad.__deepcopy__(memo)
    memo[id(self)] = new
    return new


_original_copy_ = torch.Tensor.copy_


def _neuron_copy_(self, src, non_blocking=False):
    if _is_neuron(src) and not _is_neuron(self):
        src = src.to(self.device)
    return _original_copy_(self, src, non_blocking)


_original_numpy = torch.Tensor.numpy


def _neuron_numpy(self, *, force=False):
    # A sync point: the values are read back, as .cpu().numpy() would.
    if _is_neuron(self):
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        return self.detach().cpu().numpy()
    return _original_numpy(self, force=force)


_original_data_ptr = torch.Tensor.data_ptr
_original_storage_data_ptr = torch.UntypedStorage.data_ptr


def _virtual_address(storage) -> int:
    # The values have no host address, yet code compares addresses to tell
    # views from copies and shared storages from separate ones (PyTorch's own
    # tests, safetensors' and transformers' tied-weight checks). A neuron
    # storage's address is therefore virtual: its StorageImpl's address spread
    # out (unique while it lives, 2**16 bytes apart at least), 0 when it holds
    # no bytes, as the CPU gives.
    return 0 if storage.nbytes() == 0 else storage._cdata << 16


def _neuron_storage_data_ptr(self):
    if self.device.type == _DEVICE:
        return _virtual_address(self)
    return _original_storage_data_ptr(self)


_original_storage_resize = torch.UntypedStorage.resize_


def _neuron_storage_resize(self, size):
    # PyTorch's own refuses a storage without host bytes ("invalid python
    # storage"); a neuron tensor's storage resizes to or from 0 bytes (FSDP2
    # frees and re-allocates unsharded parameters so), see bind_lazy.cc.
    if self.device.type == _DEVICE:
        _C._resize_neuron_storage(self, int(size))
        return self
    return _original_storage_resize(self, size)


def _neuron_data_ptr(self):
    if self.device.type == _DEVICE:
        base = _virtual_address(self.untyped_storage())
        return base + self.storage_offset() * self.element_size() if base else 0
    return _original_data_ptr(self)


_original_dlpack = torch.Tensor.__dlpack__
_original_dlpack_device = torch.Tensor.__dlpack_device__
_original_to_dlpack = torch.utils.dlpack.to_dlpack
_original_from_dlpack_capsule = torch._C._from_dlpack
_original_asarray = torch.asarray


def _dlpack_device_of(device: torch.device):
    # PyTorch's mapping of a PrivateUse1 device (ATen's DLConvertor.cpp):
    # kDLExtDev, the device's index.
    return torch.utils.dlpack.DLDeviceType.kDLExtDev, device.index if device.index is not None else 0


def _torch_device_of(dl_device) -> torch.device:
    kind, index = int(dl_device[0]), int(dl_device[1])
    if kind == torch.utils.dlpack.DLDeviceType.kDLCPU:
        return torch.device("cpu")
    if kind == torch.utils.dlpack.DLDeviceType.kDLExtDev:
        return torch.device(_DEVICE, index)
    raise BufferError(f"a neuron tensor cannot be exported to DLPack device {tuple(dl_device)}: "
                      "only to the CPU (kDLCPU, a copy) or to neuron (kDLExtDev)")


def _neuron_dlpack(self, *, stream=-1, max_version=None, dl_device=None, copy=None):
    """A neuron tensor's DLPack capsule, as a CUDA tensor's: device kDLExtDev
    (PyTorch's type for PrivateUse1 devices) and the neuron index, the data the
    tensor's device buffer after a sync (lazy/dlpack.h). `dl_device` (kDLCPU,
    0) exports a CPU copy; `copy=True` a copy on neuron."""
    if not _is_neuron(self):
        return _original_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
    if self.requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    if self.is_conj():
        raise BufferError("Can't export tensors with the conjugate bit set")
    if self.layout != torch.strided:
        raise BufferError("Can't export tensors with layout other than torch.strided")
    if stream is not None and type(stream) is not int:
        raise TypeError("stream must be ``int`` or ``none``")
    # Any stream: a neuron device has one in-order queue, and the export waits
    # for the tensor's value on it.
    tensor = self
    if dl_device is not None and tuple(int(x) for x in dl_device) != _dlpack_device_of(self.device):
        target = _torch_device_of(dl_device)
        if copy is False:
            raise BufferError(f"cannot move tensor from {self.device} to {target} without copying. "
                              "Set copy=True is needed.")
        moved = self.to(target)
        if target.type == "cpu":
            return _original_dlpack(moved, max_version=max_version)
        tensor = moved
    elif copy:
        tensor = self.clone()
    versioned = max_version is not None and max_version[0] >= 1
    return _C._neuron_to_dlpack(tensor, versioned)


def _neuron_dlpack_device(self):
    if _is_neuron(self):
        return _dlpack_device_of(self.device)
    return _original_dlpack_device(self)


def _neuron_to_dlpack(tensor, *args, **kwargs):
    if _is_neuron(tensor) and not args and not kwargs:
        return _C._neuron_to_dlpack(tensor, False)
    if _is_neuron(tensor):
        # dl_device= or copy=: __dlpack__'s rules, unversioned.
        return _neuron_dlpack(tensor, *args, **kwargs)
    return _original_to_dlpack(tensor, *args, **kwargs)


def _neuron_from_dlpack_capsule(data):
    """torch._C._from_dlpack, reading a neuron tensor's capsule as a view of
    that tensor: PyTorch's own would wrap the buffer's address in a plain
    PrivateUse1 tensor, outside functionalization and the lazy tensors."""
    tensor = _C._neuron_from_dlpack(data)
    return tensor if tensor is not None else _original_from_dlpack_capsule(data)


def _neuron_asarray(obj, **kwargs):
    # A capsule of a neuron tensor stands for that tensor (as above); asarray's
    # own rules (dtype, device, copy, requires_grad) then apply to it as to any
    # tensor. Only the keywords given are passed on: asarray's defaults differ
    # by input (requires_grad=None keeps a tensor's own).
    tensor = _C._neuron_from_dlpack(obj) if type(obj).__name__ == "PyCapsule" else None
    if tensor is not None:
        obj = tensor
    return _original_asarray(obj, **kwargs)


def _finish_work_before(set_default, current):
    """`set_default` (torch._C's setter of the default dtype or tensor type)
    that first queues what is traced and waits, when the value changes: ops
    traced with torch's default dtype in effect (torch.empty(3), an int tensor
    times 0.5) take it again when their graph runs on the device's queue
    thread, and a change meanwhile (set_default_dtype, the decorators of
    PyTorch's tests, transformers' from_config(torch_dtype=)) would make its
    kernels compute in the new dtype: float64 results of float32 precision."""
    from . import device

    @functools.wraps(set_default)
    def set_default_after_pending_work(value):
        if value is not current() and not device._is_in_bad_fork():
            _C._finish_pending_work()
        set_default(value)

    return set_default_after_pending_work


def _finish_work_before_default_dtype(original):
    return _finish_work_before(original, torch.get_default_dtype)


def _finish_work_before_default_tensor_type(original):
    return _finish_work_before(original, lambda: None)
