"""torch_neuron: a lazy-tensor device for PyTorch, ``torch.device("neuron")``.

Importing this package registers the ``neuron`` device with PyTorch:

    import torch, torch_neuron
    x = torch.ones(3, device="neuron")
    model.to("neuron"); ...; torch_neuron.mark_step()

The device is emulated on the host (see README.md). Until the lazy core lands,
every compute op on neuron tensors runs through the CPU fallback, op by op, and
is counted in :mod:`torch_neuron.metrics`.
"""

import torch

from .version import __version__, TORCH_VERSION

if torch.__version__.split("+")[0] != TORCH_VERSION:
    raise ImportError(
        f"torch_neuron {__version__} is built for torch=={TORCH_VERSION}, "
        f"but torch {torch.__version__} is installed"
    )

from . import _C  # noqa: E402  (loads libtorch_neuron.so: allocator, guard, hooks, kernels)

_C._init()  # reads TORCH_NEURON_* once; ValueError names a malformed variable

from . import config, device, metrics  # noqa: E402


def _register_backend() -> None:
    name = torch._C._get_privateuse1_backend_name()
    if name == "neuron":
        return  # already registered (module reloaded)
    if name != "privateuseone":
        raise ImportError(
            f"cannot register the neuron device: PrivateUse1 is already taken by '{name}'"
        )
    torch.utils.rename_privateuse1_backend("neuron")
    torch._register_device_module("neuron", device)
    # Tensor.neuron(), Tensor.is_neuron, Module.neuron(), storage methods, and the
    # location tags used by torch.save / torch.load.
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )


_register_backend()


def mark_step() -> None:
    """Ends a step: runs everything pending on every neuron device.

    Call once per training iteration, after ``optimizer.step()``. Until the lazy
    core lands ops execute as they are issued, so this waits for the devices and
    counts the step.
    """
    _C._metrics_increment("mark_step.count", 1)
    for index in range(device.device_count()):
        device.synchronize(index)


def sync(tensors=None) -> None:
    """Makes ``tensors`` (or everything pending, if None) materialized on device."""
    mark_step()


__all__ = ["mark_step", "sync", "config", "device", "metrics", "__version__"]
