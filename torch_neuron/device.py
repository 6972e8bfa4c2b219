"""The ``torch.neuron`` device module (registered by ``import torch_neuron``).

Mirrors ``torch.cuda`` where a counterpart exists: device selection, RNG seeding
and state, synchronization and memory statistics of the emulated devices.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Optional, Union

import torch

from . import _C

_DeviceLike = Union[int, str, torch.device, None]


def _index(device: _DeviceLike = None, optional: bool = True) -> int:
    """Resolves an int / "neuron:1" / torch.device / None to a device index."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got '{device}'")
        if device.index is None:
            return current_device()
        device = device.index
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"expected a device index, a 'neuron:N' string or a torch.device, got {device!r}")
    _C._check_device(device)
    return device


def is_available() -> bool:
    """True: emulated neuron devices are always present."""
    return _C._device_count() > 0


def is_initialized() -> bool:
    """True, except in a child forked after the runtime had started its threads
    (see :func:`_is_in_bad_fork`), where the device cannot be used."""
    return not _is_in_bad_fork()


def _lazy_init() -> None:
    """Raises in a bad fork (as ``torch.cuda._lazy_init`` does); there is
    nothing else to initialize lazily."""
    if _is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize neuron in forked subprocess. To use neuron with "
            "multiprocessing, use the 'spawn' start method")


def _is_in_bad_fork() -> bool:
    """True in a process forked after the parent's neuron runtime had started
    its threads (device queues, kernel team). Device work raises there, and
    ``torch.manual_seed`` leaves the neuron generators alone, as for CUDA: a
    forked DataLoader worker that only loads CPU data is unaffected."""
    return _C._in_bad_fork()


def device_count() -> int:
    """Number of emulated neuron devices (``TORCH_NEURON_NUM_DEVICES``, default 1)."""
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    _C._set_device(_index(device))


class device:  # noqa: N801  (same name and behaviour as torch.cuda.device)
    """Context manager that makes ``device`` the current neuron device."""

    def __init__(self, device: _DeviceLike):
        self.idx = _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        _C._set_device(self.idx)
        return self

    def __exit__(self, *exc):
        _C._set_device(self.prev_idx)
        return False


def synchronize(device: _DeviceLike = None) -> None:
    """Waits for the graphs queued on ``device`` to finish and raises the first
    execution error. Ops traced but not yet part of a graph are not started:
    that is what ``torch_neuron.mark_step()`` does."""
    _C._wait_device(_index(device))


# ----------------------------------------------------------------------------- RNG

def _generator(device: _DeviceLike = None) -> torch.Generator:
    return _C._default_generator(_index(device))


def __getattr__(name: str) -> Any:
    if name == "default_generators":
        return tuple(_C._default_generator(i) for i in range(device_count()))
    raise AttributeError(f"module 'torch.neuron' has no attribute '{name}'")


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds every neuron device's generator (``torch.manual_seed`` calls this)."""
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    """Seeds the current device's generator with a non-deterministic number."""
    _generator().seed()


def seed_all() -> None:
    s = _generator(0).seed()
    for i in range(1, device_count()):
        _generator(i).manual_seed(s)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = None) -> torch.Tensor:
    """The generator state of ``device`` as a ByteTensor (seed and offset)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = None) -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> List[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: List[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# -------------------------------------------------------------------------- memory

def memory_stats(device: _DeviceLike = None) -> Dict[str, int]:
    """Allocator statistics of ``device``; keys follow ``torch.cuda.memory_stats``."""
    return dict(sorted(_C._memory_stats(_index(device)).items()))


def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes of device memory held by tensors now."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last reset."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: _DeviceLike = None) -> int:
    """Bytes taken from the host: allocated plus cached for reuse."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def empty_cache() -> None:
    """Returns cached, unused device memory of every device to the host."""
    _C._empty_cache()


def get_memory_limit(device: _DeviceLike = None) -> int:
    """The device's memory limit in bytes (0 = unlimited)."""
    return memory_stats(device)["limit_bytes"]


def set_memory_limit(limit_bytes: int, device: _DeviceLike = None) -> None:
    """Sets the emulated device's memory limit in bytes (0 = unlimited).

    The start-up value comes from ``TORCH_NEURON_MEMORY_LIMIT_MB``. An allocation
    past the limit raises ``torch.OutOfMemoryError``.
    """
    _C._set_memory_limit(_index(device), int(limit_bytes))


@contextlib.contextmanager
def memory_limit(limit_bytes: int, device: _DeviceLike = None) -> Iterator[None]:
    """Temporarily sets the device memory limit (tests, experiments)."""
    idx = _index(device)
    previous = get_memory_limit(idx)
    set_memory_limit(limit_bytes, idx)
    try:
        yield
    finally:
        set_memory_limit(previous, idx)
