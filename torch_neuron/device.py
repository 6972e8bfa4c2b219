"""The ``torch.neuron`` device module (registered by ``import torch_neuron``).

Mirrors ``torch.cuda`` where a counterpart exists: device selection, RNG seeding
and state, synchronization, streams and events, device properties and memory
statistics of the emulated devices.
"""

from __future__ import annotations

import contextlib
import os
import platform
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

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
    """The index of the calling thread's current neuron device."""
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    """Makes ``device`` (an index, "neuron:N" or a torch.device) the calling
    thread's current neuron device."""
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
    """Seeds every device's generator with one non-deterministic number."""
    s = _generator(0).seed()
    for i in range(1, device_count()):
        _generator(i).manual_seed(s)


def initial_seed() -> int:
    """The seed the current device's generator was last seeded with."""
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = None) -> torch.Tensor:
    """The generator state of ``device`` as a ByteTensor (seed and offset)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = None) -> None:
    """Restores a state from :func:`get_rng_state`; random ops already traced
    run first, so they draw from the state they were traced against."""
    _generator(device).set_state(new_state)


def get_rng_state_all() -> List[torch.Tensor]:
    """The generator state of every device, in device order."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: List[torch.Tensor]) -> None:
    """Restores the states of :func:`get_rng_state_all`."""
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
    """Peak of :func:`memory_reserved` since start or the last reset."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    """Starts the peaks (``max_memory_allocated``, ``max_memory_reserved``) anew from the current values."""
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


def mem_get_info(device: _DeviceLike = None) -> Tuple[int, int]:
    """(free, total) bytes of ``device``'s memory, as ``torch.cuda.mem_get_info``.

    With a memory limit (``set_memory_limit``, ``TORCH_NEURON_MEMORY_LIMIT_MB``)
    total is the limit and free what the arena has not reserved of it (no more
    than the host has available); without one, the host's physical and
    available memory, which the emulated device's arena draws on.
    """
    free, total = torch.accelerator.memory.get_memory_info(torch.device("neuron", _index(device)))
    return int(free), int(total)


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    """A printable table of ``device``'s allocator statistics, in the spirit
    of ``torch.cuda.memory_summary``: memory held by tensors and reserved by
    the arena (current and peak), blocks, and the allocator's counts.
    ``abbreviated`` leaves out the counts."""
    idx = _index(device)
    s = memory_stats(idx)
    free, total = mem_get_info(idx)

    def size(n: int) -> str:
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(n) < 1024 or unit == "TiB":
                return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
            n /= 1024
        return str(n)

    rows = [
        ("Allocated memory", size(s["allocated_bytes.all.current"]), size(s["allocated_bytes.all.peak"])),
        ("Reserved memory", size(s["reserved_bytes.all.current"]), size(s["reserved_bytes.all.peak"])),
        ("Active blocks", str(s["active.all.current"]), ""),
        ("Cached blocks", str(s["inactive_split.all.current"]), ""),
    ]
    if not abbreviated:
        rows += [
            ("Allocations", str(s["num_allocs"]), ""),
            ("Frees", str(s["num_frees"]), ""),
            ("Served from cache", str(s["num_cache_hits"]), ""),
            ("Host allocations", str(s["num_host_allocs"]), ""),
            ("Host frees", str(s["num_host_frees"]), ""),
            ("Out-of-memory errors", str(s["num_ooms"]), ""),
        ]
    limit = s["limit_bytes"]
    width = 70
    lines = [
        "=" * width,
        f"  neuron:{idx} memory summary ({get_device_name(idx)})".ljust(width),
        f"  limit {size(limit) if limit else 'none (host memory)'}; "
        f"free {size(free)} of {size(total)}",
        "-" * width,
        f"  {'':<28}{'current':>20}{'peak':>20}",
    ]
    lines += [f"  {name:<28}{cur:>20}{peak:>20}" for name, cur, peak in rows]
    lines.append("=" * width)
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------- properties

class _NeuronDeviceProperties:
    """What ``get_device_properties`` reports of an emulated neuron device."""

    def __init__(self, index: int):
        self.index = index
        self.name = get_device_name(index)
        self.total_memory = mem_get_info(index)[1]
        self.host_cores = os.cpu_count() or 1
        self.emulated = True

    def __repr__(self) -> str:
        return (f"_NeuronDeviceProperties(name='{self.name}', index={self.index}, "
                f"total_memory={self.total_memory // 2**20}MB, host_cores={self.host_cores}, "
                f"emulated={self.emulated})")


def _host_cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def get_device_name(device: _DeviceLike = None) -> str:
    """The device's name: neuron devices are emulated on the host CPU, and say so."""
    _index(device)
    return f"neuron (emulated on {_host_cpu_name()})"


def get_device_properties(device: _DeviceLike = None) -> _NeuronDeviceProperties:
    """Name, memory and host of ``device`` (cf. ``torch.cuda.get_device_properties``)."""
    return _NeuronDeviceProperties(_index(device))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True: bfloat16 tensors are supported (computed in float32 and rounded
    per op, as the CPU's kernels do)."""
    return True


def get_amp_supported_dtype() -> List[torch.dtype]:
    """The dtypes ``torch.autocast("neuron", dtype=...)`` takes: float16 and
    bfloat16 (the autocast op lists are CUDA's, csrc/aten/autocast.cc)."""
    return [torch.float16, torch.bfloat16]


# ----------------------------------------------------------------------- streams

class Stream(torch.Stream):
    """A neuron stream. A device has one in-order execution queue, which
    mark_step and syncs feed; every stream of a device is that queue (streams
    of one device compare equal), so work never runs out of order. ``query()``
    says whether the queue has run everything given to it, ``synchronize()``
    waits for it, and events recorded on it mark its position."""

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs):
        return super().__new__(cls, device=torch.device("neuron", _index(device)), priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:  # noqa: N802
    """A ``torch.Event`` on the neuron device (cf. ``torch.cuda.Event``): a
    marker in the device's queue. ``record()`` places it after the graphs
    queued so far (ops traced but not yet synced are not queued yet: record
    after ``torch_neuron.mark_step()`` to time a step); ``query()``,
    ``synchronize()`` and ``wait()`` follow it; ``elapsed_time(end)`` gives the
    milliseconds between two completed timing events. A function, not a class:
    torch.Event's methods accept only torch.Event objects."""
    if interprocess:
        raise NotImplementedError("neuron events cannot be shared between processes")
    return torch.Event(device="neuron", enable_timing=enable_timing, blocking=blocking)


def current_stream(device: _DeviceLike = None) -> Stream:
    """The stream ops on ``device`` go to: its execution queue."""
    return Stream(device)


def default_stream(device: _DeviceLike = None) -> Stream:
    """The default stream of ``device``; the same queue as :func:`current_stream`."""
    return Stream(device)


def set_stream(stream: torch.Stream) -> None:
    """Makes ``stream`` current (a no-op in effect: a device has one queue)."""
    if stream is not None:
        torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: Optional[torch.Stream]) -> Iterator[None]:
    """Context manager that selects ``stream`` (cf. ``torch.cuda.stream``)."""
    if stream is None:
        yield
        return
    previous = torch.accelerator.current_stream(stream.device)
    torch.accelerator.set_stream(stream)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)


StreamContext = stream
