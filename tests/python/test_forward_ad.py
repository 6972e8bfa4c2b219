"""Forward-mode AD (torch.autograd.forward_ad, torch.func.jvp) on neuron: primals
and tangents equal the CPU's.

make_dual asks whether the tangent has the primal's layout through
_has_same_storage_numel, which reads the storages: below functionalization a
neuron tensor has none, so every dual tensor failed with "Cannot access
storage of TensorImpl" (csrc/aten/forward_ad.h)."""

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import torch_neuron  # noqa: F401

def copy_into_view_of_plain(x):
    y = torch.zeros(3, 4, device=x.device)
    y[1:].copy_(x[:2])  # y gains a tangent through the view
    return y


def broadcast_in_place(x, b):
    z = x.clone()
    z.add_(b)
    return z


def base_after_in_place_on_view(x):
    z = x.clone()
    z.t().sin_()
    return z


CASES = {
    "copy_into_view_of_plain": (copy_into_view_of_plain, [(3, 4)]),
    "broadcast_in_place": (broadcast_in_place, [(3, 4), (4,)]),
    "base_after_in_place_on_view": (base_after_in_place_on_view, [(3, 4)]),
    "sin": (lambda x: x.sin(), [(3, 4)]),
    "view_then_exp": (lambda x: x[1:].exp(), [(3, 4)]),
    "broadcast_mul": (lambda x, y: x * y, [(3, 4), (4,)]),
    "matmul": (lambda x, y: x @ y, [(3, 4), (4, 2)]),
    "softmax": (lambda x: x.softmax(-1), [(3, 4)]),
    "in_place_on_clone": (lambda x: x.clone().mul_(2).add_(1), [(3, 4)]),
    "embedding_max_norm": (lambda w: torch.nn.functional.embedding(torch.tensor([[0, 1], [2, 2]], device=w.device),
                                                                   w * 2, max_norm=1.0), [(4, 4)]),
}


def dual_run(device, fn, shapes):
    g = torch.Generator().manual_seed(0)
    primals = [torch.randn(*s, generator=g) for s in shapes]
    tangents = [torch.randn(*s, generator=g) for s in shapes]
    with fwAD.dual_level():
        duals = [fwAD.make_dual(p.to(device), t.to(device)) for p, t in zip(primals, tangents)]
        primal, tangent = fwAD.unpack_dual(fn(*duals))
        return primal.cpu(), tangent.cpu()


@pytest.mark.parametrize("name", sorted(CASES))
def test_dual_tensors_equal_cpu(name):
    fn, shapes = CASES[name]
    expected = dual_run("cpu", fn, shapes)
    actual = dual_run("neuron", fn, shapes)
    torch.testing.assert_close(actual[0], expected[0])
    torch.testing.assert_close(actual[1], expected[1])


def test_tangent_of_another_layout_takes_the_primals_as_on_cpu():
    # A transposed tangent for a contiguous primal: make_dual copies it into the
    # primal's layout (the storage-size check answers "different").
    primal = torch.randn(4, 4)
    tangent = torch.randn(4, 4).t()
    for device in ("cpu", "neuron"):
        with fwAD.dual_level():
            dual = fwAD.make_dual(primal.to(device), tangent.to(device))
            got = fwAD.unpack_dual(dual).tangent
            assert got.stride() == (4, 1)
            torch.testing.assert_close(got.cpu(), tangent)


@pytest.mark.parametrize("sizes", [((4, 4), (4, 4)), ((8,), (4,)), ((2, 3), (3, 2))])
def test_has_same_storage_numel_equals_cpu(sizes):
    a, b = torch.randn(*sizes[0]), torch.randn(*sizes[1])
    expected = torch.ops.aten._has_same_storage_numel(a[..., :2], b)
    assert torch.ops.aten._has_same_storage_numel(a.to("neuron")[..., :2], b.to("neuron")) == expected


def test_jvp_equals_cpu():
    x, v = torch.randn(5), torch.randn(5)
    expected = torch.func.jvp(lambda t: (t.tanh() * t).sum(), (x,), (v,))
    actual = torch.func.jvp(lambda t: (t.tanh() * t).sum(), (x.to("neuron"),), (v.to("neuron"),))
    torch.testing.assert_close(actual[0].cpu(), expected[0])
    torch.testing.assert_close(actual[1].cpu(), expected[1])
