"""Tier 1 fuses comparisons, masks and selects: bool tensors are kernel inputs
(read as 0 or 1) and outputs (stored as value != 0), so `where`, `masked_fill`,
dropout's backward and attention's safe softmax run inside generated kernels.
Each case is compared with the CPU (bool results exactly) and checked to compile
to kernels; a donated bool buffer is never reused for a float32 output.
"""

import math
import re

import pytest
import torch

import torch_neuron

torch.manual_seed(0)
X = torch.randn(4, 6, 8)
MASK = torch.rand(4, 6, 8) > 0.5
SCORES = torch.randn(2, 3, 8, 8)
SCORES[0, 1, 2] = -math.inf  # a row with nothing to attend to
CAUSAL = torch.ones(8, 8).tril().bool()

CASES = {
    "where_of_a_comparison": (lambda x: torch.where(x > 0, x * 2, x - 1), [X]),
    # The Python 0.0 becomes a folded 0-dim constant, read as one value.
    "where_with_a_constant": (lambda x: torch.where(x > 0, x * 2, 0.0) + 1, [X]),
    "masked_fill": (lambda x, m: (x * 2).masked_fill(m, -1.5) + 1, [X, MASK]),
    "comparison_result": (lambda x: (x * 2) > 1, [X]),
    "comparisons_combined": (lambda x: torch.where((x * 3 <= 1) == (x >= -0.5), x, -x), [X]),
    "dropout_backward": (lambda x, m: torch.ops.aten.native_dropout_backward(x * 2, m, 1.25) + 1, [X, MASK]),
    "mask_per_row_position": (lambda s, c: torch.softmax((s * 0.5).masked_fill(~c, -math.inf), -1),
                              [SCORES, CAUSAL]),
    "safe_softmax": (lambda s: torch.ops.aten._safe_softmax(s * 1.0, -1), [SCORES]),
    # torch._refs.sinc: one kernel stores x * pi and the mask (its second
    # output); sin runs as ATen between, and a second kernel reads both. It was
    # told its mask input is float32 (the first output's dtype) and raised
    # "expected Float ..., got Bool" when it ran.
    "second_output_of_another_kernel": (
        lambda x: (lambda a: torch.where(a == 0, 1, torch.sin(a) / a))(x * math.pi), [X]),
}


@pytest.mark.parametrize("name", CASES)
def test_masks_and_comparisons_fuse_and_match_cpu(name):
    fn, args = CASES[name]
    dev = [a.neuron() for a in args]
    torch_neuron.mark_step()
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        out = fn(*dev)
        ir, _ = torch_neuron.debug.compiled_text([out])
        got = out.cpu()
    expected = fn(*args)
    assert got.dtype == expected.dtype
    if got.dtype == torch.bool:
        assert torch.equal(got, expected)
    else:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert "neuron::fused" in ir
    for op in ("where.self", "masked_fill.Scalar", "native_dropout_backward", "_safe_softmax", "gt.Scalar"):
        assert not re.search(rf"^  %\S+ = aten::{re.escape(op)}\(", ir, re.M), ir


def test_safe_softmax_gives_zeros_for_a_row_of_minus_infinity():
    dev = SCORES.neuron()
    torch_neuron.mark_step()
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        got = torch.ops.aten._safe_softmax(dev * 1.0, -1).cpu()
    assert torch.equal(got[0, 1, 2], torch.zeros(8))
    assert not got.isnan().any()


def test_a_donated_bool_buffer_never_takes_a_float_output():
    n = 1000
    torch.manual_seed(1)
    masks = [torch.rand(n) > 0.5 for _ in range(3)]
    p_cpu = torch.randn(n)
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        p = p_cpu.neuron()
        for m_cpu in masks:
            m = m_cpu.neuron()
            torch_neuron.mark_step()
            torch_neuron.wait_device_ops()
            before = torch_neuron.metrics.counter("graph.donated.in_place_bytes")
            # The mask and the old p are both donated: only p's buffer (float32)
            # may take the result.
            p = torch.where(m, p * 2, p + 1)
            del m
            torch_neuron.mark_step()
            torch_neuron.wait_device_ops()
            assert torch_neuron.metrics.counter("graph.donated.in_place_bytes") - before == 4 * n
            p_cpu = torch.where(m_cpu, p_cpu * 2, p_cpu + 1)
        torch.testing.assert_close(p.cpu(), p_cpu)
