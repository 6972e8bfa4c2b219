"""The strided general path of flat kernels.

A view op runs as a view when its readers take any strides, so a fused kernel
can receive a non-contiguous input. Where the input's innermost dim is
contiguous or broadcast (expand, narrow, a permute of outer dims), the kernel
reads it in place through its strides; a transposed innermost dim is copied
first. Every case must match the CPU exactly, and kernel.strided.count says
which path ran.
"""

import pytest
import torch

import torch_neuron


def inputs():
    gen = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(48, 64, generator=gen),
        "y": torch.randn(48, 64, generator=gen),
        "row": torch.randn(64, generator=gen),
        "col": torch.randn(48, 1, generator=gen),
        "wide": torch.randn(48, 128, generator=gen),
        "cube": torch.randn(6, 8, 64, generator=gen),
        "mask": torch.rand(48, 64, generator=gen) > 0.5,
        "i64": torch.randint(-50, 50, (48, 64), generator=gen),
        "bf16": torch.randn(48, 64, generator=gen).to(torch.bfloat16),
        "deep": torch.randn(2, 2, 2, 2, 2, 2, 2, 2, 3, generator=gen),
    }


# name -> (function of the inputs, strided kernel calls expected)
CASES = {
    "expand_row": (lambda t: (t["row"].expand(48, 64) * t["y"] + 1).relu(), 1),
    "expand_column": (lambda t: torch.tanh(t["col"].expand(48, 64) - t["x"]) * 2, 1),
    "narrow": (lambda t: torch.sigmoid(t["wide"][:, 32:96] + t["x"]) * 3, 1),
    "permute_outer_dims": (lambda t: (t["cube"].permute(1, 0, 2) * 2 + 1).exp(), 1),
    "expanded_bfloat16": (lambda t: t["bf16"][0].expand(48, 64).float() * t["x"] - 1, 1),
    "expanded_bool_and_long": (
        lambda t: torch.where(t["mask"][0].expand(48, 64), t["i64"][0].expand(48, 64), t["x"]) + 1, 1),
    "transpose_is_copied": (lambda t: torch.tanh(t["x"].t() * 2 + t["y"].t()) + 1, 0),
    "transpose_and_expand": (lambda t: (t["x"].t() + t["row"][:48].unsqueeze(1).expand(48, 64).t()) * 2, 1),
    "rank_nine_is_copied": (lambda t: (t["deep"].transpose(0, 1) * 2 + 1).relu(), 0),
}


@pytest.mark.parametrize("name", CASES)
def test_strided_input_matches_cpu_and_takes_the_expected_path(name):
    fn, strided_calls = CASES[name]
    expected = fn(inputs())
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        t = {k: v.neuron() for k, v in inputs().items()}
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
        before = torch_neuron.metrics.counter("kernel.strided.count")
        got = fn(t).cpu()
        calls = torch_neuron.metrics.counter("kernel.strided.count") - before
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    assert calls == strided_calls


def test_strided_path_splits_across_threads_like_the_contiguous_one():
    """Large enough to split: each thread starts its run mid-row."""
    gen = torch.Generator().manual_seed(2)
    row, y = torch.randn(1000, generator=gen), torch.randn(333, 1000, generator=gen)
    expected = (row.expand(333, 1000) * y).sigmoid()
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        rn, yn = row.neuron(), y.neuron()
        torch_neuron.mark_step()
        got = (rn.expand(333, 1000) * yn).sigmoid().cpu()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
