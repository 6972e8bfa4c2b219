"""Tier 1 fuses row reductions (sum, mean, amax, amin over trailing dims) with
the elementwise ops around them (whole-tensor sum, mean, amax and amin too),
decomposes softmax, log-softmax, var, std and layer norm (forward and backward)
into such row kernels, and fuses operands broadcast per row, per row position
(a bias) or as one value. Each case is compared with the
CPU and checked to compile to the expected kernels.
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F

import torch_neuron


@pytest.fixture(autouse=True)
def opt_level_1():
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        yield


def compiled(outputs):
    ir, sources = torch_neuron.debug.compiled_text(list(outputs))
    return ir, sources


def check(fn, *inputs, row_kernels=1, absent=(), rtol=1e-5, atol=1e-6, grad=False, equal_nan=False):
    """Runs fn on the CPU and on neuron (with gradients of every input when
    `grad`), compares, and checks the compiled graph: `row_kernels` fused row
    kernels and none of the ops in `absent`."""
    cpu = [x.clone().requires_grad_(grad) for x in inputs]
    dev = [x.neuron().requires_grad_(grad) for x in inputs]
    torch_neuron.mark_step()
    expected, got = fn(*cpu), fn(*dev)
    if grad:
        seed = torch.randn(expected.shape)
        expected = [expected] + list(torch.autograd.grad(expected, cpu, seed))
        got = [got] + list(torch.autograd.grad(got, dev, seed.neuron()))
    else:
        expected, got = [expected], [got]
    ir, _ = compiled(got)
    assert ir.count("= neuron::fused_row_kernel(") == row_kernels, ir
    for op in absent:
        assert f"aten::{op}(" not in ir, ir
    for e, g in zip(expected, got):
        torch.testing.assert_close(g.cpu(), e.detach(), rtol=rtol, atol=atol, equal_nan=equal_nan)
    return ir


@pytest.mark.parametrize("shape", [(64, 100), (3, 4, 50), (2, 5000), (1, 7)])
def test_softmax_forward_and_backward_are_one_kernel(shape):
    x = torch.randn(shape) * 3
    check(lambda t: torch.softmax(t, -1), x, grad=True, absent=["_softmax", "_softmax_backward_data"])


@pytest.mark.parametrize("shape", [(64, 100), (3, 4, 50), (2, 20000)])
def test_log_softmax_forward_and_backward(shape):
    x = torch.randn(shape) * 3
    # The backward, g - exp(y) * sum(g), subtracts a row sum of n gradients (of
    # size about sqrt(n)) summed in another order than ATen's: an ulp of it is an
    # absolute error of about 1.2e-7 * sqrt(n), seen up to 4e-6 at n = 20000.
    check(lambda t: torch.log_softmax(t, -1), x, grad=True, atol=4e-7 * math.sqrt(shape[-1]),
          absent=["_log_softmax", "_log_softmax_backward_data"])


def test_cross_entropy_forward_and_backward_match_cpu():
    logits, target = torch.randn(32, 10), torch.randint(0, 10, (32,))
    cpu = logits.clone().requires_grad_()
    dev = logits.neuron().requires_grad_()
    torch_neuron.mark_step()
    loss_cpu, loss = F.cross_entropy(cpu, target), F.cross_entropy(dev, target.neuron())
    (g_cpu,), (g,) = torch.autograd.grad(loss_cpu, cpu), torch.autograd.grad(loss, dev)
    ir, _ = compiled([loss, g])
    assert ir.count("= neuron::fused_row_kernel(") == 2  # log-softmax, its backward
    torch.testing.assert_close(loss.cpu(), loss_cpu.detach())
    torch.testing.assert_close(g.cpu(), g_cpu, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("normalized", [(33,), (5, 33)])
def test_affine_layer_norm_forward_and_backward(normalized):
    x = torch.randn(8, 5, 33) * 2 + 1
    w, b = torch.randn(normalized), torch.randn(normalized)
    ir = check(lambda t, w, b: F.layer_norm(t, normalized, w, b), x, w, b, grad=True, rtol=1e-4, atol=1e-5,
               absent=["native_layer_norm", "native_layer_norm_backward"])
    # The weight and bias gradients are sums over rows: library calls.
    assert ir.count("aten::sum.dim_IntList(") == 2


def test_layer_norm_without_affine_forward_is_a_kernel():
    x = torch.randn(16, 64)
    check(lambda t: F.layer_norm(t, (64,)), x, absent=["native_layer_norm"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("keepdim", [True, False])
def test_trailing_reductions_fuse_with_their_inputs(op, keepdim):
    x = torch.randn(6, 7, 37)

    def fn(t):
        return getattr(torch.exp(t) * 2 - 1, op)(dim=(-2, -1), keepdim=keepdim) * 3

    check(fn, x, rtol=1e-5, atol=1e-5)


def test_reduction_over_leading_dims_is_a_column_kernel():
    """Sums and amax over leading dims are column kernels (test_tier1_columns.py)."""
    x = torch.randn(8, 32)
    dev = x.neuron()
    torch_neuron.mark_step()
    out = (dev * 2).sum(0)
    ir, _ = compiled([out])
    assert "# columns of 8 rows of 32" in ir and "%2 = aten::sum" not in ir and ir.count("aten::sum") == 1, ir
    torch.testing.assert_close(out.cpu(), (x * 2).sum(0))
    peak = (dev * 2).amax(0)
    ir, _ = compiled([peak])
    instructions = [line for line in ir.splitlines() if line.strip().startswith("%")]
    assert "aten::amax(v1) [column]" in ir and not [i for i in instructions if "aten::amax" in i], ir
    torch.testing.assert_close(peak.cpu(), (x * 2).amax(0))


@pytest.mark.parametrize("op", ["amax", "amin"])
def test_amax_amin_propagate_nan_and_keep_infinities(op):
    x = torch.randn(6, 40)
    x[1, 3] = math.nan
    x[2, 39] = math.nan  # in the tail after the 16-lane blocks
    x[3, :] = math.inf
    x[4, :] = -math.inf
    x[5, 7] = math.inf
    expected = getattr(x * 1.5, op)(-1)
    assert expected[1].isnan() and expected[2].isnan()
    check(lambda t: getattr(t * 1.5, op)(-1), x, equal_nan=True)


def test_bias_row_and_single_value_broadcasts_fuse():
    x, bias, scale, one = torch.randn(16, 40), torch.randn(40), torch.randn(16, 1), torch.randn(())
    ir = check(lambda t, b, s, o: torch.relu(t + b) * s - o, x, bias, scale, one)
    assert "[0, 2, 1, 3]" in ir  # element, column, row, one


def test_large_rows_split_across_threads():
    # 256 rows of 1000: more than one thread's share, so rows are split.
    x = torch.randn(256, 1000)
    check(lambda t: torch.softmax(t * 0.5, -1) * 2, x)


def test_opt_level_0_keeps_the_aten_ops():
    x = torch.randn(4, 9)
    dev = x.neuron()
    torch_neuron.mark_step()
    out = torch.softmax(dev, -1)
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="0"):
        ir, sources = compiled([out])
        got = out.cpu()
    assert "aten::_softmax(" in ir and sources == ""
    torch.testing.assert_close(got, torch.softmax(x, -1))


VARIANCES = {
    "var_last_dim": lambda t: t.var(-1),
    "var_population_keepdim": lambda t: t.var(-1, unbiased=False, keepdim=True),
    "std_trailing_dims": lambda t: t.std(dim=(1, 2)),
    "std_everything": lambda t: t.std(),
    "var_in_a_chain": lambda t: (t * 2 - 1).var(-1, keepdim=True).sqrt() + 1,
    # A normalization written by hand: mean and var of one row, in one kernel.
    "normalize_by_hand": lambda t: (t - t.mean(-1, keepdim=True)) / (t.var(-1, keepdim=True) + 1e-5).sqrt(),
}


@pytest.mark.parametrize("name", VARIANCES)
def test_var_and_std_over_trailing_dims_are_row_kernels(name):
    x = torch.randn(6, 8, 40) * 3 + 2
    check(VARIANCES[name], x, absent=["var.correction", "std.correction"], rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:var\\(\\)")
def test_var_of_one_element_is_nan_as_on_the_cpu():
    # Rows of one element: element and row values have one shape, so the
    # squares and their sum land in two kernels.
    x = torch.randn(5, 1)
    check(lambda t: t.var(-1), x, row_kernels=2, absent=["var.correction"], equal_nan=True)


def test_var_with_a_correction_other_than_0_or_1_stays_a_library_call():
    # The correction is then a graph parameter, not a constant of the graph.
    x = torch.randn(6, 40)
    ir = check(lambda t: torch.var(t, -1, correction=2), x, row_kernels=0)
    assert "aten::var.correction(" in ir


def test_var_over_leading_dims_stays_a_library_call():
    x = torch.randn(30, 20)
    ir = check(lambda t: t.var(0), x, row_kernels=0)
    assert "aten::var.correction(" in ir


WHOLE = {
    "mse_by_hand": (lambda t, u: (t - u).pow(2).mean(), 1),
    "sum_of_product": (lambda t, u: (t * u).sum(), 1),
    "amin_keepdim": (lambda t, u: (t + u).amin(dim=[], keepdim=True), 1),
    "two_whole_reductions_in_one_kernel": (lambda t, u: t.sum() * 2 + u.mean(), 1),
    # A lone amax: one op, so the ATen call (over every dim) is as good.
    "lone_amax": (lambda t, u: t.amax(), 0),
}


@pytest.mark.parametrize("name", WHOLE)
def test_whole_tensor_reductions_are_row_kernels_of_one_row(name):
    fn, kernels = WHOLE[name]
    x, y = torch.randn(6, 8, 40), torch.randn(6, 8, 40)
    ir = check(fn, x, y, row_kernels=kernels, rtol=1e-5, atol=1e-5)
    instructions = [line for line in ir.splitlines() if line.strip().startswith("%")]
    assert not [i for i in instructions if re.search(r"= aten::(sum|mean|amin)\(", i)], ir
