"""Tier-1 kernels for ops whose result is bfloat16 or float16.

ATen's CPU kernels compute such an op in float32 and round its result to the
result's dtype, once per op. A fused op does the same (its value is rounded
where ATen would store it), so a chain of reduced-precision ops fuses into one
kernel and gives exactly the CPU's bits. Scalars are read as ATen reads them:
add and sub round theirs to the result's dtype first, mul and div take them as
float32. Rules that ATen computes otherwise (addcmul, addcdiv, lerp, pow) stay
library calls.
"""

import pytest
import torch

import torch_neuron

DTYPES = [torch.bfloat16, torch.float16]
LEVELS = ["0", "1"]


# Whole vectors of ATen's CPU kernels and one thread's work: ATen's vectorized
# loop rounds add's alpha to the result's dtype, its scalar tail does not, so
# a tail's elements could differ from ATen's own main loop by one unit.
SHAPE = (64, 48)


def inputs(dtype):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(SHAPE, generator=gen).to(dtype)
    b = torch.randn(SHAPE, generator=gen).to(dtype)
    c = torch.randn(SHAPE, generator=gen).to(dtype)
    return {"a": a, "b": b, "c": c, "mask": torch.rand(SHAPE, generator=gen) > 0.5}


# name -> (function of the inputs dict, kernels at level 1, exact)
CASES = {
    # 0.3, 0.7 and 1.3 are not exact in either dtype: each op's scalar reading shows.
    "add_sub_scalars": (lambda t: (t["a"] + 0.3) - t["b"] * 0.7, 1, True),
    "alpha": (lambda t: torch.add(t["a"], t["b"], alpha=0.3) - torch.sub(t["c"], t["a"], alpha=1.3), 1, True),
    "add_scalar_overload": (lambda t: torch.ops.aten.add.Scalar(t["a"] * t["b"], 0.3, 0.7), 1, True),
    "mul_div_scalars": (lambda t: (t["a"] * 0.3) / 0.7 + t["b"] / t["c"].abs().add(1), 1, True),
    "masks_and_selects": (lambda t: torch.where(t["mask"], torch.relu(t["a"] - 0.3), -t["b"].abs())
                          .masked_fill(t["b"] > 1, 0.3), 1, True),
    "max_min": (lambda t: torch.maximum(t["a"], t["b"]) - torch.minimum(t["b"], t["c"] * 0.3), 1, True),
    "backward_forms": (lambda t: torch.ops.aten.threshold_backward(t["a"], t["b"], 0.3)
                       + torch.ops.aten.native_dropout_backward(t["c"], t["mask"], 1.3), 1, True),
    "cast_out_to_float": (lambda t: (t["a"] * t["b"] + 0.3).float() * 0.1, 1, True),
    "two_outputs": (lambda t: (lambda y: [y, y * t["c"]])(t["a"] - t["b"] * 0.3), 1, True),
    # The kernels' own exp, tanh and erf round to the same value but for the
    # odd float32 result at a rounding boundary: within one unit in the last place.
    "transcendental": (lambda t: torch.tanh(t["a"]) * torch.sigmoid(t["b"]) + torch.exp(t["c"] * 0.5), 1, False),
    "gelu": (lambda t: torch.nn.functional.gelu(t["a"] * 2), 1, False),
    # Computed otherwise by ATen: library calls.
    "addcmul": (lambda t: torch.addcmul(t["a"], t["b"], t["c"], value=0.3), 0, True),
    "lerp": (lambda t: torch.lerp(t["a"], t["b"], 0.3), 0, True),
}


def as_list(result):
    return result if isinstance(result, list) else [result]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", CASES)
def test_matches_cpu(name, dtype, level):
    fn, _, exact = CASES[name]
    expected = as_list(fn(inputs(dtype)))
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=level):
        t = {k: v.neuron() for k, v in inputs(dtype).items()}
        torch_neuron.mark_step()
        got = [r.cpu() for r in as_list(fn(t))]
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype
        if exact:
            assert torch.equal(g, e), f"{(g != e).sum().item()} of {e.numel()} differ"
        else:
            ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
            torch.testing.assert_close(g.float(), e.float(), rtol=ulp, atol=1e-5)
            # Bits may differ only at the odd rounding boundary. Values under
            # 1e-2 are left to atol: there (gelu's far negative tail) 1 + erf
            # cancels, and the CPU's own result moves with its exp (AVX-512
            # and AVX2 builds of ATen differ from each other in those bits).
            big = e.float().abs() >= 1e-2
            assert (g != e)[big].float().mean() < 0.01


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", CASES)
def test_fuses_into_the_expected_kernels(name, dtype):
    fn, kernels, _ = CASES[name]
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        t = {k: v.neuron() for k, v in inputs(dtype).items()}
        torch_neuron.mark_step()
        ir, _ = torch_neuron.debug.compiled_text(as_list(fn(t)))
    assert ir.count("neuron::fused_kernel(") == kernels, ir
    short = "BFloat16" if dtype == torch.bfloat16 else "Half"
    assert (f"[{short}]" in ir) == (kernels > 0), ir


def test_a_bfloat16_training_step_matches_the_cpu():
    # An MLP in bfloat16: forward, backward and SGD fuse their reduced-precision
    # elementwise ops (GELU, its backward, the update); matmuls stay library calls.
    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
        model = model.to(torch.bfloat16).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(8, 16, generator=gen).to(torch.bfloat16).to(device)
        y = torch.randn(8, 4, generator=gen).to(torch.bfloat16).to(device)
        for _ in range(3):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if device == "neuron":
                torch_neuron.mark_step()
        return [p.detach().cpu() for p in model.parameters()]

    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        got = run("neuron")
    for g, e in zip(got, run("cpu")):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), e.float(), rtol=2.0 ** -7, atol=1e-3)
