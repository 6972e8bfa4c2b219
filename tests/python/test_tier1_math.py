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


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_fused_gelu_and_its_backward_match_cpu(approximate):
    # erf is Abramowitz-Stegun 7.1.26 (absolute error under 1.5e-7): GELU and
    # its gradient come out within about 1.2e-6 absolute of the CPU's (measured
    # over this sweep); in the far negative tail, where GELU is under 1e-7,
    # that is absolute, not relative, closeness.
    import torch.nn.functional as F
    x = torch.cat([torch.linspace(-12.0, 12.0, 200_001), torch.randn(10_000) * 3,
                   torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0])])
    seed = torch.rand_like(x) + 0.5
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        d = x.neuron().requires_grad_()
        torch_neuron.mark_step()
        y = F.gelu(d * 1.0, approximate=approximate)
        (g,) = torch.autograd.grad(y, d, seed.neuron())
        text = torch_neuron.debug.compiled_text([y, g])[0]
        y, g = y.cpu(), g.cpu()
    assert f"aten::gelu[{approximate}]" in text and f"aten::gelu_backward[{approximate}]" in text
    c = x.clone().requires_grad_()
    y_cpu = F.gelu(c * 1.0, approximate=approximate)
    (g_cpu,) = torch.autograd.grad(y_cpu, c, seed)
    torch.testing.assert_close(y[:-4], y_cpu[:-4].detach(), rtol=1e-6, atol=1.5e-6)
    torch.testing.assert_close(g[:-4], g_cpu[:-4], rtol=1e-6, atol=2.5e-6)
    # -inf, NaN and 0 as the CPU; GELU(inf) is inf here, NaN from ATen's CPU kernel.
    torch.testing.assert_close(y[-3:], y_cpu[-3:].detach(), equal_nan=True)
    assert y[-4] == float("inf")
