"""Tensor subclasses that wrap neuron tensors (__torch_dispatch__ wrappers such
as DTensor): their inner ops run as they would on the CPU. PyTorch runs a
subclass's inner ops with every dispatch key above Python excluded,
functionalization's among them; traced as they came, they returned plain lazy
tensors outside functionalization's view bookkeeping (a write through a view
inside a subclass was refused, DTensor's local tensors had no storage)."""

import pytest
import torch
from torch.utils._pytree import tree_map


class Wrapper(torch.Tensor):
    """The smallest __torch_dispatch__ wrapper: every op runs on the inner tensor."""

    @staticmethod
    def __new__(cls, elem):
        r = torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device,
                                                strides=elem.stride())
        r.elem = elem
        return r

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.elem if isinstance(t, Wrapper) else t  # noqa: E731
        wrap = lambda t: Wrapper(t) if isinstance(t, torch.Tensor) and not isinstance(t, Wrapper) else t  # noqa: E731
        return tree_map(wrap, func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {})))


def run(device):
    base = Wrapper(torch.arange(8.0, device=device).reshape(2, 4))
    view = base[:, 1:3]
    view.add_(10)
    base.t()[0].mul_(-1)
    inner = base.elem
    return (base.elem.cpu(), view.elem.cpu(), (base.sum() * 2).elem.cpu(),
            torch._is_functional_tensor(inner) if device == "neuron" else True,
            inner.untyped_storage().data_ptr() == view.elem.untyped_storage().data_ptr())


def test_writes_through_views_inside_a_subclass_reach_its_base_as_on_the_cpu():
    cpu = run("cpu")
    neuron = run("neuron")
    torch.testing.assert_close(neuron[0], cpu[0])
    torch.testing.assert_close(neuron[1], cpu[1])
    torch.testing.assert_close(neuron[2], cpu[2])
    assert neuron[3], "the inner tensor is a plain lazy tensor, outside functionalization"
    assert neuron[4] == cpu[4]  # the view shares its base's storage


def test_an_error_inside_a_subclass_is_the_cpus():
    for device in ("cpu", "neuron"):
        w = Wrapper(torch.ones(2, 3, device=device))
        with pytest.raises(RuntimeError, match="output with shape \\[2, 3\\] doesn't match the broadcast shape"):
            w.add_(torch.ones(4, 2, 3, device=device))
