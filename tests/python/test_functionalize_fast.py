"""The unboxed functionalization kernels (csrc/lazy/functionalize_fast.cc)
against PyTorch's boxed fallback, the reference: the same IR and values for
traced training steps, and the same results and graphs for functionalization
on the CPU (the kernels are registered for every device)."""

import contextlib

import pytest
import torch
from torch import nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import torch_neuron
from models import MLP, SmallCNN, TinyDecoder, loss_fn, make_batches


@contextlib.contextmanager
def fast_paths(on: bool):
    torch_neuron._C._set_functionalize_fast_paths(on)
    try:
        yield
    finally:
        torch_neuron._C._set_functionalize_fast_paths(True)


def test_registered_only_where_the_fallback_would_run():
    ops = torch_neuron._C._functionalize_fast_path_ops()
    assert {"aten::add.Tensor", "aten::mm", "aten::native_layer_norm_backward",
            "aten::convolution_backward"} <= set(ops)
    # In-place and view ops keep their generated functionalization kernels.
    assert not {"aten::add_.Tensor", "aten::view", "aten::transpose.int"} & set(ops)
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    assert all(has(op, "Functionalize") for op in ops)
    with fast_paths(False):
        assert torch_neuron._C._functionalize_fast_path_ops() == []
        assert not has("aten::add.Tensor", "Functionalize")
        assert has("aten::add_.Tensor", "Functionalize")  # PyTorch's own, untouched
    assert has("aten::add.Tensor", "Functionalize")


def traced_step(kind: str):
    """One training step of a bench model traced on neuron: the IR of every
    value it leaves pending (loss, gradients, parameters), and their values."""
    torch.manual_seed(0)
    model = {"mlp": MLP, "cnn": SmallCNN, "transformer": TinyDecoder}[kind]().to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = make_batches(kind, 1, batch=4)[0]
    x, y = x.to("neuron"), y.to("neuron")
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()
    torch.manual_seed(1)  # the dropout masks
    loss = loss_fn(kind, model, x, y)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    with torch_neuron.config.override(TORCH_NEURON_STEP_ON_OPTIMIZER="0"):  # left pending
        opt.step()
    outputs = [loss, *grads, *model.parameters()]
    text = torch_neuron.debug.ir_text(outputs)
    return text, [t.detach().cpu() for t in outputs]


@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
def test_traced_step_ir_and_values_equal_the_fallbacks(kind):
    with fast_paths(False):
        reference_text, reference = traced_step(kind)
    text, values = traced_step(kind)
    assert text == reference_text
    assert "aten::addmm" in text or "aten::convolution" in text
    for got, want in zip(values, reference):
        assert torch.equal(got, want)


def test_undefined_results_of_a_tuple_stay_undefined():
    # No affine weight: native_layer_norm_backward's output mask asks for the
    # input's gradient only, and the two others come back undefined.
    x = torch.randn(4, 6)

    def grad(xd):
        xd.requires_grad_()
        return torch.autograd.grad(F.layer_norm(xd, (6,)).pow(2).sum(), xd)[0]

    g = grad(x.to("neuron"))
    assert "aten::native_layer_norm_backward" in torch_neuron.debug.ir_text([g])
    assert torch.allclose(g.cpu(), grad(x.clone()), atol=1e-5)


def cpu_program(x, w, b, bias_table, plain):
    """Mutation, views and the registered ops, as torch.func.functionalize
    sees them on the CPU; `plain` is captured unwrapped, as a closure's
    tensors are."""
    h = F.linear(x, w, b).relu()
    h.add_(plain * plain)  # an op of two plain tensors inside functionalization
    v = h.view(-1)
    v.mul_(2)
    s = torch.softmax(h, dim=-1) + torch.log_softmax(h, dim=-1).exp()
    n = F.layer_norm(s, (s.shape[-1],))
    e = F.embedding(torch.tensor([0, 2, 1]), bias_table)
    c = F.conv2d(h.reshape(1, 1, *h.shape), torch.ones(1, 1, 2, 2))
    m = F.max_pool2d(c, 2) if c.shape[-1] >= 2 else c
    return n.sum(dim=0) + e.sum(), torch.where(h > 1, h, -h).mean(), m.sum()


def cpu_inputs():
    torch.manual_seed(0)
    return torch.randn(4, 6), torch.randn(6, 6), torch.randn(6), torch.randn(3, 6)


@pytest.mark.parametrize("on", [True, False], ids=["fast", "fallback"])
def test_cpu_functionalize_matches_eager(on):
    plain = torch.full((4, 6), 0.5)
    eager = cpu_program(*cpu_inputs(), plain)
    with fast_paths(on):
        functional = torch.func.functionalize(lambda *a: cpu_program(*a, plain))(*cpu_inputs())
    for got, want in zip(functional, eager):
        assert not torch._is_functional_tensor(got)
        assert torch.allclose(got, want, atol=1e-6)


def test_cpu_functionalized_graph_equals_the_fallbacks():
    plain = torch.full((4, 6), 0.5)

    def graph_code():
        fn = torch.func.functionalize(lambda *a: cpu_program(*a, plain), remove="mutations_and_views")
        return make_fx(fn)(*cpu_inputs()).code

    with fast_paths(False):
        reference = graph_code()
    assert graph_code() == reference
    assert "torch.ops.aten.addmm.default" in reference


def read_after_a_write_through_a_view(h):
    """Ops of each shape of signature reading a base just written through a
    view of it: functionalization must bring the base up to date first."""
    h = h.clone()
    results = []
    for op in (torch.exp, lambda t: t + t, lambda t: t @ t.T, lambda t: F.layer_norm(t, (3,)),
               lambda t: t.sum(dim=0)):
        h.view(-1)[1:4].mul_(2)
        results.append(op(h))
    return results


@pytest.mark.parametrize("where", ["cpu_functionalize", "neuron"])
def test_a_base_written_through_its_view_is_read_current(where):
    x = torch.arange(6.0).reshape(2, 3) / 4
    want = read_after_a_write_through_a_view(x)
    if where == "neuron":
        results = read_after_a_write_through_a_view(x.to("neuron"))
        torch_neuron.mark_step()
        got = [t.cpu() for t in results]
    else:
        got = torch.func.functionalize(read_after_a_write_through_a_view)(x)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, atol=1e-6)
