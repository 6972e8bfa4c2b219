"""torch_neuron: a lazy-tensor device for PyTorch, ``torch.device("neuron")``.

Importing this package registers the ``neuron`` device with PyTorch; so does
``import torch`` alone, through PyTorch's device-backend autoloading (the
package's ``torch.backends`` entry point; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns
it off):

    import torch, torch_neuron
    x = torch.ones(3, device="neuron")
    model.to("neuron"); ...; torch_neuron.mark_step()

Ops on neuron tensors are traced, not run: at a sync point (mark_step, .cpu(),
.item(), printing) the pending graph is canonicalized, hashed, compiled once and
run from the cache on every later step. TORCH_NEURON_MODE=eager (or set_mode)
runs each op at once through the same path. The device is emulated on the host
(see README.md).
"""


def _autoload() -> None:
    """The ``torch.backends`` entry point: ``import torch`` imports this package
    (PyTorch's device-backend autoloading), whose import registers the device.
    Defined before ``import torch``: when torch_neuron is imported first, torch's
    autoloading finds it half-initialized and calls this."""


import atexit  # noqa: E402
import contextlib  # noqa: E402

import torch

from .version import __version__, TORCH_VERSION

if torch.__version__.split("+")[0] != TORCH_VERSION:
    raise ImportError(
        f"torch_neuron {__version__} is built for torch=={TORCH_VERSION}, "
        f"but torch {torch.__version__} is installed"
    )

from . import _C  # noqa: E402  (loads libtorch_neuron.so: allocator, guard, hooks, kernels)

_C._init()  # reads TORCH_NEURON_* once; ValueError names a malformed variable

from . import _custom_ops, _patches, _dynamo_hooks, _fake_tensors, _lazy_dynamo, _library_detection, _optimizer_steps, _module_support, _serialization, _tensor_support, config, debug, device, distributed, metrics, profiler, service  # noqa: E402
from .graphs import NeuronGraph, graph  # noqa: E402


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


def _run_backward_on_the_caller() -> None:
    # PyTorch's autograd engine runs a device's backward nodes on a thread of
    # its own per device (for CUDA streams). A neuron backward pass only traces
    # ops, and the caller waits for it anyway: the two hand-offs cost about a
    # quarter of a small model's training step (MLP: 0.19 of 0.76 ms). Setting
    # is per thread; this one is the importing thread's.
    if not config.current()["autograd_thread"]:
        torch.autograd.set_multithreading_enabled(False)


_register_backend()
config._warn_unknown_variables()
_run_backward_on_the_caller()
_C._register_tracer()
_C._register_functionalize_overrides()
_C._register_out_checks()
_patches.install()  # every torch function replaced, each checked first (_patches.py)
_C._register_cpu_parity()  # the CPU's errors at the call (csrc/lazy/cpu_parity.h)
_custom_ops.install()
_lazy_dynamo.install()
_fake_tensors.install()  # torch.compile takes neuron tensors (fake tensors as XLA's)
_dynamo_hooks.install()  # when Dynamo is imported: skip our files, neuron's device interface
_serialization.install()
service._install_launcher()
debug._install_source_locations()
distributed.install()
_optimizer_steps.install()  # an optimizer's step ends a step (TORCH_NEURON_STEP_ON_OPTIMIZER)
_library_detection.install()  # `torch_neuronx` for transformers/accelerate, never shadowing AWS's

if config.current()["shape_registry"]:
    # TORCH_NEURON_SHAPE_REGISTRY: record from here on. Imported only then (and
    # by `import torch_neuron.registry`): with the package imported in every
    # process, a test's forked child that exits through atexit hung under pytest
    # (tests/python/test_fork_safety.py; cause not found yet).
    from . import registry  # noqa: E402

    registry._start_from_config()


@atexit.register
def _drain_devices() -> None:
    # Let queued graph executions finish before the interpreter tears down. A
    # forked child has no queue threads to wait for (device.py, bad fork).
    if device._is_in_bad_fork():
        return
    # Compiles nobody will use are dropped; those already running end first
    # (a compile thread must not outlive the interpreter's teardown), and a
    # tier-1 program that ends is kept in the disk cache for the next run.
    _C._eager_drop_queued_compiles()
    _C._drop_queued_background_compiles()
    _C._eager_wait_compiles()
    _C._wait_background_compiles()
    for index in range(_C._device_count()):
        try:
            _C._wait_device(index)
        except Exception:  # an execution error nobody synced on: nothing to report to
            pass


def mark_step(device=None) -> None:
    """Ends a step: compiles (or finds in the cache) and queues the graph of
    everything pending on the neuron devices, then returns.

    Call once per training iteration, after ``optimizer.step()``. The step runs
    while Python traces the next one; reading a result (``.item()``, ``.cpu()``,
    printing) waits for it. An error of a queued step is raised at the next sync.
    ``device`` limits the step to one device (index, "neuron:N" or torch.device).
    """
    _C._mark_step(-1 if device is None else torch.neuron._index(device))


def sync(tensors=None) -> None:
    """Materializes ``tensors`` (a tensor or a list of them), or everything
    pending when None, without waiting for the execution to finish."""
    if tensors is None:
        mark_step()
        return
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    _C._sync(list(tensors))


def wait_device_ops(device=None) -> None:
    """Blocks until every queued graph on ``device`` (default: all) has run."""
    indices = range(_C._device_count()) if device is None else [torch.neuron._index(device)]
    for index in indices:
        _C._wait_device(index)


def get_mode() -> str:
    """The execution mode: "lazy" (default) or "eager" (TORCH_NEURON_MODE)."""
    return _C._get_mode()


def set_mode(mode: str) -> None:
    """Switches between "lazy" and "eager" execution; pending work is synced first."""
    if mode not in ("lazy", "eager"):
        raise ValueError(f"mode must be 'lazy' or 'eager', got {mode!r}")
    mark_step()
    _C._set_mode(mode)


@contextlib.contextmanager
def mode(new_mode: str):
    """Runs the block in ``new_mode`` ("lazy" or "eager"), then restores the mode."""
    previous = get_mode()
    set_mode(new_mode)
    try:
        yield
    finally:
        set_mode(previous)


__all__ = [
    "mark_step", "sync", "wait_device_ops", "get_mode", "set_mode", "mode",
    "NeuronGraph", "graph", "config", "debug", "device", "metrics", "__version__",
]
