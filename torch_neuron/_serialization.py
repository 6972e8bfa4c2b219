"""Checkpoints: torch.save and torch.load of neuron tensors, as for CUDA's.

Saving. A neuron tensor has no host storage to pickle, so it is saved the way
PyTorch saves tensors of storage-less backends: its values as a CPU tensor
and its device, rebuilt by ``torch._utils._rebuild_device_tensor_from_cpu_tensor``.
That is a torch function, so a neuron checkpoint loads where torch_neuron is
not installed (with ``map_location="cpu"``), under ``weights_only=True`` too.
Files written by torch_neuron 0.1 name ``_rebuild_neuron_tensor`` instead;
they still load here.

Loading. Every form of ``map_location`` works, as for CUDA:

- a CPU (or any) checkpoint loads onto neuron with ``map_location="neuron"``,
  ``"neuron:1"``, ``torch.device("neuron", 1)``, a dict such as
  ``{"cpu": "neuron:0"}``, or a callable returning ``storage.neuron()``;
  tensors that shared a storage in the file share it on neuron (a tied
  embedding and head loaded with ``assign=True`` stay aliased, as on the CPU)
  when they view it the same way; other views of one storage load as
  separate tensors with the same values;
- a neuron checkpoint loads onto the CPU, another neuron device, or through
  a callable ``map_location``, which sees each tensor's saved device.

How. A storage that ``map_location`` sends to neuron stays a CPU storage,
marked with its device (``_restore_neuron``), until the tensor over it is
rebuilt; the rebuilt CPU tensor then moves to that device once per storage.
"""

from __future__ import annotations


import torch
import torch._utils as _utils

_DEVICE = "neuron"
_MARK = "_torch_neuron_restore"  # attribute on a restored storage: (device, {view: tensor})


def _is_neuron(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == _DEVICE


# ---------------------------------------------------------------------------- save

_original_reduce_ex_internal = torch.Tensor._reduce_ex_internal


def _neuron_reduce_ex_internal(self, proto):
    if not _is_neuron(self):
        return _original_reduce_ex_internal(self, proto)
    if torch.serialization._serialization_tls.skip_data:
        raise RuntimeError("Cannot serialize neuron tensors under the skip_data context manager")
    host = self.detach().cpu()
    return (_utils._rebuild_device_tensor_from_cpu_tensor,
            (host, self.dtype, str(self.device), self.requires_grad))


def _rebuild_neuron_tensor(data: bytes, dtype, shape, device: str, requires_grad: bool):
    """Rebuilds a tensor of a checkpoint written by torch_neuron 0.1."""
    host = torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty(0, dtype=dtype)
    return _rebuild_device_tensor_from_cpu_tensor(host.reshape(shape), dtype, device, requires_grad)


# ---------------------------------------------------------------------------- load

def _neuron_deserialize(storage, location: str):
    """torch.serialization's restore step for a storage bound for `location`
    ("neuron", "neuron:1"): the storage stays on the host, marked, until the
    tensor over it is rebuilt (a neuron tensor is not a view of a storage)."""
    if not (location == _DEVICE or location.startswith(_DEVICE + ":")):
        return None
    device = torch.serialization._validate_device(location, _DEVICE)
    host = storage if storage.device.type == "cpu" else storage.cpu()
    setattr(host, _MARK, (device, {}))
    return host


def _neuron_tag(storage):
    return str(storage.device) if storage.device.type == _DEVICE else None


_original_rebuild_tensor_v2 = _utils._rebuild_tensor_v2


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       metadata=None):
    untyped = getattr(storage, "_untyped_storage", storage)
    if isinstance(untyped, torch.UntypedStorage) and untyped.device.type == _DEVICE:
        # A callable map_location returned storage.neuron(): read it back and
        # rebuild as for a marked host storage.
        device = untyped.device
        untyped = untyped.cpu()
        setattr(untyped, _MARK, (device, {}))
        storage = torch.storage.TypedStorage(wrap_storage=untyped, dtype=storage.dtype, _internal=True)
    mark = getattr(untyped, _MARK, None)
    tensor = _original_rebuild_tensor_v2(storage, storage_offset, size, stride, False,
                                         backward_hooks, metadata)
    if mark is not None:
        tensor = _to_device_sharing(tensor, untyped, *mark)
    tensor.requires_grad = requires_grad
    return tensor


def _to_device_sharing(host: torch.Tensor, untyped, device, moved: dict) -> torch.Tensor:
    """`host` (a view of a marked storage) on `device`; tensors that view the
    storage the same way become aliases of one neuron tensor."""
    key = (host.dtype, host.storage_offset(), tuple(host.shape), host.stride())
    first = moved.get(key)
    with torch.no_grad():
        if first is not None:
            return first.view(first.shape)  # an alias, as the CPU tensors were
        tensor = host.to(device)
    moved[key] = tensor
    return tensor


_original_rebuild_device_tensor_from_cpu_tensor = _utils._rebuild_device_tensor_from_cpu_tensor


def _rebuild_device_tensor_from_cpu_tensor(data, dtype, device, requires_grad):
    """torch's rebuild of a storage-less backend's tensor, which refuses a
    callable map_location; here the callable is asked where the tensor's
    saved device maps to, as for a storage saved on that device."""
    map_location = torch.serialization._serialization_tls.map_location
    if map_location is None or isinstance(map_location, (dict, str, torch.device)):
        return _original_rebuild_device_tensor_from_cpu_tensor(data, dtype, device, requires_grad)
    if _is_neuron(data):
        target = data.device  # the callable already sent the values' storage to neuron
    else:
        result = map_location(data.untyped_storage(), device)
        target = device if result is None else result.device
        if getattr(result, _MARK, None) is not None:
            target = getattr(result, _MARK)[0]
    tensor = data.to(dtype=dtype, device=target)
    tensor.requires_grad = requires_grad
    return tensor


def _storage_neuron(self, device=None, non_blocking=False):
    """``UntypedStorage.neuron()``: meaningful only inside torch.load, as a
    callable map_location's answer (``lambda storage, loc: storage.neuron(1)``).
    Neuron tensors are not views of storages, so the storage stays on the host,
    marked for the tensor rebuilt over it."""
    if torch.serialization._serialization_tls.map_location is None:
        raise RuntimeError(
            "neuron tensors have no storages: move tensors with tensor.to('neuron'), and load "
            "checkpoints onto neuron with torch.load(..., map_location='neuron')")
    if device is None:
        device = torch.neuron.current_device()
    location = str(device) if isinstance(device, torch.device) else f"{_DEVICE}:{int(device)}"
    return _neuron_deserialize(self, location)


def _rebuild_functions_changed() -> None:
    # The weights_only unpickler caches its allowed globals: drop the cache so
    # it picks the rebuild functions installed here.
    allowed = getattr(torch._weights_only_unpickler, "_get_allowed_globals", None)
    if allowed is not None and hasattr(allowed, "cache_clear"):
        allowed.cache_clear()


def _named_as_torch_utils(function):
    # Pickles name functions by module and name: the replacement keeps torch's,
    # so files saved here name torch._utils (and load without torch_neuron).
    function.__module__ = _utils.__name__
    function.__qualname__ = function.__name__
    return function


_named_as_torch_utils(_rebuild_tensor_v2)
_named_as_torch_utils(_rebuild_device_tensor_from_cpu_tensor)


def install() -> None:
    """After _patches.install() (which replaces the pickling and rebuild
    functions): neuron's own package in torch.serialization."""
    # Before PyTorch's own PrivateUse1 entry (23), which would make a neuron
    # storage that no tensor can be built over.
    torch.serialization.register_package(19, _neuron_tag, _neuron_deserialize)
    torch.serialization.add_safe_globals([_rebuild_neuron_tensor])
    _rebuild_functions_changed()
