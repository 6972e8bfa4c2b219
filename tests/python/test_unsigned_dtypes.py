"""uint16, uint32 and uint64 on neuron behave as on the CPU.

PyTorch's CPU kernels cover few ops for these dtypes (copies, views, casts,
comparisons, bitwise ops, sort; not add, shifts or max), so neuron runs every
op touching them as the CPU's own kernel: the same values, and the same
exception, raised at the call rather than at a later sync."""

import pytest
import torch

import torch_neuron

WIDE_UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]

OPS = {
    "round_trip": lambda x: x,
    "mul": lambda x: x * 3,
    "eq": lambda x: x == 2,
    "bitwise_and": lambda x: x & 3,
    "view_dtype": lambda x: x.view(torch.int16 if x.element_size() == 2 else torch.int32),
    "view_into": lambda x: torch.arange(8, device=x.device).view(x.dtype),
    "cast_to_float": lambda x: x.to(torch.float32),
    "cast_from_int64": lambda x: x.to(torch.int64).to(x.dtype),
    "sum": lambda x: x.sum(),
    "cat": lambda x: torch.cat([x, x]),
    "index": lambda x: x[torch.tensor([0, 2], device=x.device)],
    "slice": lambda x: x[1:3],
    "sort": lambda x: x.sort().values,
    "flip": lambda x: x.flip(0),
    "where": lambda x: torch.where(x > 3, x, x),
    "zeros": lambda x: torch.zeros(3, dtype=x.dtype, device=x.device),
    "full": lambda x: torch.full((3,), 5, dtype=x.dtype, device=x.device),
    "fill_a_slice": lambda x: (lambda y: (y[1:].fill_(9), y)[1])(x.clone()),
    # Not implemented by the CPU for these dtypes: the same error, at the call.
    "add": lambda x: x + x,
    "lshift": lambda x: x << 2,
    "max": lambda x: x.max(),
    "floor_divide": lambda x: x // 2,
    "arange": lambda x: torch.arange(5, dtype=x.dtype, device=x.device),
}


def outcome(fn, x):
    try:
        result = fn(x)
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return type(e), str(e).splitlines()[0]
    return result.cpu()


@pytest.mark.parametrize("dtype", WIDE_UNSIGNED, ids=str)
@pytest.mark.parametrize("name", list(OPS))
def test_op_matches_the_cpu(dtype, name):
    cpu = torch.tensor([1, 2, 65535, 7], dtype=dtype)
    want = outcome(OPS[name], cpu)
    got = outcome(OPS[name], cpu.to("neuron"))
    if isinstance(want, tuple):
        assert got == want
    else:
        assert isinstance(got, torch.Tensor), got
        assert got.dtype == want.dtype
        assert torch.equal(got, want)


def test_unsupported_op_raises_at_the_call_with_the_cpus_error():
    x = torch.tensor([1, 2], dtype=torch.uint32, device="neuron")
    with pytest.raises(NotImplementedError, match="\"add_stub\" not implemented for 'UInt32'"):
        x + x  # noqa: B018 - the op raises, nothing is synced


def test_writes_through_a_view_reach_the_base():
    base = torch.zeros(4, dtype=torch.int32, device="neuron")
    view = base.view(torch.uint32)
    view[1:3] = torch.tensor([7, 4294967295], dtype=torch.uint32)
    assert base.cpu().tolist() == [0, 7, -1, 0]


def test_ops_on_them_run_as_cpu_kernels_and_are_counted():
    torch_neuron.metrics.reset()
    x = torch.tensor([3, 1, 2], dtype=torch.uint16, device="neuron")
    assert x.sort().values.cpu().tolist() == [1, 2, 3]
    assert torch_neuron.metrics.counters()["fallback.aten::sort"] == 1


def test_device_capability_lists_them():
    types = torch.accelerator.get_device_capability(torch.device("neuron"))["supported_dtypes"]
    assert {torch.uint16, torch.uint32, torch.uint64} <= set(types)


@pytest.mark.parametrize("dtype", WIDE_UNSIGNED, ids=str)
def test_views_keep_the_cpus_strides_and_take_writes(dtype):
    # Views stay traced (their *_copy ops on the CPU kernels would report
    # contiguous results); writes through them reach the base.
    values = torch.arange(35).view(5, 7).to(dtype)
    cpu = torch.zeros((5, 7, 2), dtype=dtype)[..., 0]
    dev = torch.zeros((5, 7, 2), dtype=dtype, device="neuron")[..., 0]
    cpu.copy_(values)
    dev.copy_(values)
    assert (dev.stride(), dev.is_contiguous()) == (cpu.stride(), cpu.is_contiguous()) == ((14, 2), False)
    assert torch.equal(dev.cpu(), cpu)
    assert torch.equal(dev.t()[::2].cpu(), cpu.t()[::2])


@pytest.mark.parametrize("dtype", WIDE_UNSIGNED, ids=str)
def test_an_expanded_input_reaches_the_cpu_kernel(dtype):
    column = torch.tensor([[3], [1]], dtype=dtype)
    expected = torch.sort(column.expand(2, 3), 0).values
    assert torch.equal(torch.sort(column.neuron().expand(2, 3), 0).values.cpu(), expected)
