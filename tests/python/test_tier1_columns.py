"""Column reductions in tier-1 kernels: sums and means over the leading dims
(bias gradients) fuse with the element ops they read into a column kernel,
which runs by columns over all rows in order.

Each case is checked against the CPU at both optimization levels, by the
kernels it compiles to. test_kernel_threads.py checks that the sums do not
depend on how many threads run the kernel.
"""

import pytest
import torch

import torch_neuron

LEVELS = ["0", "1"]


def inputs(rows=96, cols=40):
    gen = torch.Generator().manual_seed(0)
    return {
        "g": torch.randn(rows, cols, generator=gen),
        "h": torch.randn(rows, cols, generator=gen),
        "b": torch.randn(cols, generator=gen),
        "s": torch.randn(rows, 1, generator=gen),
        "one": torch.randn(1, generator=gen),
        "g3": torch.randn(4, 24, 40, generator=gen),
        "h3": torch.randn(4, 24, 40, generator=gen),
    }


# name -> (function of the inputs dict, column kernels at level 1, other kernels)
CASES = {
    # ReLU's backward and the bias gradient it feeds: one column kernel with
    # two outputs (the masked gradient feeds a matmul).
    "relu_backward_and_bias_grad": (
        lambda t: (lambda m: [m, m.sum(0), m @ t["h"].t()])(torch.ops.aten.threshold_backward(t["g"], t["h"], 0.0)), 1, 0),
    "sum_keepdim": (lambda t: (t["g"] * t["h"]).sum(0, keepdim=True), 1, 0),
    "mean_of_product": (lambda t: (t["g"] * t["h"] + 1).mean(0), 1, 0),
    "two_sums_of_one_product": (lambda t: (lambda p: [p.sum(0), (p * t["h"]).sum(0)])(t["g"] * 2), 1, 0),
    "every_input_extent": (lambda t: ((t["g"] + t["b"]) * t["s"] - t["one"]).sum(0), 1, 0),
    "over_two_leading_dims": (lambda t: (t["g3"] * t["h3"]).sum([0, 1]), 1, 0),
    "over_two_leading_dims_keepdim": (lambda t: torch.tanh(t["g3"]).mean([0, 1], keepdim=True), 1, 0),
    "negative_dims": (lambda t: (t["g3"] - t["h3"]).sum([-3, -2]), 1, 0),
    "bool_mask_in_the_sum": (lambda t: torch.where(t["h"] > 0, t["g"], t["h"]).sum(0), 1, 0),
    # where's Python 0.0 is a folded 0-dim constant: read as one value.
    "where_with_a_constant_zero": (lambda t: torch.where(t["h"] > 0, t["g"], 0.0).sum(0), 1, 0),
    # The sum read inside the same expression: that reader is another kernel.
    "sum_read_by_an_element_op": (lambda t: (lambda p: p.sum(0) * p)(t["g"] * t["h"]), 1, 0),
    "amax_over_rows": (lambda t: (t["g"] * t["h"] + t["b"]).amax(0), 1, 0),
    "amin_keepdim": (lambda t: torch.tanh(t["g3"]).amin([0, 1], keepdim=True), 1, 0),
    "amax_and_sum_of_one_product": (lambda t: (lambda p: [p.amax(0), p.sum(0)])(t["g"] * t["h"]), 1, 0),
    # Not over leading dims: an ATen call.
    "middle_dim": (lambda t: (t["g3"] * t["h3"]).sum(1), 0, 0),
    # Leading dims of the whole tensor: a row reduction (one row).
    "all_dims": (lambda t: (t["g"] * t["h"]).sum([0, 1]), 0, 1),
}


def as_list(result):
    return result if isinstance(result, list) else [result]


def on_neuron(fn, level, **shape):
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=level):
        t = {k: v.neuron() for k, v in inputs(**shape).items()}
        torch_neuron.mark_step()
        return [r.cpu() for r in as_list(fn(t))]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", CASES)
def test_column_reduction_matches_cpu(name, level):
    fn = CASES[name][0]
    expected = as_list(fn(inputs()))
    got = on_neuron(fn, level)
    for e, g in zip(expected, got):
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", CASES)
def test_column_reduction_compiles_to_the_expected_kernels(name):
    fn, columns, others = CASES[name]
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        t = {k: v.neuron() for k, v in inputs().items()}
        torch_neuron.mark_step()
        ir, _ = torch_neuron.debug.compiled_text(as_list(fn(t)))
    kernels = [line for line in ir.splitlines() if "= neuron::fused_" in line]
    summaries = [line.strip() for line in ir.splitlines() if line.strip().startswith("#")]
    assert sum(s.startswith("# columns of") for s in summaries) == columns, ir
    assert len(kernels) - columns == others, ir
    if columns:
        instructions = [line.strip() for line in ir.splitlines() if line.strip().startswith("%")]
        assert not [i for i in instructions if any(f"aten::{r}" in i for r in ("sum", "mean", "amax", "amin"))], ir


def test_column_amax_and_amin_keep_nan_and_infinities():
    """A NaN anywhere in a column is that column's amax and amin; infinities
    and an all-negative column come through as on the CPU."""
    x = torch.randn(300, 300, generator=torch.Generator().manual_seed(2))
    x[17, 3] = float("nan")   # early in its column
    x[299, 5] = float("nan")  # the last row
    x[150, 7] = float("inf")
    x[40, 9] = float("-inf")
    x[:, 11] = -torch.rand(300) - 1
    fn = lambda t: (lambda p: [p.amax(0), p.amin(0)])(t * 2)  # noqa: E731
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        xn = x.neuron()
        torch_neuron.mark_step()
        got = fn(xn)
        ir, _ = torch_neuron.debug.compiled_text(got)
        got = [g.cpu() for g in got]
    assert ir.count("# columns of") == 1, ir
    for g, e in zip(got, fn(x)):
        assert torch.equal(g.isnan(), e.isnan())
        assert torch.equal(g.nan_to_num(0.0), e.nan_to_num(0.0))


def test_long_columns_sum_in_chunks_and_stay_accurate():
    """20000 rows: the kernel adds float32 partial sums of 64 rows in float64,
    so its error stays within that of ATen's own sum against a float64
    reference."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(20000, 48, generator=gen) + 0.5  # positive: errors accumulate
    reference = (x.double() * 3).sum(0)
    cpu_error = ((x * 3).sum(0).double() - reference).abs().max().item()
    xn = x.neuron()
    torch_neuron.mark_step()
    got = (xn * 3).sum(0).cpu().double()
    # about 60000 per column: float32 spacing there is 0.0039
    assert (got - reference).abs().max().item() <= cpu_error


def test_mlp_bias_gradients_come_from_column_kernels():
    """The MLP's Linear bias gradients (sum over the batch) fuse with ReLU's
    backward; the step still matches the CPU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        model.neuron()
        xn, yn = x.neuron(), y.neuron()
        torch_neuron.mark_step()
        torch.nn.functional.cross_entropy(model(xn), yn).backward()
        grads = [p.grad for p in model.parameters()]
        ir, _ = torch_neuron.debug.compiled_text(grads)
        got = [g.cpu() for g in grads]
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    assert "columns of 64 rows of 32" in ir, ir
