"""Module.to("neuron") keeps each parameter's Python class and attributes, as
a conversion on the CPU or CUDA does (``param.data = converted``).

The move exchanges the old Parameter object with PyTorch's new one
(torch_neuron._module_support) and the exchange took the new one's class and
empty ``__dict__``: a lazy module's UninitializedParameter became an
initialized Parameter of no elements, so LazyConv1d(...).to("neuron") failed in
its first forward ("weight should have at least three dimensions"; PyTorch's
test_modules, every Lazy module), and Parameter subclasses and attributes set
on a parameter were lost."""

import pytest
import torch
from torch import nn

LAZY = [
    (lambda: nn.LazyLinear(5), (4, 3)),
    (lambda: nn.LazyConv1d(4, 3), (2, 3, 10)),
    (lambda: nn.LazyConvTranspose2d(4, 3), (2, 3, 6, 6)),
    (lambda: nn.LazyBatchNorm1d(), (6, 3)),
]


@pytest.mark.parametrize("make,shape", LAZY, ids=["LazyLinear", "LazyConv1d", "LazyConvTranspose2d",
                                                   "LazyBatchNorm1d"])
def test_a_lazy_module_moved_to_neuron_initializes_and_computes_as_on_the_cpu(make, shape):
    torch.manual_seed(0)
    x = torch.randn(shape)
    moved = make().to("neuron")
    on_cpu = make()
    assert moved.has_uninitialized_params() == on_cpu.has_uninitialized_params() == True  # noqa: E712
    assert [type(p) for p in moved.parameters()] == [type(p) for p in on_cpu.parameters()]
    got = moved(x.to("neuron"))
    on_cpu(x)  # materializes the CPU module's parameters; then the neuron ones are copied in
    on_cpu.load_state_dict({k: v.cpu() for k, v in moved.state_dict().items()})
    assert [type(p) for p in moved.parameters()] == [type(p) for p in on_cpu.parameters()]
    expected = on_cpu(x)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


class TaggedParameter(nn.Parameter):
    pass


def _tagged():
    m = nn.Linear(3, 2)
    m.weight.note = "kept"
    m.bias = TaggedParameter(m.bias.detach())
    m.bias.note = "also kept"
    return m


def test_parameter_subclasses_and_attributes_survive_the_move_as_a_cpu_conversion_keeps_them():
    on_cpu = _tagged().to(torch.float64)  # a CPU conversion: param.data = converted
    moved = _tagged()
    weight, bias = moved.weight, moved.bias
    moved.to("neuron")
    assert moved.weight is weight and moved.bias is bias
    assert moved.weight.device.type == "neuron"
    for name in ("weight", "bias"):
        assert type(getattr(moved, name)) is type(getattr(on_cpu, name))
        assert getattr(moved, name).note == getattr(on_cpu, name).note
    back = moved.to("cpu")
    assert type(back.bias) is TaggedParameter and back.bias.note == "also kept"
    assert back.weight.note == "kept"
