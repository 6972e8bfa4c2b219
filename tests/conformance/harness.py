"""Runs PyTorch's OpInfo samples on the neuron device and compares with the CPU.

One check is one (op, dtype, kind) triple, where kind is

  forward   every sample (built on neuron, copied to the CPU) gives the CPU's result
  backward  gradients of the sample's differentiable inputs equal the CPU's (float32)
  inplace   the op's in-place variant leaves the same values in its input (float32)
  noncontig the op on strided device views of its inputs gives the CPU's result (float32)
  forward_ad  forward-mode AD (dual tensors) gives the CPU's primals and tangents (float32)

and ends as "pass", "fail" (with the first line of the error) or "skip" (the op has
no sample or variant for it). Random ops draw from the device generator, which is
seeded like the CPU's, so their results compare exactly too.

torch_neuron is imported before torch.testing's modules, so the device is known to
them; import this module before those modules too.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch
import torch.autograd.forward_ad as fwAD

import torch_neuron  # noqa: F401  (registers the device before torch.testing loads)
from torch.testing._internal.common_methods_invocations import op_db

DEVICE = "neuron"

# Samples per op and check: OpInfo's first samples cover the op's shapes and
# arguments; later ones mostly repeat them at other sizes. Bounds the sweep time.
MAX_SAMPLES = 6

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "bool": torch.bool,
    "complex64": torch.complex64,
}
KINDS = ("forward", "backward", "inplace", "noncontig", "forward_ad")

# Tolerances (documented in docs/CONFORMANCE.md). Tier 0 runs the CPU's own ATen
# kernels, so float results differ from the CPU's only where a graph computes a
# composite op in another order.
TOLERANCES = {
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
    torch.complex64: dict(rtol=1e-4, atol=1e-5),
}

# Ops whose results are uninitialized memory: only shape and dtype can be compared
# (OpInfo's own tests skip the value comparison for them too).
UNINITIALIZED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                 "empty_permuted"}

SEED = 1234

# Ops whose results are defined only up to a choice (singular vectors up to a
# phase): an ulp of difference upstream picks another one. Their samples carry
# OpInfo's function of the results that is unique (U @ V.mH and S), which the
# forward check compares instead.
DEFINED_UP_TO_PHASE = {"svd_lowrank", "pca_lowrank"}


@dataclasses.dataclass
class Result:
    op: str
    dtype: str
    kind: str
    status: str  # pass | fail | skip
    error: str = ""
    samples: int = 0
    fallback: bool = False  # some sample needed the CPU fallback

    def key(self) -> str:
        return f"{self.op}|{self.dtype}|{self.kind}"


def op_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def ops_by_name() -> dict:
    return {op_name(op): op for op in op_db}


def first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line[:300]


# ----------------------------------------------------------------- moving samples
#
# Samples are built on the device, as PyTorch's device tests build them (an op
# that wants some argument on the CPU, like tensor_split's indices, gets it
# there), and copied to the CPU for the reference result.

def tree_map(fn, value):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(tree_map(fn, v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(tree_map(fn, v) for v in value)
    if isinstance(value, dict):
        return {k: tree_map(fn, v) for k, v in value.items()}
    return value


def tree_tensors(value) -> list:
    out = []
    tree_map(out.append, value)
    return out


def unpack(sample, fn=lambda t: t):
    """(input, args, kwargs) of a sample with fn applied to every tensor."""
    return tree_map(fn, sample.input), tree_map(fn, sample.args), tree_map(fn, sample.kwargs)


def cpu_leaf(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy of a sample tensor; a leaf requiring grad if the original does."""
    return t.detach().cpu().requires_grad_(t.requires_grad)


def strided_view(t: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous view of a larger device tensor: every
    other element of the last dimension of a stacked pair."""
    if t.device.type != DEVICE or t.dim() == 0 or t.numel() == 0:
        return t
    pair = torch.stack([t.detach(), torch.zeros_like(t.detach())], dim=-1)
    return pair.select(-1, 0)


def to_cpu(value):
    return tree_map(lambda t: t.detach().cpu(), value)


# -------------------------------------------------------------------- comparison

def assert_same(actual, expected, dtype, uninitialized=False):
    actual, expected = to_cpu(actual), to_cpu(expected)
    if uninitialized:
        a, e = tree_tensors(actual), tree_tensors(expected)
        assert [(t.shape, t.dtype) for t in a] == [(t.shape, t.dtype) for t in e], \
            "uninitialized result has other shapes or dtypes than the CPU's"
        return
    tol = TOLERANCES.get(dtype)
    if tol is None:
        # Integer and bool inputs compare exactly, unless the op computes floats
        # from them (sqrt, FFTs): those results take float32's tolerance.
        floats = any(t.is_floating_point() or t.is_complex() for t in tree_tensors(expected))
        tol = TOLERANCES[torch.float32] if floats else dict(rtol=0, atol=0)
    torch.testing.assert_close(actual, expected, equal_nan=True, check_device=False,
                               check_stride=False, check_layout=False, **tol)


def _call(op, inp, args, kwargs):
    torch.manual_seed(SEED)
    return op(inp, *args, **kwargs)


def _fallback_total() -> int:
    return sum(torch_neuron.metrics.fallback_counts().values())


# ------------------------------------------------------------------------ checks

def _samples(op, dtype, requires_grad):
    torch.manual_seed(0)
    return itertools.islice(op.sample_inputs(DEVICE, dtype, requires_grad=requires_grad),
                            MAX_SAMPLES)


def _is_cpu_device(value) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cpu"
    return isinstance(value, str) and value.split(":")[0] == "cpu"


def _names_the_cpu(sample) -> bool:
    """The sample asks for a CPU result (a device argument such as device="cpu")."""
    return any(_is_cpu_device(v)
               for v in [sample.input, *sample.args, *sample.kwargs.values()])


def assert_on_device(actual, sample):
    want = "cpu" if _names_the_cpu(sample) else DEVICE
    devices = {t.device.type for t in tree_tensors(actual)}
    assert devices <= {want}, f"results on {sorted(devices)}, expected {want}"


def _run_forward(op, dtype, view=lambda t: t):
    """view maps each device tensor of a sample to the tensor the op gets."""
    n = 0
    uninit = op.name in UNINITIALIZED
    for sample in _samples(op, dtype, requires_grad=False):
        try:
            expected = _call(op, *unpack(sample, cpu_leaf))
        except Exception:
            continue  # the CPU rejects this sample: nothing to compare against
        actual = _call(op, *unpack(sample, view))
        assert_on_device(actual, sample)
        if op.name in DEFINED_UP_TO_PHASE and sample.output_process_fn_grad is not None:
            expected, actual = sample.output_process_fn_grad(expected), sample.output_process_fn_grad(actual)
        assert_same(actual, expected, dtype, uninit)
        n += 1
    return n


def _grad_outputs(outputs):
    torch.manual_seed(SEED + 1)
    return [torch.randn(t.shape, dtype=t.dtype) for t in outputs]


def _differentiable(value):
    return [t for t in tree_tensors(value) if t.requires_grad and t.grad_fn is not None]


def _run_backward(op, dtype):
    n = 0
    for sample in _samples(op, dtype, requires_grad=True):
        proc = sample.output_process_fn_grad or (lambda x: x)
        leaves = [t for t in tree_tensors(unpack(sample)) if t.requires_grad]
        copies = {}

        def cpu_copy(t):
            copies[id(t)] = cpu_leaf(t)
            return copies[id(t)]

        cpu_args = unpack(sample, cpu_copy)
        cpu_leaves = [copies[id(t)] for t in leaves]
        try:
            cpu_out = _differentiable(proc(_call(op, *cpu_args)))
            if not cpu_out or not cpu_leaves:
                continue
            grads_out = _grad_outputs(cpu_out)
            expected = torch.autograd.grad(cpu_out, cpu_leaves, grads_out, allow_unused=True)
        except Exception:
            continue
        out = _differentiable(proc(_call(op, *unpack(sample))))
        assert len(out) == len(cpu_out), "neuron result has other differentiable outputs"
        actual = torch.autograd.grad(out, leaves, [g.to(t.device) for g, t in zip(grads_out, out)],
                                     allow_unused=True)
        assert_same(list(actual), list(expected), dtype)
        n += 1
    return n


def _tangents(leaves):
    """A seeded random CPU tangent for each differentiable input, by identity."""
    torch.manual_seed(SEED + 2)
    return {id(t): torch.randn(t.shape, dtype=t.dtype) for t in leaves}


def _dual_call(op, sample, proc, tangents, move):
    """Runs the op on dual tensors (each sample tensor moved by move, its tangent
    to the same device) and returns (primal, tangent) of every floating output;
    the tangent is None where the output does not depend on a dual input."""
    with fwAD.dual_level():
        def dual(t):
            primal = move(t.detach())
            tangent = tangents.get(id(t))
            return primal if tangent is None else fwAD.make_dual(primal, tangent.to(primal.device))

        out = proc(_call(op, *unpack(sample, dual)))
        pairs = [fwAD.unpack_dual(t) for t in tree_tensors(out)
                 if t.is_floating_point() or t.is_complex()]
        return [(p.detach().cpu(), None if d is None else d.detach().cpu()) for p, d in pairs]


def _run_forward_ad(op, dtype):
    n = 0
    for sample in _samples(op, dtype, requires_grad=True):
        proc = sample.output_process_fn_grad or (lambda x: x)
        leaves = [t for t in tree_tensors(unpack(sample)) if t.requires_grad]
        if not leaves:
            continue
        tangents = _tangents(leaves)
        try:
            expected = _dual_call(op, sample, proc, tangents, lambda t: t.cpu())
        except Exception:
            continue  # the CPU rejects this sample (or has no forward AD for it)
        actual = _dual_call(op, sample, proc, tangents, lambda t: t)
        assert len(actual) == len(expected), "neuron result has other floating outputs"
        for (p, d), (ep, ed) in zip(actual, expected):
            assert (d is None) == (ed is None), \
                f"tangent is {'None' if d is None else 'set'} on neuron, {'None' if ed is None else 'set'} on CPU"
            assert_same(p, ep, dtype)
            if d is not None:
                assert_same(d, ed, dtype)
        n += 1
    return n


def _run_inplace(op, dtype):
    variant = op.inplace_variant
    n = 0
    for sample in _samples(op, dtype, requires_grad=False):
        if not isinstance(sample.input, torch.Tensor):
            continue
        _, cpu_args, cpu_kwargs = unpack(sample, cpu_leaf)
        cpu_in = sample.input.detach().cpu().clone()
        try:
            torch.manual_seed(SEED)
            variant(cpu_in, *cpu_args, **cpu_kwargs)
        except Exception:
            continue
        dev_in = sample.input.detach().clone()
        torch.manual_seed(SEED)
        result = variant(dev_in, *sample.args, **sample.kwargs)
        assert result is dev_in, "in-place variant did not return its input"
        assert_same(dev_in, cpu_in, dtype)
        n += 1
    return n


def run_check(op, dtype_name: str, kind: str) -> Result:
    dtype = DTYPES[dtype_name]
    result = Result(op_name(op), dtype_name, kind, "skip")
    if not op.supports_dtype(dtype, "cpu"):
        result.error = f"no {dtype_name} on CPU"
        return result
    if kind == "backward" and not op.supports_autograd:
        result.error = "not differentiable"
        return result
    if kind == "forward_ad" and not op.supports_forward_ad:
        result.error = "no forward AD"
        return result
    if kind == "inplace" and op.inplace_variant is None:
        result.error = "no in-place variant"
        return result
    before = _fallback_total()
    try:
        if kind == "forward":
            n = _run_forward(op, dtype)
        elif kind == "noncontig":
            n = _run_forward(op, dtype, strided_view)
        elif kind == "backward":
            n = _run_backward(op, dtype)
        elif kind == "forward_ad":
            n = _run_forward_ad(op, dtype)
        else:
            n = _run_inplace(op, dtype)
        torch_neuron.wait_device_ops()
    except Exception as exc:  # noqa: BLE001 - every failure is a result here
        result.status, result.error = "fail", first_line(exc)
        try:
            torch_neuron.wait_device_ops()
        except Exception:  # noqa: BLE001 - an error of the failed graph, already reported
            pass
        result.fallback = _fallback_total() > before
        return result
    result.fallback = _fallback_total() > before
    result.samples = n
    if n == 0:
        result.error = "no sample the CPU accepts"
        return result
    result.status = "pass"
    return result


def checks_for(op) -> list:
    """The (dtype, kind) pairs the sweep runs for one op."""
    pairs = [("float32", k) for k in KINDS]
    pairs += [(d, "forward") for d in ("bfloat16", "int64", "bool", "complex64")]
    return pairs


def run_op(op) -> list:
    return [run_check(op, d, k) for d, k in checks_for(op)]


if __name__ == "__main__":
    import sys
    ops = ops_by_name()
    for name in sys.argv[1:]:
        for r in run_op(ops[name]):
            print(r.key(), r.status, r.samples, r.error)
