"""Shared set-up of the torch_neuron Python tests.

Two emulated devices by default, so the multi-device tests run; the variable must
be set before anything imports torch_neuron, because the device count is read once
at import.
"""

import os

os.environ.setdefault("TORCH_NEURON_NUM_DEVICES", "2")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_neuron  # noqa: E402


@pytest.fixture
def metrics():
    """torch_neuron.metrics with every counter zeroed, for exact deltas."""
    torch_neuron.metrics.reset()
    yield torch_neuron.metrics
    torch_neuron.metrics.reset()


@pytest.fixture
def two_devices():
    if torch.neuron.device_count() < 2:
        pytest.skip("needs TORCH_NEURON_NUM_DEVICES >= 2")


@pytest.fixture(autouse=True)
def _restore_device_state():
    """A test that changes the current device or a memory limit does not leak it."""
    limits = [torch.neuron.get_memory_limit(i) for i in range(torch.neuron.device_count())]
    yield
    torch.neuron.set_device(0)
    for i, limit in enumerate(limits):
        torch.neuron.set_memory_limit(limit, i)
