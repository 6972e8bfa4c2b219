"""Python-level support for storage-less neuron tensors.

Neuron tensors are lazy: their data is an IR value or a device buffer, and what
the user holds is PyTorch's FunctionalTensorWrapper around it. PyTorch handles
such tensors by device name for XLA and Lazy ("print via the CPU", "pickle via
the CPU") but decides for PrivateUse1 devices by ``torch._C._has_storage``,
which is true for a functional wrapper. These hooks give neuron tensors the
treatment PyTorch gives storage-less backends:

- ``repr``/``str`` prints the values (read back from the device) with the
  device suffix, exactly as a CPU tensor would print them;
- ``torch.save`` pickles a neuron tensor as its bytes, dtype, shape and device;
  ``_rebuild_neuron_tensor`` (allowed under ``weights_only=True``) restores it
  honouring ``map_location`` (bytes rather than a CPU tensor, whose storage a
  string ``map_location`` would move to the device before the rebuild);
- ``copy.deepcopy`` clones on the device;
- ``cpu_tensor.copy_(neuron_tensor)`` reads the source back first
  (functionalization refuses to write a plain tensor from a functional one);
- ``neuron_tensor.numpy()`` is a sync point returning the values read back
  (like ``.cpu().numpy()``; a tensor requiring grad still needs ``.detach()``
  or ``force=True``, as on the CPU).
"""

from __future__ import annotations

import ctypes

import torch
import torch._tensor_str as _tensor_str

_DEVICE = "neuron"


def _is_neuron(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == _DEVICE


_original_str_intern = _tensor_str._str_intern


def _neuron_str_intern(inp, *, tensor_contents=None):
    if not _is_neuron(inp) or torch._C._functorch.is_functorch_wrapped_tensor(inp):
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
        if host.dtype not in (default_dtype, torch.int64, torch.bool):
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


def _rebuild_neuron_tensor(data: bytes, dtype, shape, device: str, requires_grad: bool):
    """Rebuilds a tensor saved by torch.save from a neuron tensor."""
    target = torch._utils._get_restore_location(device)
    host = torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty(0, dtype=dtype)
    tensor = host.reshape(shape).to(target)
    tensor.requires_grad = requires_grad
    return tensor


_original_reduce_ex_internal = torch.Tensor._reduce_ex_internal


def _neuron_reduce_ex_internal(self, proto):
    if not _is_neuron(self):
        return _original_reduce_ex_internal(self, proto)
    if torch.serialization._serialization_tls.skip_data:
        raise RuntimeError("Cannot serialize neuron tensors under the skip_data context manager")
    host = self.detach().cpu().contiguous()
    data = ctypes.string_at(host.data_ptr(), host.nbytes) if host.numel() else b""
    return (_rebuild_neuron_tensor, (data, self.dtype, tuple(self.shape), str(self.device), self.requires_grad))


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


def install() -> None:
    torch.Tensor.numpy = _neuron_numpy
    torch.serialization.add_safe_globals([_rebuild_neuron_tensor])
    torch.Tensor.copy_ = _neuron_copy_
    _tensor_str._str_intern = _neuron_str_intern
    torch.Tensor._reduce_ex_internal = _neuron_reduce_ex_internal
    torch.Tensor.__deepcopy__ = _neuron_deepcopy
