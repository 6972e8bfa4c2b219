"""Tier 1 writes fused kernels' outputs into donated buffers: an input buffer
that only the running graph still holds (its tensor took a new value, like a
parameter updated in place) receives a kernel output directly, with no new
allocation and no copy. These tests check the values against the CPU, the
exact bytes donated in place, and that a buffer something else still reads is
never overwritten.
"""

import pytest
import torch

import torch_neuron

N = 1000  # elements per tensor: 4000 bytes


@pytest.fixture(autouse=True)
def opt_level_1():
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        yield


def settle():
    # No gc.collect() first: the counts below are exact only if every step
    # donates, which once failed at random (the tracing thread still held the
    # graph's IR when the executor checked its inputs).
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()


def in_place_bytes():
    return torch_neuron.metrics.counter("graph.donated.in_place_bytes")


def adamw(device, steps):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(N).to(device)) for _ in range(2)]
    for p in params:
        p.grad = torch.randn(N).to(device)
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=False)
    donated = []
    for _ in range(steps):
        before = in_place_bytes()
        opt.step()
        if device == "neuron":
            settle()
            donated.append(in_place_bytes() - before)
    state = [opt.state[p][k] for p in params for k in ("exp_avg", "exp_avg_sq")]
    return [p.detach() for p in params] + state, donated


def test_adamw_updates_param_and_moments_in_their_own_buffers():
    expected, _ = adamw("cpu", 4)
    got, donated = adamw("neuron", 4)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-6)
    # Step 1 creates the moments (zeros are fresh buffers, donated too); from
    # then on param, exp_avg and exp_avg_sq of both parameters are written where
    # they were: 2 parameters x 3 tensors x 4000 bytes, every step.
    assert donated[1:] == [2 * 3 * 4 * N] * 3


def test_arena_allocates_nothing_for_the_kernel_outputs_after_warm_up():
    torch.manual_seed(0)
    p = torch.randn(N).neuron()
    for _ in range(2):
        p.mul_(0.5).add_(1.0).tanh_()
        settle()
    allocs = torch.neuron.memory_stats()["num_allocs"]
    allocated = torch.neuron.memory_allocated()
    start = in_place_bytes()
    for _ in range(3):
        p.mul_(0.5).add_(1.0).tanh_()
        settle()
    assert in_place_bytes() - start == 3 * 4 * N
    assert torch.neuron.memory_allocated() == allocated
    assert torch.neuron.memory_stats()["num_allocs"] == allocs


def test_buffer_still_read_by_another_tensor_is_not_overwritten():
    torch.manual_seed(0)
    x = torch.randn(N)
    p = x.neuron()
    keep = p  # a second reference: p's old value must survive the update
    p = p * 3 + 1
    settle()
    torch.testing.assert_close(keep.cpu(), x)
    torch.testing.assert_close(p.cpu(), x * 3 + 1)


def test_old_value_read_after_the_kernel_in_the_same_graph():
    # The update's kernel runs before a reduction of the old value in program
    # order, so the old buffer is not the kernel's to overwrite.
    torch.manual_seed(0)
    x, w = torch.randn(N), torch.randn(N)
    p, wd = x.neuron(), w.neuron()
    settle()
    old = p.clone()
    p.mul_(2).add_(wd)
    total = (old * wd).sum()
    settle()
    torch.testing.assert_close(p.cpu(), x * 2 + w)
    torch.testing.assert_close(total.cpu(), (x * w).sum())


def test_several_outputs_and_inputs_land_in_the_right_buffers():
    torch.manual_seed(0)
    a, b, c = torch.randn(N), torch.randn(N), torch.randn(N)
    da, db, dc = a.neuron(), b.neuron(), c.neuron()
    settle()
    for _ in range(3):  # swap roles every step: each output must find its own buffer
        da, db, dc = db * 2 + dc, torch.sigmoid(da) - db, da * dc
        a, b, c = b * 2 + c, torch.sigmoid(a) - b, a * c
        settle()
    torch.testing.assert_close(da.cpu(), a, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(db.cpu(), b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dc.cpu(), c, rtol=1e-5, atol=1e-6)
