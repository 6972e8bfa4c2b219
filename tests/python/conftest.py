"""Shared set-up of the torch_neuron Python tests.

Two emulated devices by default, so the multi-device tests run, and a fresh
compile cache directory per session; the variables must be set before anything
imports torch_neuron, because the configuration is read once at import.

Neuron ops are lazy: a sync queues a graph that runs on the device's own thread.
Every test therefore ends by waiting for its queued graphs, so no execution (or
its counters, or an execution error) spills into the next test.
"""

import atexit
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TORCH_NEURON_NUM_DEVICES", "2")
# Models are built from configs: nothing may reach for the Hugging Face hub.
os.environ["HF_HUB_OFFLINE"] = "1"
# A compile cache of this test session only (even if the caller set one):
# compile counts must not depend on what earlier runs left on disk.
_SESSION_CACHE = tempfile.mkdtemp(prefix="torch_neuron_test_cache_")
os.environ["TORCH_NEURON_CACHE_DIR"] = _SESSION_CACHE
atexit.register(shutil.rmtree, _SESSION_CACHE, ignore_errors=True)
# Graphs compile at tier 1 before they first run, so compile and cache counts
# are exact and do not depend on when a background compile ends (child
# processes inherit this). Tiered compilation's own tests
# (test_tiered_compile.py) and the zoo subset turn it on; `make test-tiered`
# runs the training tests with it on.
os.environ.setdefault("TORCH_NEURON_TIERED_COMPILE", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_neuron  # noqa: E402


@pytest.fixture(autouse=True)
def _registry_tag(request):
    """While the shape registry records (TORCH_NEURON_SHAPE_REGISTRY), each test's
    ops are tagged with the test's name (tests/registry/record.py)."""
    registry = sys.modules.get("torch_neuron.registry")  # imported only when recording
    if registry is not None and registry.recording():
        registry.set_tag(f"tests/python/{request.node.nodeid.split('/')[-1]}")
    yield


@pytest.fixture
def metrics():
    """torch_neuron.metrics with every counter zeroed, for exact deltas. Graphs
    queued before the test have run first, so their executions are not counted."""
    torch_neuron.wait_device_ops()
    torch_neuron.metrics.reset()
    yield torch_neuron.metrics
    torch_neuron.metrics.reset()


@pytest.fixture
def two_devices():
    if torch.neuron.device_count() < 2:
        pytest.skip("needs TORCH_NEURON_NUM_DEVICES >= 2")


@pytest.fixture(autouse=True)
def _restore_device_state():
    """A test that changes the current device or a memory limit does not leak it,
    nor queued work: an execution error nobody synced on fails the test that
    caused it, in its teardown."""
    limits = [torch.neuron.get_memory_limit(i) for i in range(torch.neuron.device_count())]
    yield
    try:
        torch_neuron.wait_device_ops()
    finally:
        torch.neuron.set_device(0)
        for i, limit in enumerate(limits):
            torch.neuron.set_memory_limit(limit, i)


@pytest.fixture
def fresh_dynamo():
    """Dynamo reset before and after a torch.compile test, which must not have
    had AOTAutograd fail on a graph: Dynamo then breaks the graph and runs it
    uncompiled, which gives the right values but not what the test checks."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield
    assert counters["aot_autograd"]["not_ok"] == 0
    torch._dynamo.reset()
