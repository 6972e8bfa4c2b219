"""The tracer's C++ Meta kernels of structured ops (csrc/lazy/structured_meta.cc).

For the ops of its table, the tracer calls ATen's C++ meta function (the one
the CPU kernel runs) instead of the Python Meta kernel `import torch` puts in
front of it. The dispatcher's kernel stays the reference: every op of the
table is traced from OpInfo's samples both ways, and both must give the same
IR, while the results' dtypes, shapes and strides must be the CPU's.
"""

import functools
import os
import subprocess
import sys

import pytest
import torch

import torch_neuron
from torch_neuron import debug

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "conformance"))

import harness  # noqa: E402  (imports torch_neuron before torch.testing)

# In-place forms (add_.Tensor) are traced as their functional form, so no
# OpInfo sample reaches them in the IR: test_in_place_forms_check_as_the_cpu.
IN_PLACE = [name for name in torch_neuron._C._structured_meta_ops() if name.split(".")[0].endswith("_")]
TABLE = [name for name in torch_neuron._C._structured_meta_ops() if name not in IN_PLACE]
OPINFOS = harness.ops_by_name()
SAMPLES = 4

# OpInfo entries that reach a table op whose name they do not carry.
EXTRA = {
    "_softmax": ["softmax"], "_log_softmax": ["log_softmax"],
    "_softmax_backward_data": ["softmax"], "_log_softmax_backward_data": ["log_softmax"],
    "nll_loss_forward": ["nn.functional.nll_loss"], "nll_loss_backward": ["nn.functional.nll_loss"],
    "max_pool2d_with_indices": ["nn.functional.max_pool2d"],
    "max_pool2d_with_indices_backward": ["nn.functional.max_pool2d"],
    "avg_pool2d": ["nn.functional.avg_pool2d"], "avg_pool2d_backward": ["nn.functional.avg_pool2d"],
    "tanh_backward": ["tanh"], "sigmoid_backward": ["sigmoid"], "silu_backward": ["nn.functional.silu"],
    "gelu_backward": ["nn.functional.gelu"], "threshold_backward": ["nn.functional.relu"],
    "elu_backward": ["nn.functional.elu"], "softplus_backward": ["nn.functional.softplus"],
    "leaky_relu_backward": ["nn.functional.leaky_relu"],
    "hardsigmoid_backward": ["nn.functional.hardsigmoid"],
    "max": ["max.reduction_with_dim"], "min": ["min.reduction_with_dim"],
    "sum": ["sum"], "mean": ["mean"], "prod": ["prod"], "pow": ["pow", "float_power"],
    "scatter_reduce": ["scatter_reduce.sum", "scatter_reduce.amax"],
    "div": ["div.no_rounding_mode", "div.floor_rounding", "div.trunc_rounding"],
"linalg_vector_norm": ["linalg.vector_norm"],
    "clamp_min": ["clamp_min", "clamp"], "clamp_max": ["clamp_max", "clamp"],
    "xlogy": ["xlogy"], "round": ["round"], "cat": ["cat"],
}


# Overloads no OpInfo sample reaches (OpInfo passes tensors where these take
# numbers), called on a float32 and an int64 tensor.
CALLS = {
    "aten::clamp_max": lambda x: x.clamp_max(2),
    "aten::clamp_min": lambda x: x.clamp_min(2),
    "aten::eq.Scalar": lambda x: x == 2,
    "aten::ne.Scalar": lambda x: x != 2,
    "aten::lt.Scalar": lambda x: x < 2,
    "aten::le.Scalar": lambda x: x <= 2,
    "aten::gt.Scalar": lambda x: x > 2.5,
    "aten::ge.Scalar": lambda x: x >= 2.5,
    "aten::pow.Scalar": lambda x: torch.pow(2, x),
    "aten::pow.Tensor_Scalar": lambda x: x ** 3,
    "aten::sort.stable": lambda x: torch.sort(x, dim=0, descending=True, stable=True)[1],
    "aten::lerp.Tensor": lambda x: torch.lerp(x.float(), x.float().t(), torch.full((4, 4), 0.25, device=x.device)),
}


def _opinfos(name):
    """The OpInfo entries whose samples may reach the table op `name`."""
    base = name.split("::")[1].split(".")[0]
    names = EXTRA.get(base, []) + [base, f"nn.functional.{base}", f"special.{base}"]
    return [n for n in dict.fromkeys(names) if n in OPINFOS]


def _layouts(tensors):
    return [(t.dtype, tuple(t.shape), t.stride()) for t in tensors]


def _trace(op, sample, backward):
    """The IR text of `op` on `sample` (forward, or its gradients) and the
    traced results' dtypes, shapes and strides. Nothing is synced."""
    inp, args, kwargs = harness.unpack(sample)
    out = harness._call(op, inp, args, kwargs)
    results = harness.tree_tensors(out)
    if backward:
        proc = sample.output_process_fn_grad or (lambda x: x)
        outs = harness._differentiable(proc(out))
        leaves = [t for t in harness.tree_tensors((inp, args, kwargs)) if t.requires_grad]
        grads = torch.autograd.grad(outs, leaves, [torch.ones_like(t) for t in outs], allow_unused=True)
        results = [g for g in grads if g is not None]
    results = [t for t in results if t.device.type == "neuron"]
    return debug.ir_text(results), _layouts(results)


def _cpu_layouts(op, sample, backward):
    if backward:
        return None
    try:
        return _layouts(harness.tree_tensors(harness._call(op, *harness.unpack(sample, harness.cpu_leaf))))
    except Exception:  # noqa: BLE001 - the CPU refuses the sample
        return None


@functools.lru_cache(maxsize=None)
def traced(opinfo_name):
    """Per sample of an OpInfo entry (float32 forward and backward, int64
    forward): (IR with the C++ kernels, IR with the dispatcher's, their
    layouts, the CPU's layouts)."""
    op = OPINFOS[opinfo_name]
    runs = []
    for dtype, backward in ((torch.float32, False), (torch.float32, True), (torch.int64, False)):
        if not op.supports_dtype(dtype, "cpu") or (backward and not op.supports_autograd):
            continue
        torch.manual_seed(0)
        for sample in list(op.sample_inputs("neuron", dtype, requires_grad=backward))[:SAMPLES]:
            # The sample's tensors (views included) as device data in both IRs.
            torch_neuron.sync([t for t in harness.tree_tensors(harness.unpack(sample)) if t.device.type == "neuron"])
            both = []
            for structured in (True, False):
                before = torch_neuron._C._set_structured_meta(structured)
                try:
                    both.append(_trace(op, sample, backward))
                except Exception as exc:  # noqa: BLE001 - both paths must fail alike
                    both.append((f"{type(exc).__name__}: {exc}", None))
                finally:
                    torch_neuron._C._set_structured_meta(before)
            runs.append((both[0], both[1], _cpu_layouts(op, sample, backward), f"{dtype} backward={backward}"))
    return runs


def test_the_table_is_checked_against_the_schemas():
    # Building the table compares each entry's C++ signature with its op's
    # schema (an entry that differed would read the stack as other types).
    assert len(TABLE) > 100
    for name in ("aten::add.Tensor", "aten::mul.Tensor", "aten::mm", "aten::addmm", "aten::sum.dim_IntList",
                 "aten::_softmax", "aten::nll_loss_forward", "aten::max_pool2d_with_indices"):
        assert name in TABLE


@pytest.mark.parametrize("name", sorted(CALLS))
def test_overloads_outside_opinfo_trace_the_same_ir_with_the_cpus_layouts(name):
    for dtype in (torch.float32, torch.int64):
        x = torch.arange(-8, 8, dtype=dtype).reshape(4, 4)
        expected = CALLS[name](x)
        device_x = x.to("neuron")
        torch_neuron.mark_step()
        both = []
        for structured in (True, False):
            before = torch_neuron._C._set_structured_meta(structured)
            try:
                out = CALLS[name](device_x)
                both.append((debug.ir_text([out]), _layouts([out]), out))
            finally:
                torch_neuron._C._set_structured_meta(before)
        (fast_ir, fast_layouts, out), (ref_ir, ref_layouts, _) = both
        assert f"{name}(" in fast_ir
        assert fast_ir == ref_ir
        assert fast_layouts == ref_layouts == _layouts([expected])
        torch.testing.assert_close(out.cpu(), expected)


@pytest.mark.parametrize("name", sorted(set(TABLE) - set(CALLS)))
def test_both_meta_paths_trace_the_same_ir_with_the_cpus_layouts(name):
    entries = _opinfos(name)
    assert entries, f"no OpInfo entry reaches {name}: add one to EXTRA"
    reached = False
    for entry in entries:
        for (fast_ir, fast_layouts), (ref_ir, ref_layouts), cpu_layouts, what in traced(entry):
            assert fast_ir == ref_ir, f"{entry} ({what}): the C++ Meta kernel traced other IR"
            if cpu_layouts is not None and fast_layouts is not None:
                assert fast_layouts == cpu_layouts, f"{entry} ({what}): results unlike the CPU's"
            if fast_layouts is not None:
                assert fast_layouts == ref_layouts, f"{entry} ({what}): other layouts than the reference"
            reached |= f"{name}(" in fast_ir
    assert reached, f"no sample of {entries} traced {name}"


def test_the_first_traced_op_imports_neither_sympy_nor_dynamo():
    # PyTorch's Python Meta kernels import sympy (about 200 ms) at their first
    # call; the first op of a process takes the C++ kernel.
    code = ("import sys, torch, torch_neuron\n"
            "x = torch.ones(3, device='neuron') + 1\n"
            "y = (x * 2).sum(0)\n"
            "print(sorted(m for m in ('sympy', 'torch._dynamo') if m in sys.modules))\n"
            "print(y.item())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "12.0"]


@pytest.mark.parametrize("name", IN_PLACE)
def test_in_place_forms_check_as_the_cpu(name):
    # The checks of writing the result into self: its shape, and the cast.
    op = getattr(torch.Tensor, name.split("::")[1].split(".")[0])
    for device in ("cpu", "neuron"):
        with pytest.raises(RuntimeError) as broadcast:
            op(torch.ones(2, 3, device=device), torch.ones(4, 2, 3, device=device))
        with pytest.raises(RuntimeError) as cast:
            op(torch.ones(2, 3, dtype=torch.long, device=device), torch.full((2, 3), 0.5, device=device))
        if device == "cpu":
            want = (str(broadcast.value), str(cast.value))
    assert (str(broadcast.value), str(cast.value)) == want
