"""Convolutions report the CPU's layouts: output and gradient strides.

The CPU's convolution picks a backend (oneDNN, the slow 2-d kernels, the 3-d
ones) and that backend lays its results out channels_last where the input or
the weight suggests it; the Meta kernel always answers contiguous. The neuron
results must report the CPU's strides (csrc/lazy/conv_layouts.h) and hold the
CPU's values.
"""

import pytest
import torch
import torch.nn.functional as F

CL = torch.channels_last
CL3 = torch.channels_last_3d


def _metadata(t):
    return (tuple(t.shape), t.stride(), t.is_contiguous(),
            t.is_contiguous(memory_format=CL) if t.dim() == 4 else t.is_contiguous(memory_format=CL3)
            if t.dim() == 5 else None)


def _check(neuron, cpu, metrics=None):
    assert _metadata(neuron) == _metadata(cpu)
    if metrics is not None:  # traced, not run by the CPU fallback (which reports the CPU's strides)
        assert metrics.fallback_counts() == {}
    torch.testing.assert_close(neuron.cpu(), cpu, rtol=1e-4, atol=1e-4)


def _layout(t, fmt):
    if fmt == "cl":
        return t.contiguous(memory_format=CL if t.dim() == 4 else CL3)
    if fmt == "t":  # a 3-d tensor read through a transpose (channels last of conv1d)
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return t.contiguous()


# (input shape, weight shape, kwargs): shapes that take different CPU backends
# (oneDNN for most, the slow 2-d kernel for a single 1x1 sample, dilated).
CONV2D = [
    ((8, 8, 4, 4), (8, 8, 1, 1), {}),
    ((1, 4, 5, 5), (6, 4, 1, 1), {}),
    ((2, 4, 7, 7), (6, 4, 3, 3), {"padding": 1}),
    ((2, 4, 9, 9), (4, 1, 3, 3), {"groups": 4, "stride": 2}),
    ((16, 3, 6, 6), (5, 3, 3, 3), {"dilation": 2}),
]


@pytest.mark.parametrize("in_fmt,w_fmt", [("c", "c"), ("cl", "c"), ("c", "cl"), ("cl", "cl")])
@pytest.mark.parametrize("case", range(len(CONV2D)))
def test_conv2d_output_strides_are_the_cpus(case, in_fmt, w_fmt, metrics):
    torch.manual_seed(case)
    xs, ws, kw = CONV2D[case]
    x, w, b = _layout(torch.randn(xs), in_fmt), _layout(torch.randn(ws), w_fmt), torch.randn(ws[0])
    cpu = F.conv2d(x, w, b, **kw)
    neuron = F.conv2d(x.to("neuron"), w.to("neuron"), b.to("neuron"), **kw)
    _check(neuron, cpu, metrics)


def test_conv2d_of_the_reported_channels_last_repro():
    x = torch.randn(8, 8, 4, 4).contiguous(memory_format=CL)
    w = torch.randn(8, 8, 1, 1)
    neuron = F.conv2d(x.to("neuron"), w.to("neuron"))
    assert neuron.stride() == F.conv2d(x, w).stride() == (128, 1, 32, 8)
    assert neuron.is_contiguous(memory_format=CL)


@pytest.mark.parametrize("in_fmt", ["c", "cl"])
@pytest.mark.parametrize("kw", [{}, {"stride": 2, "output_padding": 1}, {"groups": 2}])
def test_conv_transpose2d_output_strides_are_the_cpus(in_fmt, kw, metrics):
    torch.manual_seed(1)
    x = _layout(torch.randn(2, 4, 5, 5), in_fmt)
    w = torch.randn(4, 6 // kw.get("groups", 1) * 1, 3, 3)
    cpu = F.conv_transpose2d(x, w, **kw)
    neuron = F.conv_transpose2d(x.to("neuron"), w.to("neuron"), **kw)
    _check(neuron, cpu, metrics)


@pytest.mark.parametrize("in_fmt", ["c", "cl"])
def test_conv3d_output_strides_are_the_cpus(in_fmt, metrics):
    torch.manual_seed(2)
    x = _layout(torch.randn(2, 3, 4, 5, 5), in_fmt)
    w = torch.randn(4, 3, 3, 3, 3)
    cpu = F.conv3d(x, w, padding=1)
    neuron = F.conv3d(x.to("neuron"), w.to("neuron"), padding=1)
    _check(neuron, cpu, metrics)


@pytest.mark.parametrize("in_fmt", ["c", "t"])
@pytest.mark.parametrize("w_fmt", ["c", "t"])
def test_conv1d_output_strides_are_the_cpus(in_fmt, w_fmt, metrics):
    torch.manual_seed(3)
    x = _layout(torch.randn(2, 4, 9), in_fmt)
    w = _layout(torch.randn(6, 4, 3), w_fmt)
    cpu = F.conv1d(x, w, padding=1)
    neuron = F.conv1d(x.to("neuron"), w.to("neuron"), padding=1)
    _check(neuron, cpu, metrics)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("in_fmt,w_fmt", [("c", "c"), ("cl", "c"), ("c", "cl")])
def test_convolution_backward_strides_are_the_cpus(in_fmt, w_fmt, transposed, metrics):
    torch.manual_seed(4)
    x = _layout(torch.randn(2, 4, 6, 6), in_fmt)
    w = _layout(torch.randn(4, 4, 3, 3), w_fmt)
    out = torch.ops.aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], transposed, [0, 0], 1)
    g = _layout(torch.randn(out.shape), in_fmt)
    args = ([4], [1, 1], [1, 1], [1, 1], transposed, [0, 0], 1, [True, True, True])
    cpu = torch.ops.aten.convolution_backward(g, x, w, *args)
    neuron = torch.ops.aten.convolution_backward(g.to("neuron"), x.to("neuron"), w.to("neuron"), *args)
    for n, c in zip(neuron, cpu):
        _check(n, c, metrics)


@pytest.mark.parametrize("in_fmt", ["c", "cl"])
def test_conv2d_autograd_gradient_strides_are_the_cpus(in_fmt):
    torch.manual_seed(5)
    x = _layout(torch.randn(2, 4, 6, 6), in_fmt)
    w = torch.randn(5, 4, 3, 3)
    results = []
    for device in ("cpu", "neuron"):
        xd = x.detach().to(device, copy=True).requires_grad_()
        wd = w.detach().to(device, copy=True).requires_grad_()
        out = F.conv2d(xd, wd, padding=1)
        (out * out).sum().backward()
        results.append((out, xd.grad, wd.grad))
    for n, c in zip(results[1], results[0]):
        _check(n.detach(), c.detach())
