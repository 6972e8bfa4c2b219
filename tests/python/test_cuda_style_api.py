"""What CUDA users reach for in torch.neuron and torch.accelerator: streams
and events that follow the device's queue, memory information and summaries,
device names, properties and capabilities. Each answer is checked against the
device's own state (queued work, arena statistics), not just called."""

import pytest
import torch

import torch_neuron


def queue_long_graph(device="neuron"):
    """Queues a graph that runs for a while on `device`'s queue; returns its result."""
    w = torch.randn(384, 384, device=device) / 20
    for _ in range(40):
        w = torch.tanh(w @ w + 0.1)
    torch_neuron.mark_step()
    return w


def test_a_stream_is_the_devices_queue():
    s = torch.neuron.Stream()
    assert s == torch.neuron.current_stream() == torch.neuron.default_stream()
    assert s == torch.accelerator.current_stream()
    assert s.device == torch.device("neuron:0")
    queue_long_graph()
    assert not s.query()  # the graph is still running
    s.synchronize()
    assert s.query()
    with torch.neuron.stream(s):
        assert torch.accelerator.current_stream() == s


def test_events_mark_the_queue_and_time_it():
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    assert start.query()  # never recorded
    start.record()
    result = queue_long_graph()
    end.record()
    assert not end.query()  # behind the graph
    end.synchronize()
    assert end.query() and start.query()
    assert result.cpu().isfinite().all()  # nothing left to wait for
    elapsed = start.elapsed_time(end)
    assert elapsed > 0


def test_elapsed_time_needs_recorded_events():
    a, b = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    a.record()
    with pytest.raises(ValueError, match="Both events must be recorded"):  # PyTorch's check
        a.elapsed_time(b)


def test_a_stream_waits_for_another_devices_event(two_devices):
    # neuron:1's queue, told to wait for an event behind a long graph on
    # neuron:0, does not reach its own marker before that event.
    queue_long_graph("neuron:0")
    on_zero = torch.Event(device="neuron:0")
    on_zero.record(torch.neuron.Stream(0))
    one = torch.neuron.Stream(1)
    one.wait_event(on_zero)
    after = torch.Event(device="neuron:1")
    after.record(one)
    after.synchronize()
    assert on_zero.query()


def test_memory_information_follows_the_arena():
    torch.neuron.empty_cache()
    x = torch.ones(256, 1024, device="neuron") * 2
    torch_neuron.mark_step()
    torch.neuron.synchronize()
    allocated = torch.neuron.memory_allocated()
    assert allocated >= x.numel() * 4
    assert torch.accelerator.memory.memory_allocated() == allocated
    assert torch.accelerator.memory.memory_stats()["allocated_bytes.all.current"] == allocated
    with torch.neuron.memory_limit(64 << 20):
        free, total = torch.neuron.mem_get_info()
        assert total == 64 << 20
        assert free == total - torch.neuron.memory_reserved()
    free, total = torch.neuron.mem_get_info()
    assert 0 < free <= total  # no limit: the host's memory
    summary = torch.neuron.memory_summary()
    assert "neuron:0 memory summary" in summary
    kib = f"{allocated / 1024:.2f} KiB" if allocated < 2**20 else f"{allocated / 2**20:.2f} MiB"
    assert kib in summary
    assert "Allocations" not in torch.neuron.memory_summary(abbreviated=True)
    torch.accelerator.memory.empty_cache()
    torch.accelerator.memory.empty_host_cache()  # the pinned allocator is a HostAllocator
    del x


def test_device_name_properties_and_capabilities():
    name = torch.neuron.get_device_name()
    assert name.startswith("neuron (emulated on ")
    props = torch.neuron.get_device_properties(0)
    assert props.name == name and props.total_memory == torch.neuron.mem_get_info(0)[1]
    assert props.emulated and props.host_cores >= 1
    assert torch.neuron.is_bf16_supported()
    dtypes = torch.accelerator.get_device_capability()["supported_dtypes"]
    assert dtypes == {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
                      torch.int8, torch.int16, torch.int32, torch.int64, torch.bool,
                      torch.complex64, torch.complex128, torch.complex32, torch.uint16, torch.uint32,
                      torch.uint64}
    with pytest.raises(ValueError, match="expected a neuron device"):
        torch.neuron.get_device_name("cpu")
