"""Views report the CPU's metadata: sizes, strides, storage offsets, contiguity.

Every view op of PyTorch's OpInfo database (those whose output is a view of
their input on the CPU), on each of its samples: the neuron result's size(),
stride(), storage_offset(), is_contiguous() and
is_contiguous(memory_format=torch.channels_last) must be the CPU's, and its
values too. The device keeps every tensor dense; what it reports is worked
out from the ops' Meta kernels (csrc/lazy/layouts.h).
"""

import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db


def _is_view_of_input(out, inp):
    base = inp._base if inp._is_view() else inp
    outs = out if isinstance(out, (tuple, list)) else [out]
    return any(isinstance(o, torch.Tensor) and o._is_view() and o._base is base for o in outs)


def _view_ops():
    """(name, op, dtype) of each OpInfo op that returns a view of its input."""
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in op_db:
            if "dropout" in op.name:  # random: no view to compare
                continue
            for dtype in (torch.float32, torch.complex64):
                if dtype not in op.supported_dtypes("cpu"):
                    continue
                try:
                    samples = list(op.sample_inputs("cpu", dtype))[:3]
                    if any(isinstance(s.input, torch.Tensor) and _is_view_of_input(op(s.input, *s.args, **s.kwargs), s.input)
                           for s in samples):
                        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
                        found.append(pytest.param(op, dtype, id=f"{name}-{str(dtype)[6:]}"))
                        break
                except Exception:
                    continue
    return found


VIEW_OPS = _view_ops()


def _metadata(t):
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.is_contiguous(),
            t.is_contiguous(memory_format=torch.channels_last))


def _cpu_twin(t):
    """A CPU copy of `t` with its sizes, strides and storage offset."""
    if t.device.type != "neuron":
        return t
    extent = t.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    if t.numel() == 0:
        extent = t.storage_offset()
    storage = torch.empty(extent, dtype=t.dtype)
    return storage.as_strided(t.shape, t.stride(), t.storage_offset()).copy_(t.cpu()).requires_grad_(t.requires_grad)


def _tensors(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def test_the_opinfo_database_has_view_ops():
    # A broken classification would leave nothing to compare.
    names = {p.id.split("-")[0] for p in VIEW_OPS}
    assert {"transpose", "select", "diagonal", "as_strided", "unfold", "expand", "split"} <= names
    assert len(VIEW_OPS) >= 40


@pytest.mark.parametrize("op, dtype", VIEW_OPS)
def test_view_op_reports_the_cpu_metadata(op, dtype):
    compared = limited = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for sample in list(op.sample_inputs("neuron", dtype))[:12]:
            if not isinstance(sample.input, torch.Tensor):
                continue
            # The CPU twin of the sample, laid out exactly as the neuron tensors
            # report (a sample may itself be a view with a storage offset).
            on_cpu = sample.transform(lambda t: _cpu_twin(t) if isinstance(t, torch.Tensor) else t)
            try:
                expected = op(on_cpu.input, *on_cpu.args, **on_cpu.kwargs)
            except Exception:
                continue
            try:
                got = op(sample.input, *sample.args, **sample.kwargs)
            except NotImplementedError as e:
                # The one documented limit: as_strided of a view reaching its
                # base's storage beyond the view's own elements.
                if op.name != "as_strided" or "reaches storage outside" not in str(e):
                    raise
                limited += 1
                continue
            for e, g in zip(_tensors(expected), _tensors(got)):
                assert _metadata(g) == _metadata(e), f"{op.name} on {tuple(e.shape)}: {on_cpu.args}"
                torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0, equal_nan=True)
                compared += 1
    assert compared > 0 or (op.name == "as_strided" and limited > 0)


# ----------------------------------------------------- layouts through other ops

BASE = torch.arange(24.0).reshape(2, 3, 4)


@pytest.mark.parametrize("make", [
    lambda t: t.transpose(0, 2) + 1,  # elementwise ops keep the input's layout
    lambda t: t[:, ::2].contiguous(),
    lambda t: t.transpose(1, 2).reshape(2, 12),  # reshape copies where a view cannot be
    lambda t: t.transpose(1, 2).flatten(),
    lambda t: t[:, 1:].reshape(2, 2, 4),
    lambda t: t.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last),
    lambda t: t.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last).relu(),
    lambda t: torch.nn.functional.max_pool2d(
        t.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last), 1),
    lambda t: t.transpose(0, 1).clone(),
    lambda t: t.transpose(0, 1).detach(),
    lambda t: torch.empty_like(t.transpose(0, 2)).fill_(3),
    lambda t: t.transpose(0, 2)[1:].as_strided((2, 2), (1, 4)),
], ids=["add-of-transposed", "contiguous-of-slice", "reshape-copies", "flatten-copies",
        "reshape-views", "channels-last", "relu-keeps-channels-last", "pool-keeps-channels-last",
        "clone-preserves", "detach-aliases", "empty-like-preserves", "as-strided-of-a-view"])
def test_layouts_follow_the_cpu_through_other_ops(make):
    expected = make(BASE.clone())
    got = make(BASE.to("neuron"))
    assert _metadata(got) == _metadata(expected)
    assert torch.equal(got.cpu(), expected)


def test_an_in_place_op_on_a_view_keeps_the_views_strides_and_reaches_the_base():
    cpu, dev = BASE.clone(), BASE.to("neuron")
    for t in (cpu, dev):
        t[:, ::2].mul_(10)
    assert _metadata(dev[:, ::2]) == _metadata(cpu[:, ::2])
    assert torch.equal(dev.cpu(), cpu)


def test_view_of_a_transposed_tensor_raises_the_cpus_error():
    with pytest.raises(RuntimeError, match="view size is not compatible with input tensor's size and stride"):
        BASE.to("neuron").transpose(0, 2).view(24)


def test_as_strided_beyond_a_views_own_elements_raises_not_implemented():
    # The device keeps only the view's elements, not the rest of its base's storage.
    with pytest.raises(NotImplementedError, match="reaches storage outside"):
        BASE.to("neuron")[:, ::2].as_strided((24,), (1,)).cpu()


def test_copies_between_devices_are_laid_out_as_the_cpu_lays_out_a_clone():
    t = BASE.transpose(0, 2)
    on_device = t.to("neuron")
    assert on_device.stride() == t.clone().stride()
    assert on_device.cpu().stride() == t.clone().stride()
    cl = BASE.reshape(1, 2, 3, 4)
    assert (cl.to("neuron", memory_format=torch.channels_last).stride()
            == cl.to(memory_format=torch.channels_last).stride())
    assert on_device.to("cpu", memory_format=torch.contiguous_format).is_contiguous()


@pytest.mark.parametrize("resize", [
    lambda t: t.resize_as_(torch.empty(2, 3, device=t.device)),  # as many elements, another shape
    lambda t: t.resize_(2, 2),  # fewer
    lambda t: t.resize_as_(torch.empty(4, 5, device=t.device)),  # more: the first six are kept
], ids=["resize_as_same_numel", "resize_smaller", "resize_as_larger"])
def test_resize_and_resize_as_of_a_tensor_made_from_data_act_as_on_the_cpu(resize):
    # torch.tensor(...) on neuron once gave a view of a lifted constant, which
    # resize_as_ left unchanged (a 3x2 tensor stayed 3x2).
    data = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    cpu, dev = resize(torch.tensor(data)), resize(torch.tensor(data, device="neuron"))
    assert (dev.shape, dev.stride(), dev.storage_offset()) == (cpu.shape, cpu.stride(), cpu.storage_offset())
    assert torch.equal(dev.cpu().flatten()[:min(6, cpu.numel())], cpu.flatten()[:min(6, cpu.numel())])


def _svd_vh(a):
    return torch.linalg.svd(a)[2]


# Inputs whose layout the kernels that pick A or A^T by contiguity see
# differently from the backward formula: a transposed view, and an svd result
# (laid out by LAPACK) still inside the same graph (real only: a complex
# svd's vectors are defined up to a phase, which these losses depend on).
@pytest.mark.parametrize(
    "layout, dtype",
    [
        (lambda a: a, torch.float64),
        (lambda a: a.mT, torch.float64),
        (_svd_vh, torch.float64),
        (lambda a: a, torch.complex128),
        (lambda a: a.mT, torch.complex128),
    ],
    ids=["plain", "transposed", "svd_vh", "plain-complex", "transposed-complex"],
)
@pytest.mark.parametrize("op", ["det", "slogdet", "solve"])
def test_determinant_and_solve_gradients_match_the_cpu_whatever_the_inputs_layout(layout, dtype, op):
    torch.manual_seed(0)
    a0 = torch.randn(2, 3, 3, dtype=dtype)
    b0 = torch.randn(2, 3, 2, dtype=dtype)

    def run(device):
        a = a0.to(device).requires_grad_()
        m = layout(a)
        if op == "det":
            out = torch.linalg.det(m)
        elif op == "slogdet":
            sign, logabsdet = torch.linalg.slogdet(m)
            out = logabsdet + sign.real if dtype.is_complex else logabsdet * sign
        else:
            out = torch.linalg.solve(m, b0.to(device))
        (grad,) = torch.autograd.grad(out.abs().sum(), a)
        return out.detach().cpu(), grad.cpu()

    (out, grad), (out_n, grad_n) = run("cpu"), run("neuron")
    torch.testing.assert_close(out_n, out)
    torch.testing.assert_close(grad_n, grad)


def test_determinants_of_singular_empty_and_bad_inputs_match_the_cpu():
    cases = [torch.tensor([[1.0, 2.0], [2.0, 4.0]]), torch.zeros(3, 0, 0), torch.eye(3)[[2, 0, 1]]]
    for a in cases:
        torch.testing.assert_close(torch.linalg.det(a.to("neuron")).cpu(), torch.linalg.det(a))
        for got, want in zip(torch.linalg.slogdet(a.to("neuron")), torch.linalg.slogdet(a)):
            torch.testing.assert_close(got.cpu(), want)
    bad_inputs = [torch.randn(2, 3), torch.randn(3), torch.ones(2, 2, dtype=torch.int64),
                  torch.ones(2, 2, dtype=torch.bfloat16), torch.ones(2, 2, dtype=torch.float16)]
    for bad in bad_inputs:
        for fn in (torch.linalg.det, torch.linalg.slogdet):
            with pytest.raises(RuntimeError) as cpu_error:
                fn(bad)
            with pytest.raises(RuntimeError) as neuron_error:
                fn(bad.to("neuron"))
            assert str(neuron_error.value) == str(cpu_error.value)
