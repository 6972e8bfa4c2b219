"""Tier 1's own exp and tanh (vectorizable straight-line code in place of libm
calls) against the CPU's kernels: over a sweep of [-120, 120] and the special
values, every fused exp, sigmoid and tanh result matches within 4e-7 relative
(a few float32 ulp), and inf, -inf, NaN and the overflow/underflow ends come
out as the CPU's do.
"""

import pytest
import torch

import torch_neuron

SPECIAL = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 88.72, 88.8, 89.0, -87.0,
           -103.0, 1e-30, -1e-30, 0.2499, 0.25, 0.2501, 20.0, -20.0, 1e-4]


def inputs():
    sweep = torch.linspace(-120.0, 120.0, 200_001)
    return torch.cat([sweep, torch.tensor(SPECIAL), torch.randn(10_000) * 3])


FORMULAS = {
    # Each is a two-op chain so that it fuses into a kernel (a lone op stays an
    # ATen call).
    "exp": lambda x: torch.exp(x * 1.0),
    "sigmoid": lambda x: torch.sigmoid(x * 1.0),
    "tanh": lambda x: torch.tanh(x * 1.0),
    "tanh_backward_chain": lambda x: torch.tanh(torch.exp(x * 0.01)),
}


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_fused_math_matches_cpu(name):
    fn = FORMULAS[name]
    x = inputs()
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        torch_neuron.metrics.reset()
        got = fn(x.neuron())
        text = torch_neuron.debug.compiled_text([got])[0]
        got = got.cpu()
    assert "neuron::fused_kernel" in text  # the generated code ran, not ATen's
    expected = fn(x)
    # Results under about 2e-38 flush to zero (documented in kernel_codegen.cc).
    torch.testing.assert_close(got, expected, rtol=4e-7, atol=2e-38, equal_nan=True)
    special = got[-10_000 - len(SPECIAL):-10_000]
    want = expected[-10_000 - len(SPECIAL):-10_000]
    assert torch.equal(special.isnan(), want.isnan())
    assert torch.equal(special.isinf(), want.isinf())
    assert torch.equal(special[want.isinf()], want[want.isinf()])
