"""What Dynamo needs to know of torch_neuron, told when Dynamo is imported.

* Its files are the backend's, not user code (``trace_rules.add``), as torch's
  own are: torch_neuron's Python kernels (the CPU-style checks of its Meta
  kernels, the RNN cells, ...) run from C++ when code between graphs (a graph
  break, DDP's hooks) runs ops on neuron tensors, and Dynamo, which compiles
  every Python frame started there, must leave them alone: their fake-tensor
  tracing would fail, and they are kernels, not code to capture.
* The device interface for "neuron" (torch._dynamo.device_interface).

Dynamo asks a device's interface for its streams, events, current device and
properties: inside a compiled region, ``torch.neuron.current_stream()``,
``torch.neuron.stream(s)`` and ``torch.neuron.Event`` are then values Dynamo
understands, as CUDA's are, instead of graph breaks; and code that looks the
interface up by device type (``get_interface_for_device("neuron")``) finds one.

Both are told when the Dynamo module they go to is first imported, not at
``import torch_neuron``: importing Dynamo costs seconds, and issue 23 keeps it
off the first traced op. ``install()`` puts an import hook in front of
``sys.meta_path`` that runs the real import of those modules and then tells
them; a module already imported is told at once.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

import torch

_INTERFACES = "torch._dynamo.device_interface"
_TRACE_RULES = "torch._dynamo.trace_rules"


def _interface_class(base: type) -> type:
    neuron = torch.neuron

    class NeuronInterface(base):
        """torch.neuron's calls, as Dynamo names them."""

        device = neuron.device
        Event = neuron.Event
        Stream = neuron.Stream

        class Worker:
            # Asked from compile workers, which must not touch the device.
            @staticmethod
            def set_device(device: int) -> None:
                neuron.set_device(device)

            @staticmethod
            def current_device() -> int:
                return neuron.current_device()

            @staticmethod
            def get_device_properties(device: Any = None) -> Any:
                return neuron.get_device_properties(device)

        current_device = staticmethod(neuron.current_device)
        set_device = staticmethod(neuron.set_device)
        device_count = staticmethod(neuron.device_count)
        is_available = staticmethod(neuron.is_available)
        stream = staticmethod(neuron.stream)
        current_stream = staticmethod(neuron.current_stream)
        set_stream = staticmethod(neuron.set_stream)
        synchronize = staticmethod(neuron.synchronize)
        get_device_properties = staticmethod(neuron.get_device_properties)
        memory_allocated = staticmethod(neuron.memory_allocated)

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            previous = neuron.current_device()
            if device >= 0 and device != previous:
                neuron.set_device(device)
            return previous

        exchange_device = maybe_exchange_device

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            # One in-order queue per device: its default stream, id 0.
            return 0

        @staticmethod
        def get_compute_capability(device: Any = None) -> str:
            return ""

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return neuron.is_bf16_supported()

    return NeuronInterface


def _register_interface(module: Any) -> None:
    """Registers "neuron" (and "neuron:N") with a loaded device_interface module."""
    interface = _interface_class(module.DeviceInterface)
    module.register_interface_for_device("neuron", interface)
    for index in range(torch.neuron.device_count()):
        module.register_interface_for_device(f"neuron:{index}", interface)


def _skip_package(module: Any) -> None:
    """Dynamo skips frames of torch_neuron's files (a loaded trace_rules module)."""
    module.add("torch_neuron")


_TELL = {_INTERFACES: _register_interface, _TRACE_RULES: _skip_package}


class _TellAfterImport(importlib.abc.MetaPathFinder):
    """Finds the modules of _TELL as the path finder does, and tells each once
    it has run."""

    def find_spec(self, name, path, target=None):
        tell = _TELL.get(name)
        if tell is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            tell(module)

        loader.exec_module = exec_module
        return spec


def install() -> None:
    for name, tell in _TELL.items():
        if name in sys.modules:
            tell(sys.modules[name])
    if not all(name in sys.modules for name in _TELL) and not any(
            isinstance(f, _TellAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _TellAfterImport())
