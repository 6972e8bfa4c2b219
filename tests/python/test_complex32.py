"""complex32 (torch.chalf, c10's ComplexHalf) on neuron, as CUDA has it: made,
copied, cast, viewed (view_as_real, slices) and used by the few ops PyTorch's
kernels implement for it, each equal to the CPU; an op PyTorch implements for
no complex32 tensor raises the CPU's error, naming the op and the dtype, at the
call. complex32 runs on PyTorch's CPU kernels (a host-only dtype, as uint16/32/64)."""

import pytest
import torch

import torch_neuron

C32 = torch.complex32


def _both(fn):
    """fn(device) on the CPU and on neuron, the neuron result read back."""
    cpu = fn("cpu")
    neuron = fn("neuron")
    return cpu, neuron


def _assert_same(cpu, neuron):
    assert neuron.device.type == "neuron"
    assert neuron.dtype == cpu.dtype
    assert neuron.shape == cpu.shape
    # Compare bit for bit through the float16 pairs (equal also for NaNs).
    assert torch.equal(torch.view_as_real(neuron.cpu()), torch.view_as_real(cpu)) if cpu.dtype == C32 \
        else torch.equal(neuron.cpu(), cpu)


VALUES = [1 + 2j, -3.5 + 0.25j, 0j, 65504 - 1j]


@pytest.mark.parametrize("make", [
    pytest.param(lambda d: torch.ones(2, 3, dtype=C32, device=d), id="ones"),
    pytest.param(lambda d: torch.zeros(4, dtype=C32, device=d), id="zeros"),
    pytest.param(lambda d: torch.full((3,), 2 - 1j, dtype=C32, device=d), id="full"),
    pytest.param(lambda d: torch.tensor(VALUES, dtype=C32, device=d), id="tensor"),
    pytest.param(lambda d: torch.tensor(VALUES, device=d).to(C32), id="to-from-complex64"),
    pytest.param(lambda d: torch.tensor(VALUES, dtype=C32).to(d), id="to-device"),
    pytest.param(lambda d: torch.arange(6.0, device=d).to(C32)[1::2], id="strided-slice"),
    pytest.param(lambda d: torch.tensor(VALUES, dtype=C32, device=d) + 1, id="add-scalar"),
    pytest.param(lambda d: torch.tensor(VALUES, dtype=C32, device=d)
                 * torch.tensor(VALUES[::-1], dtype=C32, device=d), id="mul"),
    pytest.param(lambda d: torch.cat([torch.ones(2, dtype=C32, device=d),
                                      torch.tensor(VALUES, dtype=C32, device=d)]), id="cat"),
    pytest.param(lambda d: torch.view_as_real(torch.tensor(VALUES, dtype=C32, device=d)), id="view_as_real"),
    pytest.param(lambda d: torch.view_as_complex(torch.tensor([[1.0, 2.0], [3.0, -4.0]], dtype=torch.half,
                                                              device=d)), id="view_as_complex"),
    pytest.param(lambda d: torch.tensor(VALUES, dtype=C32, device=d).to(torch.complex64), id="to-complex64"),
    pytest.param(lambda d: torch.tensor(VALUES, dtype=C32, device=d).real, id="real"),
    pytest.param(lambda d: (torch.ones(2, dtype=torch.half, device=d) * 1j), id="half-times-1j"),
])
def test_complex32_ops_equal_the_cpu(make):
    _assert_same(*_both(make))


def test_complex32_random_draws_equal_the_cpu():
    for draw in (torch.randn, torch.rand):
        torch.manual_seed(7)
        cpu = draw(5, dtype=C32)
        torch.manual_seed(7)
        neuron = draw(5, dtype=C32, device="neuron")
        _assert_same(cpu, neuron)


def test_writes_into_a_complex32_view_reach_the_base():
    def run(d):
        t = torch.zeros(4, dtype=C32, device=d)
        t[1::2] = torch.tensor([1 + 1j, 2 - 2j], dtype=C32, device=d)
        torch.view_as_real(t)[0, 1] = 5
        return t
    _assert_same(*_both(run))


@pytest.mark.parametrize("op", [
    pytest.param(lambda t: t.sum(), id="sum"),
    pytest.param(lambda t: t.reshape(2, 2) @ t.reshape(2, 2), id="matmul"),
])
def test_an_op_pytorch_lacks_for_complex32_raises_the_cpus_error_at_the_call(op):
    with pytest.raises(NotImplementedError) as cpu_error:
        op(torch.ones(4, dtype=C32))
    assert "'ComplexHalf'" in str(cpu_error.value)
    with pytest.raises(NotImplementedError) as neuron_error:
        op(torch.ones(4, dtype=C32, device="neuron"))
    assert str(neuron_error.value) == str(cpu_error.value)
