"""The device memory of the emulated neuron devices: allocation accounting in
512-byte blocks, peaks, the block cache, memory limits and out-of-memory errors.

Only materialized data uses device memory: a buffer is allocated when data is
uploaded (``.to("neuron")``, ``copy_`` from the CPU) or when a synced graph writes
its outputs. A traced tensor that was never synced holds nothing. The tests
materialize by upload where they check the allocator itself, and by
``sync`` + ``wait_device_ops`` where they check graph outputs.
"""

import gc
import json
import time

import pytest
import torch

import torch_neuron
from child_process import run_python

BLOCK = 512


@pytest.fixture
def empty_device():
    """Device 0 with no queued work and no cached blocks, so the next allocation
    comes from the host."""
    torch_neuron.wait_device_ops()
    gc.collect()
    torch.neuron.empty_cache()
    yield
    torch_neuron.wait_device_ops()
    gc.collect()
    torch.neuron.empty_cache()


def rounded(nbytes: int) -> int:
    return max(1, -(-nbytes // BLOCK)) * BLOCK


def stat_delta(before, after):
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def upload(nbytes: int, device: str = "neuron") -> torch.Tensor:
    """A tensor of ``nbytes`` bytes, materialized on the device by the copy."""
    return torch.zeros(nbytes, dtype=torch.uint8).to(device)


def materialize(*tensors: torch.Tensor) -> None:
    torch_neuron.sync(list(tensors))
    torch_neuron.wait_device_ops()


def allocated_once_released(expected: int, device: int = 0) -> int:
    """memory_allocated(device), given up to 2 s to come back to ``expected``.

    The device's queue thread drops its references to a graph's buffers just
    after wait_device_ops() returns, so a buffer freed right after the wait may
    still be counted for a moment (pinned by
    test_lazy.py::test_a_graph_output_freed_right_after_the_wait_is_released_at_once).
    A buffer that never comes back still fails the check.
    """
    deadline = time.monotonic() + 2.0
    while torch.neuron.memory_allocated(device) != expected and time.monotonic() < deadline:
        time.sleep(0.001)
    return torch.neuron.memory_allocated(device)


# ------------------------------------------------------------------ accounting

@pytest.mark.parametrize("nbytes", [1, 400, 512, 513, 4000, 1 << 20])
def test_uploaded_tensor_takes_the_rounded_size_at_once_and_returns_it_after_del(
    empty_device, nbytes
):
    base = torch.neuron.memory_allocated()
    t = upload(nbytes)
    assert torch.neuron.memory_allocated() - base == rounded(nbytes)
    assert torch.neuron.memory_stats()["active.all.current"] >= 1
    del t
    assert torch.neuron.memory_allocated() == base


@pytest.mark.parametrize("nbytes", [1, 513, 4000, 1 << 20])
def test_graph_output_takes_memory_only_once_synced_and_returns_it_after_del(
    empty_device, nbytes
):
    before = torch.neuron.memory_stats()
    base = before["allocated_bytes.all.current"]
    t = torch.empty(nbytes, dtype=torch.uint8, device="neuron")
    u = torch.arange(nbytes, device="neuron").to(torch.uint8) * 3
    assert torch.neuron.memory_stats() == before  # traced, not materialized
    materialize(t, u)
    assert torch.neuron.memory_allocated() - base == 2 * rounded(nbytes)
    assert torch.equal(u.cpu(), torch.arange(nbytes).to(torch.uint8) * 3)
    del t, u
    assert allocated_once_released(base) == base


@pytest.mark.parametrize("nbytes", [1, 4000])
def test_constant_factory_is_a_device_fill_that_takes_memory_until_del(empty_device, nbytes):
    # zeros/ones/full are not graph nodes: the device queue fills a buffer of
    # their own (so an optimizer's zero-initialised state is already device data).
    base = torch.neuron.memory_allocated()
    u = torch.full((nbytes,), 7, dtype=torch.uint8, device="neuron")
    torch_neuron.wait_device_ops()
    assert torch.neuron.memory_allocated() - base == rounded(nbytes)
    assert torch.equal(u.cpu(), torch.full((nbytes,), 7, dtype=torch.uint8))
    del u
    assert allocated_once_released(base) == base


def test_empty_tensor_allocates_nothing(empty_device):
    before = torch.neuron.memory_stats()
    t = torch.empty(0, device="neuron")
    u = torch.empty(0, 3).to("neuron")
    materialize(t, u + 1)
    assert t.numel() == 0 and u.numel() == 0
    assert torch.neuron.memory_stats() == before


def test_memory_stats_count_allocs_and_frees_exactly(empty_device):
    torch.neuron.reset_peak_memory_stats()
    before = torch.neuron.memory_stats()
    a = upload(400)  # one 512-byte block
    b = upload(4000)  # 4096
    mid = torch.neuron.memory_stats()
    del a, b
    after = torch.neuron.memory_stats()
    assert stat_delta(before, mid) == {
        "active.all.current": 2,
        "allocated_bytes.all.current": 4608,
        "allocated_bytes.all.peak": 4608,
        "reserved_bytes.all.current": 4608,
        "reserved_bytes.all.peak": 4608,
        "num_allocs": 2,
        "num_host_allocs": 2,
    }
    assert stat_delta(mid, after) == {
        "active.all.current": -2,
        "allocated_bytes.all.current": -4608,
        "inactive_split.all.current": 2,
        "num_frees": 2,
    }


def test_memory_stats_of_each_device_are_separate(empty_device, two_devices):
    base0, base1 = torch.neuron.memory_allocated(0), torch.neuron.memory_allocated(1)
    t = upload(1000, "neuron:1")
    assert torch.neuron.memory_allocated(1) - base1 == 1024
    assert torch.neuron.memory_allocated("neuron:1") - base1 == 1024
    assert torch.neuron.memory_allocated(0) == base0
    del t
    assert torch.neuron.memory_allocated(1) == base1


def test_graph_intermediates_and_fallback_temporaries_hold_no_memory(empty_device):
    x = torch.randn(100, 100).neuron()
    base = torch.neuron.memory_allocated()
    active = torch.neuron.memory_stats()["active.all.current"]
    y = (x @ x).relu().sum()  # traced: x @ x and relu are never materialized
    z = x[x > 0]  # CPU fallback: the mask is materialized, read back and freed
    materialize(y, z)
    # Only the two results hold blocks.
    assert torch.neuron.memory_stats()["active.all.current"] == active + 2
    assert torch.neuron.memory_allocated() - base == BLOCK + rounded(z.numel() * 4)
    assert torch.equal(z.cpu(), x.cpu()[x.cpu() > 0])
    del y, z
    assert allocated_once_released(base) == base
    assert torch.neuron.memory_stats()["active.all.current"] == active


def test_an_op_eager_mode_ran_gives_its_buffer_back_when_its_tensor_goes(empty_device):
    # What an op ran into is kept for its node (later graphs read it instead of
    # running it again); it must go with the last tensor, not at some later op.
    x = torch.ones(1000, device="neuron")
    materialize(x)
    base = torch.neuron.memory_allocated()
    with torch_neuron.mode("eager"):
        y = x.neg()
        z = y * 2
        torch_neuron.wait_device_ops()
        assert torch.neuron.memory_allocated() - base == 2 * rounded(4000)
        del y
        assert allocated_once_released(base + rounded(4000)) == base + rounded(4000)
        assert torch.equal(z.cpu(), torch.full((1000,), -2.0))
        del z
        assert allocated_once_released(base) == base
    torch_neuron.wait_device_ops()


def test_a_draw_that_ran_gives_its_buffer_back_when_its_last_reader_goes(empty_device):
    # A draw that ran is read from its result by graphs built later; once the
    # tensors that could read it are gone, so is its buffer (with no new sync).
    base = torch.neuron.memory_allocated()
    a = torch.rand(1000, device="neuron")
    b = a + 1  # pending, reads the draw
    materialize(a)
    assert torch.equal(b.cpu(), a.cpu() + 1)  # b read the draw, not a new one
    torch_neuron.wait_device_ops()
    del a, b
    gc.collect()
    assert allocated_once_released(base) == base


def test_graph_output_on_neuron_one_is_counted_on_neuron_one(empty_device, two_devices):
    base0, base1 = torch.neuron.memory_allocated(0), torch.neuron.memory_allocated(1)
    t = torch.full((1000,), 2.0, device="neuron:1")
    materialize(t)
    assert (torch.neuron.memory_allocated(0) - base0, torch.neuron.memory_allocated(1) - base1) == (
        0,
        4096,
    )
    del t
    assert allocated_once_released(base1, device=1) == base1


# ----------------------------------------------------------------------- peaks

def test_peak_tracks_the_maximum_until_reset(empty_device):
    torch.neuron.reset_peak_memory_stats()
    base, reserved = torch.neuron.memory_allocated(), torch.neuron.memory_reserved()
    assert torch.neuron.max_memory_allocated() == base
    big = upload(4 << 20)
    del big
    assert torch.neuron.memory_allocated() == base
    assert torch.neuron.max_memory_allocated() - base == 4 << 20
    assert torch.neuron.max_memory_reserved() - reserved == 4 << 20
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == base
    assert torch.neuron.memory_reserved() == reserved + (4 << 20)
    assert torch.neuron.max_memory_reserved() == torch.neuron.memory_reserved()


# --------------------------------------------------------------------- caching

def test_freed_blocks_stay_reserved_until_empty_cache(empty_device):
    reserved = torch.neuron.memory_reserved()
    t = upload(4000)
    del t
    assert torch.neuron.memory_reserved() - reserved == 4096
    assert torch.neuron.memory_stats()["inactive_split.all.current"] == 1
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() == reserved
    assert torch.neuron.memory_stats()["inactive_split.all.current"] == 0


def test_a_freed_block_is_reused_for_the_same_size(empty_device):
    t = upload(4000)
    del t
    before = torch.neuron.memory_stats()
    u = upload(4000)
    assert stat_delta(before, torch.neuron.memory_stats()) == {
        "active.all.current": 1,
        "inactive_split.all.current": -1,
        "allocated_bytes.all.current": 4096,
        "num_allocs": 1,
        "num_cache_hits": 1,
    }
    del u


def test_a_factory_fill_reuses_a_cached_block(empty_device):
    t = upload(4000)
    del t
    before = torch.neuron.memory_stats()
    u = torch.ones(1000, device="neuron")  # 4000 bytes, filled by the device queue
    materialize(u)
    assert stat_delta(before, torch.neuron.memory_stats()) == {
        "active.all.current": 1,
        "inactive_split.all.current": -1,
        "allocated_bytes.all.current": 4096,
        "num_allocs": 1,
        "num_cache_hits": 1,
    }
    assert torch.equal(u.cpu(), torch.ones(1000))


@pytest.mark.parametrize("cached, requested, reused", [(1024, 512, True), (2048, 512, False)])
def test_a_cached_block_is_reused_only_up_to_twice_the_request(
    empty_device, cached, requested, reused
):
    t = upload(cached)
    del t
    before = torch.neuron.memory_stats()
    u = upload(requested)
    delta = stat_delta(before, torch.neuron.memory_stats())
    assert delta.get("num_cache_hits", 0) == int(reused)
    assert delta.get("num_host_allocs", 0) == int(not reused)
    assert delta.get("inactive_split.all.current", 0) == -int(reused)
    # A reused block counts whole: the request is not split off it.
    assert delta["allocated_bytes.all.current"] == (cached if reused else requested)
    del u


# ------------------------------------------------------------ limits and OOM

def test_memory_limit_context_sets_and_restores_the_limit():
    assert torch.neuron.get_memory_limit() == 0
    with torch.neuron.memory_limit(1 << 20):
        assert torch.neuron.get_memory_limit() == 1 << 20
        assert torch.neuron.memory_stats()["limit_bytes"] == 1 << 20
    assert torch.neuron.get_memory_limit() == 0
    with pytest.raises(KeyError):
        with torch.neuron.memory_limit(4096):
            raise KeyError("boom")
    assert torch.neuron.get_memory_limit() == 0


def test_memory_limit_is_per_device(two_devices):
    torch.neuron.set_memory_limit(4096, device=1)
    assert torch.neuron.get_memory_limit(1) == 4096
    assert torch.neuron.get_memory_limit(0) == 0


def test_negative_memory_limit_is_rejected():
    with pytest.raises(ValueError, match="memory limit must be >= 0"):
        torch.neuron.set_memory_limit(-1)


OOM_2MIB = (
    "neuron:0 out of memory: tried to allocate 2.00 MiB; 0 bytes already allocated by tensors, "
    "0 bytes reserved in total, device limit 1.00 MiB (TORCH_NEURON_MEMORY_LIMIT_MB). "
    "Free tensors you no longer need or raise the limit."
)


def _size(nbytes: int) -> str:
    """A byte count as the device's messages write it (the metrics report's format)."""
    return torch_neuron.metrics._format_value("x.bytes", nbytes)


def oom_2mib() -> str:
    """OOM_2MIB with what is allocated and reserved now: tensors earlier tests
    left alive in this process (a compiled model's constants) stay counted."""
    return OOM_2MIB.replace("0 bytes already", f"{_size(torch.neuron.memory_allocated())} already").replace(
        "0 bytes reserved", f"{_size(torch.neuron.memory_reserved())} reserved")


def test_upload_past_the_limit_raises_oom_at_once_and_device_stays_usable(empty_device):
    ooms = torch.neuron.memory_stats()["num_ooms"]
    base = torch.neuron.memory_allocated()
    with torch.neuron.memory_limit(1 << 20):
        with pytest.raises(torch.OutOfMemoryError) as info:
            upload(2 << 20)
        assert torch.neuron.memory_stats()["num_ooms"] == ooms + 1
        assert torch.neuron.memory_allocated() == base
        expected = oom_2mib()
        small = torch.ones(1000, device="neuron")
        assert small.sum().item() == 1000.0
    assert str(info.value) == expected


def test_graph_output_past_the_limit_raises_oom_at_the_next_sync(empty_device):
    ooms = torch.neuron.memory_stats()["num_ooms"]
    base = torch.neuron.memory_allocated()
    with torch.neuron.memory_limit(1 << 20):
        t = torch.empty(2 << 20, dtype=torch.uint8, device="neuron")
        torch_neuron.sync(t)  # queues the graph: nothing is raised here
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch_neuron.wait_device_ops()
        assert str(info.value) == oom_2mib()
        assert torch.neuron.memory_stats()["num_ooms"] == ooms + 1
        assert torch.neuron.memory_allocated() == base
        # The failed result stays failed; the device runs the next graph.
        with pytest.raises(torch.OutOfMemoryError, match="tried to allocate 2.00 MiB"):
            t.cpu()
        assert torch.equal((torch.ones(1000, device="neuron") * 2).cpu(), torch.full((1000,), 2.0))


def test_oom_inside_a_graph_leaks_nothing(empty_device):
    x = torch.ones(200_000, device="neuron")  # 800,000 bytes
    materialize(x)
    base = torch.neuron.memory_allocated()
    ooms = torch.neuron.memory_stats()["num_ooms"]
    with torch.neuron.memory_limit(1 << 20):
        for _ in range(3):
            y = x * 2
            torch_neuron.sync(y)
            with pytest.raises(torch.OutOfMemoryError, match="tried to allocate 781.50 KiB"):
                torch_neuron.wait_device_ops()
            del y
        assert allocated_once_released(base) == base
        assert torch.neuron.memory_stats()["num_ooms"] == ooms + 3
        assert torch.equal((x[:10] * 2).cpu(), torch.full((10,), 2.0))


def test_cached_blocks_are_released_before_declaring_oom(empty_device):
    reserved = torch.neuron.memory_reserved()
    with torch.neuron.memory_limit(reserved + (1 << 20)):
        first = upload(600 * 1024)
        del first  # 600 KiB cached: a 700 KiB request only fits once it is released
        before = torch.neuron.memory_stats()
        second = upload(700 * 1024)
        delta = stat_delta(before, torch.neuron.memory_stats())
        assert delta["num_host_frees"] == 1 and delta["num_host_allocs"] == 1
        assert "num_ooms" not in delta
        assert torch.neuron.memory_reserved() - reserved == 700 * 1024
        del second


def test_memory_limit_from_the_environment():
    code = """
import json, torch, torch_neuron
result = {
    "limit": torch.neuron.get_memory_limit(),
    "config": torch_neuron.config.current()["memory_limit_bytes"],
}
try:
    torch.zeros(2 << 20, dtype=torch.uint8).to("neuron")
    result["oom"] = None
except torch.OutOfMemoryError as e:
    result["oom"] = str(e)
result["small"] = torch.ones(1000, device="neuron").sum().item()
result["num_ooms"] = torch.neuron.memory_stats()["num_ooms"]
print(json.dumps(result))
"""
    proc = run_python(code, {"TORCH_NEURON_MEMORY_LIMIT_MB": "1"})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["limit"] == result["config"] == 1 << 20
    assert result["oom"] == OOM_2MIB
    assert result["small"] == 1000.0
    assert result["num_ooms"] == 1


@pytest.mark.parametrize("opt_level, host_peak, total_peak", [("0", 2 * 4000, 2 * 4000), ("1", 0, 4096)],
                         ids=["O0", "O1"])
def test_graph_intermediates_peak_counts_the_live_temporaries_of_an_execution(
        opt_level, host_peak, total_peak, metrics):
    # x*2 -> +1 -> relu -> *x -> sigmoid over 1000 floats. Tier 0: each op's
    # input temporary (ATen's, in host memory) is released only after the op
    # made its output, so two values of 4000 bytes are live at once, never
    # three (x is a parameter: not counted). Tier 1: one fused kernel, whose
    # output is the only value and is device memory from the start: no host
    # intermediate, and the arena's one 4096-byte block (4000 rounded up to 512
    # bytes) above what it held when the step started. Each byte counts once.
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=opt_level):
        x = torch.randn(1000, device="neuron")
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
        base = torch.neuron.memory_allocated()
        metrics.reset()
        y = torch.sigmoid(torch.relu(x * 2 + 1) * x)
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
        assert metrics.counter("graph.execute.peak_bytes") == host_peak
        assert metrics.counter("graph.execute.peak_total_bytes") - base == total_peak
        expected = torch.sigmoid(torch.relu(x.cpu() * 2 + 1) * x.cpu())
        torch.testing.assert_close(y.cpu(), expected)
