"""Replays recorded op signatures on neuron and on the CPU and compares them.

For each signature the replay rebuilds the op's arguments from the record
(dtypes, shapes, scalar values, dtypes and devices), fills tensors with values
the op accepts, runs the op on a copy of the inputs on each device (random
generators seeded alike), and compares every result and every argument the op
writes. Values respect the op's own constraints: an index argument lies in the
range of the dim it indexes, a probability in [0, 1], a matrix to factor is
positive definite, a logarithm's input is positive, a divisor is nonzero. A
signature whose arguments cannot be rebuilt, or whose generated inputs the CPU
itself refuses, is "unreplayable" with the reason, never a failure.

Outcomes: pass, mismatch (values, dtypes or shapes differ), error (neuron
raised where the CPU did not), unreplayable, crash and timeout (set by the
runner in __main__.py, which runs the replays in worker processes).
"""

from __future__ import annotations

import math
import re
import traceback
from dataclasses import dataclass
from typing import Any, List, Optional

import torch

from .constraints import (DISTINCT_VALUES, NEEDS_FORWARD_STATE, UNDEFINED_RESULTS, UNDEFINED_VALUES,
                          Unreplayable, Call, stem, base_name, constraint_rule)
from .store import Signature

# Statuses, in report order.
PASS, MISMATCH, ERROR, CRASH, TIMEOUT, UNREPLAYABLE = (
    "pass", "mismatch", "error", "crash", "timeout", "unreplayable")
STATUSES = (PASS, MISMATCH, ERROR, CRASH, TIMEOUT, UNREPLAYABLE)


@dataclass
class Outcome:
    status: str
    cause: str = ""   # short, groups failures in the report ("values differ")
    detail: str = ""  # the specifics (which output, how far, the message)



# ---------------------------------------------------------------------------
# The op and its schema

def resolve(op: str):
    ns, name, overload = base_name(op)
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        raise Unreplayable(f"{op} is not an operator of this torch build") from None


# ---------------------------------------------------------------------------
# Values

_DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128, torch.uint16, torch.uint32,
    torch.uint64)}


def dtype_of(name: str) -> torch.dtype:
    if name not in _DTYPES:
        raise Unreplayable(f"dtype {name!r} is not one this replay can make")
    return _DTYPES[name]


class _Device:
    """Placeholder of a device argument (the device of the side being run)."""

    def __init__(self, recorded: str):
        self.recorded = recorded


class _Generator:
    """Placeholder of a Generator argument (seeded alike on both sides)."""


@dataclass
class _TensorSpec:
    dtype: torch.dtype
    shape: List[int]
    strides: Optional[List[int]] = None
    on_cpu: bool = False   # stays a CPU tensor on the neuron side too
    value: Any = None      # a CPU scalar tensor's recorded value
    wrapped: bool = False  # a Python number (passed as one)


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "tensor" in value:
            return _TensorSpec(dtype_of(value["tensor"]), list(value["shape"]), value.get("strides"),
                               bool(value.get("cpu", False)), value.get("value"), bool(value.get("wrapped", False)))
        if "tensors" in value:
            return [None if t is None else _decode(t) for t in value["tensors"]]
        if "dtype" in value:
            return dtype_of(value["dtype"])
        if "layout" in value:
            layout = getattr(torch, value["layout"], None)
            if not isinstance(layout, torch.layout):
                raise Unreplayable(f"layout {value['layout']!r} is unknown")
            return layout
        if "memory_format" in value:
            fmt = getattr(torch, value["memory_format"], None)
            if not isinstance(fmt, torch.memory_format):
                raise Unreplayable(f"memory format {value['memory_format']!r} is unknown")
            return fmt
        if "device" in value:
            return _Device(value["device"])
        if "generator" in value:
            return _Generator()
        if "complex" in value:
            re_, im = value["complex"]
            return complex(re_, im)
        if "unsupported" in value:
            raise Unreplayable(f"an argument of kind {value['unsupported']} was recorded without its value")
        raise Unreplayable(f"an argument the replay does not know: {value}")
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _random_values(spec: _TensorSpec, gen: torch.Generator, distinct: bool) -> torch.Tensor:
    numel = math.prod(spec.shape)
    dtype = spec.dtype
    if distinct and numel > 0 and not dtype.is_complex and dtype != torch.bool:
        limit = {torch.uint8: 256, torch.int8: 128}.get(dtype, 1 << 24)
        if numel <= limit:
            perm = torch.randperm(numel, generator=gen)
            if dtype.is_floating_point:
                return (perm.to(torch.float64) / max(numel, 1) - 0.5).to(dtype).reshape(spec.shape)
            return perm.to(dtype).reshape(spec.shape)
    if dtype.is_floating_point:
        return torch.randn(spec.shape, generator=gen, dtype=torch.float32).to(dtype)
    if dtype.is_complex:
        return torch.randn(spec.shape, generator=gen, dtype=dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, spec.shape, generator=gen).bool()
    low = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -5
    return torch.randint(low, 6, spec.shape, generator=gen).to(dtype)


def _make_tensor(spec: _TensorSpec, gen: torch.Generator, distinct: bool) -> Any:
    if spec.value is not None and not spec.shape:
        if spec.wrapped:
            return spec.value  # a Python number, as the user's code passed it
        return torch.tensor(spec.value, dtype=spec.dtype)
    values = _random_values(spec, gen, distinct)
    if spec.strides is not None:
        # The recorded layout: the same values in a buffer with those strides.
        extent = 1 + sum((n - 1) * abs(s) for n, s in zip(spec.shape, spec.strides) if n > 0)
        if any(n == 0 for n in spec.shape):
            extent = 0
        buffer = torch.zeros(max(extent, 1), dtype=spec.dtype)
        strided = buffer.as_strided(spec.shape, spec.strides)
        strided.copy_(values)
        return strided
    return values


# ---------------------------------------------------------------------------
# Building and running a call

def build_call(sig: Signature, seed: int) -> Call:
    """The CPU arguments of `sig` (tensors filled within the op's constraints)."""
    overload = resolve(sig.op)
    schema = overload._schema
    if stem(base_name(sig.op)[1]) in NEEDS_FORWARD_STATE:
        raise Unreplayable("it reads state only its forward op makes (offset2bag, bag sizes)")
    try:
        decoded = [_decode(v) for v in sig.decoded_args()]
    except ValueError as e:
        raise Unreplayable(f"the recorded arguments are not valid JSON ({e})") from None
    if len(decoded) != len(schema.arguments):
        raise Unreplayable(f"recorded {len(decoded)} arguments, this torch's schema has "
                           f"{len(schema.arguments)} ({schema})")
    gen = torch.Generator().manual_seed(seed)
    distinct = base_name(sig.op)[1] in DISTINCT_VALUES

    def make(v):
        if isinstance(v, _TensorSpec):
            return _make_tensor(v, gen, distinct)
        if isinstance(v, list):
            return [make(e) for e in v]
        return v

    call = Call(sig.op, schema, [make(v) for v in decoded])
    rule = constraint_rule(sig.op)
    if rule is not None:
        rule(call, gen)
    return call


def _on_side(value, device: str, seed: int, cpu_spec_paths: set, path=()):
    """The argument for one side: tensors copied to `device` (except those
    recorded as CPU tensors), placeholders made."""
    if isinstance(value, torch.Tensor):
        if device == "cpu" or path in cpu_spec_paths:
            return value.clone()
        return value.to(device)
    if isinstance(value, _Device):
        if value.recorded in ("neuron", "privateuseone"):
            return torch.device(device)
        return torch.device(value.recorded)
    if isinstance(value, _Generator):
        return torch.Generator(device).manual_seed(seed)
    if isinstance(value, list):
        return [_on_side(v, device, seed, cpu_spec_paths, path + (i,)) for i, v in enumerate(value)]
    return value


def _cpu_paths(sig: Signature) -> set:
    """Argument positions recorded as CPU tensors (they stay on the CPU)."""
    paths = set()

    def walk(v, path):
        if isinstance(v, dict) and "tensor" in v and v.get("cpu"):
            paths.add(path)
        elif isinstance(v, dict) and "tensors" in v:
            for i, e in enumerate(v["tensors"]):
                walk(e, path + (i,))
    for i, v in enumerate(sig.decoded_args()):
        walk(v, (i,))
    return paths


def _invoke(overload, schema, values):
    args, kwargs = [], {}
    for a, v in zip(schema.arguments, values):
        if a.kwarg_only:
            kwargs[a.name] = v
        else:
            args.append(v)
    return overload(*args, **kwargs)


def _written(schema) -> List[int]:
    return [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return [_to_cpu(v) for v in value]
    return value


def tolerance(dtype: torch.dtype, opt_level: int) -> float:
    """Relative tolerance of a replay comparison (of |cpu| and of max |cpu|)."""
    if dtype in (torch.bfloat16,):
        return 1.6e-2
    if dtype in (torch.float16,):
        return 2e-3
    if dtype in (torch.float64, torch.complex128):
        return 1e-7 if opt_level == 0 else 1e-6
    return 1e-5 if opt_level == 0 else 1e-4


def compare(name: str, actual, expected, opt_level: int, values: bool = True) -> Optional[Outcome]:
    """None if `actual` (neuron's, moved to the CPU) matches `expected`."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return Outcome(MISMATCH, "type differs", f"{name}: neuron gave {type(actual).__name__}, the CPU a tensor")
        if actual.dtype != expected.dtype:
            return Outcome(MISMATCH, "dtype differs", f"{name}: neuron {actual.dtype}, cpu {expected.dtype}")
        if actual.shape != expected.shape:
            return Outcome(MISMATCH, "shape differs",
                           f"{name}: neuron {list(actual.shape)}, cpu {list(expected.shape)}")
        if not values or expected.numel() == 0:
            return None
        if expected.dtype.is_floating_point or expected.dtype.is_complex:
            e = expected.to(torch.complex128 if expected.dtype.is_complex else torch.float64)
            a = actual.to(e.dtype)
            rtol = tolerance(expected.dtype, opt_level)
            finite = torch.isfinite(e)
            scale = e[finite].abs().max().item() if finite.any() else 0.0
            atol = rtol * max(scale, 1e-3)
            same_special = (torch.isnan(e) & torch.isnan(a)) | (torch.isinf(e) & (a == e))
            close = same_special | ((a - e).abs() <= atol + rtol * e.abs())
            if not bool(close.all()):
                bad = ~close
                diff = (a - e).abs()[bad & torch.isfinite(a) & finite]
                worst = diff.max().item() if diff.numel() else float("nan")
                return Outcome(MISMATCH, "values differ",
                               f"{name}: {int(bad.sum())} of {e.numel()} elements differ (max abs {worst:.3g}, "
                               f"rtol {rtol:g}, atol {atol:.3g})")
            return None
        if not torch.equal(actual, expected):
            bad = int((actual != expected).sum())
            return Outcome(MISMATCH, "values differ", f"{name}: {bad} of {expected.numel()} elements differ")
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            return Outcome(MISMATCH, "type differs", f"{name}: neuron gave {actual!r:.80}, the CPU {expected!r:.80}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            found = compare(f"{name}[{i}]", a, e, opt_level, values)
            if found:
                return found
        return None
    if isinstance(expected, float) and isinstance(actual, float):
        if math.isclose(actual, expected, rel_tol=tolerance(torch.float64, opt_level) * 10, abs_tol=1e-12) or (
                math.isnan(actual) and math.isnan(expected)):
            return None
        return Outcome(MISMATCH, "values differ", f"{name}: neuron {actual}, cpu {expected}")
    if actual != expected and not (values is False):
        return Outcome(MISMATCH, "values differ", f"{name}: neuron {actual!r:.80}, cpu {expected!r:.80}")
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def replay(sig: Signature, opt_level: int = 0, seed: int = 0, on_cpu_done=None) -> Outcome:
    """Replays one signature on neuron and on the CPU and compares; calls
    `on_cpu_done()` between the two (a crash before it is the CPU's)."""
    import torch_neuron

    sig_seed = (int(sig.key[:8], 16) ^ seed) & 0x7FFFFFFF
    try:
        call = build_call(sig, sig_seed)
    except Unreplayable as e:
        return Outcome(UNREPLAYABLE, str(e).split(" (")[0][:80], str(e))
    except Exception as e:  # a record this replay cannot turn into arguments
        return Outcome(UNREPLAYABLE, "the arguments cannot be rebuilt", _first_line(e))
    overload = resolve(sig.op)
    schema = overload._schema
    cpu_paths = _cpu_paths(sig)
    written = _written(schema)
    family = stem(base_name(sig.op)[1])
    values_defined = family not in UNDEFINED_VALUES

    torch.manual_seed(sig_seed)
    cpu_args = [_on_side(v, "cpu", sig_seed, cpu_paths, (i,)) for i, v in enumerate(call.values)]
    try:
        expected = _invoke(overload, schema, cpu_args)
    except Exception as e:
        return Outcome(UNREPLAYABLE, "the CPU refuses the generated inputs", _first_line(e))
    expected_written = [cpu_args[i] for i in written]
    if on_cpu_done is not None:
        on_cpu_done()

    torch.manual_seed(sig_seed)
    neuron_args = [_on_side(v, "neuron", sig_seed, cpu_paths, (i,)) for i, v in enumerate(call.values)]
    try:
        actual = _invoke(overload, schema, neuron_args)
        torch_neuron.mark_step()
        actual = _to_cpu(actual)
        actual_written = [_to_cpu(neuron_args[i]) for i in written]
    except Exception as e:
        return Outcome(ERROR, f"neuron raised {type(e).__name__}", _first_line(e))

    expected = _to_cpu(expected)
    undefined = UNDEFINED_RESULTS.get(family, set())
    if isinstance(expected, (list, tuple)) and undefined and isinstance(actual, (list, tuple)) and \
            len(actual) == len(expected):
        found = None
        for i, (a, e) in enumerate(zip(actual, expected)):
            found = found or compare(f"result[{i}]", a, e, opt_level, values_defined and i not in undefined)
    else:
        found = compare("result", actual, expected, opt_level, values_defined)
    if found is None:
        for i, a, e in zip(written, actual_written, expected_written):
            found = compare(f"argument {schema.arguments[i].name} (written)", a, e, opt_level, values_defined)
            if found:
                break
    return found or Outcome(PASS)


def replay_safely(sig: Signature, opt_level: int = 0, seed: int = 0, on_cpu_done=None) -> Outcome:
    """replay(), with an unexpected failure of the replay itself reported as an error."""
    try:
        return replay(sig, opt_level, seed, on_cpu_done)
    except Exception as e:
        return Outcome(ERROR, "the replay failed", _first_line(e) + "\n" + traceback.format_exc(limit=4))


def matches(op: str, pattern: Optional[str]) -> bool:
    """-k PATTERN: a regular expression searched in the op's name."""
    return pattern is None or re.search(pattern, op) is not None
