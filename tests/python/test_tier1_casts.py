"""Casts and type promotion in tier-1 kernels.

Inside a kernel values are float32: inputs of other dtypes convert as they are
loaded, casts (_to_copy) convert as they are stored. Every case here must give
exactly the CPU's values and dtypes at both optimization levels; the fusion
cases must also compile to one kernel, and the cases whose conversion would not
be exact through float32 must stay ATen calls.
"""

import pytest
import torch

import torch_neuron

LEVELS = ["0", "1"]


def inputs():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(37, 29, generator=gen) * 50
    return {
        "x": x,
        "w": torch.randn(37, 29, generator=gen),
        "i64": torch.randint(-1000, 1000, (37, 29), generator=gen),
        "big": torch.randint(2**24, 2**40, (37, 29), generator=gen),  # not exact in float32
        "i32": torch.randint(-1000, 1000, (37, 29), generator=gen, dtype=torch.int32),
        "i16": torch.randint(-1000, 1000, (37, 29), generator=gen, dtype=torch.int16),
        "i8": torch.randint(-100, 100, (37, 29), generator=gen, dtype=torch.int8),
        "u8": torch.randint(0, 255, (37, 29), generator=gen, dtype=torch.uint8),
        "mask": torch.rand(37, 29, generator=gen) > 0.5,
        "bf16": (torch.randn(37, 29, generator=gen) * 10).to(torch.bfloat16),
        "f16": (torch.randn(37, 29, generator=gen) * 10).half(),
        "f64": torch.randn(37, 29, generator=gen, dtype=torch.float64) * 1e3,
        "d0": torch.tensor(0.1, dtype=torch.float64),  # a 0-dim double: the op stays float32
    }


# name -> (function of the inputs dict, kernels fused at level 1)
CASES = {
    "float_to_long": (lambda t: (t["x"] * 0.5 - 3).long(), 1),
    "float_to_int": (lambda t: (t["x"] / 3).int(), 1),
    "float_to_bool": (lambda t: torch.relu(t["x"] - 10).bool(), 1),
    "float_to_double": (lambda t: (t["x"] * t["w"]).double(), 1),
    "float_to_bfloat16": (lambda t: torch.tanh(t["x"] * 0.01).to(torch.bfloat16), 1),
    "float_to_half": (lambda t: (t["x"] * 0.37 + 1).half(), 1),
    "half_to_float": (lambda t: t["f16"].float() * t["w"] + 1, 1),
    "promote_float_plus_half": (lambda t: (t["w"] + t["f16"]) * 2, 1),
    "half_cast_read_inside_kernel": (lambda t: (t["x"] * 0.1).half() * t["w"], 1),
    "bool_to_float": (lambda t: t["mask"].float() * t["x"] + 1, 1),
    "u8_i8_i16_to_float": (lambda t: t["u8"].float() + t["i8"].float() * t["i16"].float(), 1),
    "i32_to_float": (lambda t: t["i32"].float() * 0.25 + t["w"], 1),
    "i64_to_float": (lambda t: torch.sigmoid(t["i64"].float() * 0.01), 1),
    "big_i64_to_float": (lambda t: t["big"].float() * 2 + 1, 1),
    "bf16_to_float": (lambda t: torch.exp(t["bf16"].float() * 0.1) * t["w"], 1),
    "f64_to_float": (lambda t: t["f64"].float() * 3 + t["w"], 1),
    "promote_float_plus_long": (lambda t: (t["x"] + t["i64"]) * 0.5, 1),
    "promote_float_times_bool": (lambda t: (t["x"] * t["mask"]) - 1, 1),
    "promote_float_plus_big_long": (lambda t: (t["w"] + t["big"]) * 2, 1),
    "promote_long_div_long": (lambda t: torch.div(t["i64"], t["i64"].abs() + 1) * t["w"], 1),
    "promote_0dim_double": (lambda t: (t["x"] * t["d0"]) + 1, 1),
    "where_long_and_float": (lambda t: torch.where(t["mask"], t["i64"], t["x"]) * 2, 1),
    "cast_read_inside_kernel": (lambda t: (t["x"] * 0.1).long() + t["w"], 1),
    "bf16_cast_read_inside_kernel": (lambda t: (t["x"] * 0.1).to(torch.bfloat16) * t["w"], 1),
    "two_casts_out": (lambda t: (lambda y: [y.to(torch.bfloat16), y.long()])(t["x"] * 2), 1),
    # Not exact through float32: ATen converts these directly; they stay ATen calls.
    "big_long_to_int": (lambda t: (t["big"] + 1).int(), 0),
    "f64_to_long": (lambda t: (t["f64"] * 1e4).long(), 0),
    # No cast rule for int16: the cast stays an ATen call.
    "float_to_int16": (lambda t: (t["x"] * 2).to(torch.int16), 0),
    "compare_big_longs": (lambda t: (t["big"] > t["big"].flip(0)).float() * t["w"], 1),
}


def as_list(result):
    return result if isinstance(result, list) else [result]


def run_on_neuron(fn, level):
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=level):
        t = {k: v.neuron() for k, v in inputs().items()}
        torch_neuron.mark_step()
        return [r.cpu() for r in as_list(fn(t))]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", CASES)
def test_cast_matches_cpu_exactly(name, level):
    fn, _ = CASES[name]
    expected = as_list(fn(inputs()))
    got = run_on_neuron(fn, level)
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype
        if e.dtype == torch.float32 and name in ("i64_to_float", "bf16_to_float", "float_to_bfloat16"):
            # exp/tanh/sigmoid: the kernels' own formulas, within float rounding
            torch.testing.assert_close(g, e, rtol=2e-6, atol=1e-6)
        else:
            assert torch.equal(g, e), (g.double() - e.double()).abs().max()


@pytest.mark.parametrize("name", CASES)
def test_cast_fuses_into_the_expected_kernels(name):
    fn, kernels = CASES[name]
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        t = {k: v.neuron() for k, v in inputs().items()}
        torch_neuron.mark_step()
        ir, _ = torch_neuron.debug.compiled_text(as_list(fn(t)))
    assert ir.count("neuron::fused_kernel(") + ir.count("neuron::fused_row_kernel(") == kernels, ir
    if kernels:
        assert "aten::_to_copy(" not in ir, ir


def test_bfloat16_stores_round_to_nearest_even_and_keep_nan():
    # Float32 values exactly between two bfloat16 values (ties), just above and
    # below them, and the specials.
    bits = torch.tensor([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x7F7FFFFF, 0xFF800000,
                         0x7FC00001, 0x00008000, 0x80018000], dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    expected = (x * 1.0).to(torch.bfloat16)
    xn = x.neuron()
    torch_neuron.mark_step()
    got = (xn * 1.0).to(torch.bfloat16).cpu()
    # Bit for bit, except the NaN's bits: ATen's vectorized CPU conversion
    # gives 0xFFFF, its scalar one (c10::BFloat16) and the kernels 0x7FC0.
    nan = expected.isnan()
    assert nan.tolist() == [False] * 6 + [True, False, False]
    assert got[nan].isnan().all()
    assert got[~nan].view(torch.int16).tolist() == expected[~nan].view(torch.int16).tolist()


def test_float16_loads_every_value_and_stores_round_to_nearest_even():
    # Every float16 bit pattern converted in a kernel; then float32 values
    # across float16's range, ties between two float16 values (normal and
    # subnormal), the overflow boundary (65520 rounds to infinity) and the
    # specials, stored as float16.
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    ones = torch.ones(every.shape)
    gen = torch.Generator().manual_seed(0)
    ties = torch.tensor([0x3F801000, 0x3F803000, 0x33000000, 0x33800000, 0x33C00000, 0x387FC000, 0x387FE000,
                         0x477FEFFF, 0x477FF000, 0x477FE000, 0x80000000, 0x7F800000, 0x7FC00000],
                        dtype=torch.int64).to(torch.int32).view(torch.float32)
    x = torch.cat([torch.randn(20000, generator=gen) * s for s in (1e-7, 1e-5, 1, 3e4, 1e5)] + [ties, -ties])
    loaded_expected, stored_expected = every.float() * ones, (x * 1.0).half()
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        every_n, ones_n, xn = every.neuron(), ones.neuron(), x.neuron()
        torch_neuron.mark_step()
        loaded, stored = every_n.float() * ones_n, (xn * 1.0).half()
        ir, _ = torch_neuron.debug.compiled_text([loaded, stored])
        loaded, stored = loaded.cpu(), stored.cpu()
    assert ir.count("neuron::fused_kernel(") == 2 and "aten::_to_copy(" not in ir, ir
    for got, expected in ((loaded, loaded_expected), (stored, stored_expected)):
        # Bit for bit; NaNs as NaNs (their payload bits are the converter's).
        nan = expected.isnan()
        assert got[nan].isnan().all()
        bits = torch.int32 if got.dtype == torch.float32 else torch.int16
        assert torch.equal(got[~nan].view(bits), expected[~nan].view(bits))


def test_donated_buffer_takes_only_an_output_of_its_dtype():
    """A parameter updated in place next to an int64 result of the same kernel:
    the float32 update goes into the parameter's donated buffer (4 bytes per
    element), the int64 output into a new one."""
    torch.manual_seed(0)
    ref = torch.randn(1000)
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        p = ref.neuron()
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
        before = torch_neuron.metrics.counter("graph.donated.in_place_bytes")
        p.mul_(2).add_(1)
        counts = (p * 10).long()
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()
        donated = torch_neuron.metrics.counter("graph.donated.in_place_bytes") - before
    expected = ref * 2 + 1
    assert torch.equal(p.cpu(), expected)
    assert torch.equal(counts.cpu(), (expected * 10).long())
    assert donated == 4 * 1000
