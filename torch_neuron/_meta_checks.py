"""The CPU's input checks for in-place ops, on their Meta kernels.

Functionalization turns ``x.atan2_(y)`` into ``atan2`` plus a write-back, and
first runs the in-place op on meta copies of its arguments so that errors of
the in-place form (which the functional form cannot see) are raised at the
call. That only works as well as the op's Meta kernel, and PyTorch's Python
Meta kernels of in-place ops (the ``torch._refs`` ones in the decomposition
tables) miss two of the CPU's checks:

- the broadcast check of about thirty binary ops (``atan2_``, ``pow_``,
  ``fmod_``, the comparisons and bitwise ops...): ``x.atan2_(y)`` with ``y``
  broadcasting ``x`` to a bigger shape is an error on the CPU ("output with
  shape [3] doesn't match the broadcast shape [2, 3]") but went through;
- the internal-overlap check of every in-place op: writing into a tensor whose
  elements share memory (``x.expand(2, 3).add_(1)``) is an error on the CPU,
  since the result would depend on the order of the writes.

``install()`` gives each such op a neuron Meta kernel that makes the CPU's
checks with the CPU's messages, then runs the original; the same for the ops
with checks of their own (``_kernel_checks.py``) and the out= ops' dtype probes.
Neuron's Meta kernels (csrc/lazy/neuron_meta.h) run where neuron runs a Meta
kernel for itself: the tracer's shape inference, the out= checks, and, for an
in-place op, where functionalization would run it (csrc/lazy/neuron_inplace.h).
The Meta dispatch key keeps PyTorch's kernels: meta tensors, and the fake
tensors of every other device, behave as without torch_neuron (issue 48).
"""

from __future__ import annotations

import re
import warnings

import torch
import torch._decomp

from ._kernel_checks import (_OVERLAP, CPP_META_CHECKS, CPU_PROBED, KERNEL_CHECKS, SIGNATURE_CHECKS, _cpu_probe,
                             _dtype_name, _functional_of, _kernel_check, _probe_once, _ProbedMeta, _small)

# In-place ops whose Python Meta kernel accepts a broadcast of `self` to a
# bigger shape (found by tests/python/test_meta_checks.py, which fails when this
# list and the installed torch disagree).
LAX_BROADCAST = frozenset([
    "__iand__.Tensor", "__ior__.Tensor", "__ixor__.Tensor", "atan2_.default",
    "bitwise_and_.Tensor", "bitwise_left_shift_.Tensor", "bitwise_or_.Tensor",
    "bitwise_right_shift_.Tensor", "bitwise_xor_.Tensor", "clamp_max_.Tensor",
    "clamp_min_.Tensor", "copysign_.Tensor", "eq_.Tensor", "floor_divide_.Tensor",
    "fmod_.Tensor", "gcd_.default", "ge_.Tensor", "gt_.Tensor", "heaviside_.default",
    "hypot_.default", "igamma_.default", "igammac_.default", "lcm_.default", "le_.Tensor",
    "lt_.Tensor", "ne_.Tensor", "nextafter_.default", "pow_.Tensor", "remainder_.Tensor",
    "xlogy_.Tensor",
])

# Ops whose Meta kernel checks something else before the broadcast (the CPU
# checks the broadcast first), and the pointwise ops (tagged so), whose Python
# Meta kernels word the error otherwise: the CPU's check and words go first.
BROADCAST_FIRST = frozenset(["__ilshift__.Tensor", "__irshift__.Tensor"])

# In-place ops the CPU lets write into overlapping memory: metadata-only ops,
# fills (every element gets the same value) and ops that copy a tensor before
# writing it.
OVERLAP_ALLOWED = frozenset([
    "t_", "transpose_", "unsqueeze_", "squeeze_", "as_strided_", "swapaxes_", "swapdims_",
    "zero_", "fill_", "tril_", "triu_", "conj_physical_", "resize_", "resize_as_", "set_",
    "detach_", "requires_grad_", "_philox_normal_", "_philox_uniform_",
])


_installed = False
_originals = {}


def _broadcast_shape(shapes):
    """The broadcast of `shapes`, with the CPU's error for sizes that do not broadcast."""
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape):
            d = ndim - len(shape) + i
            if out[d] == 1:
                out[d] = size
            elif size != 1 and size != out[d]:
                raise RuntimeError(f"The size of tensor a ({out[d]}) must match the size of tensor b "
                                   f"({size}) at non-singleton dimension {i}")
    return out


# Pointwise and reduction out= ops: the CPU kernels refuse out dtypes that
# PyTorch's Python Meta kernels cast to (neg(float32, out=float64) "Found
# dtype Double but expected Float", all(x, 1, out=float) "all only supports
# bool tensor for result", mode's values of another dtype; floor of a complex
# tensor). The same call with CPU tensors of the arguments' dtypes and ranks,
# each dim cut to at most one element (so promotion, broadcasting and empty
# dims stay what they are), raises the CPU's error; each signature is probed once.
def _out_probe(op):
    out_names = [a.name for a in op._schema.arguments if a.is_out]

    def check(*args, **kwargs):
        outs = [kwargs.get(name) for name in out_names]
        if not all(isinstance(o, torch.Tensor) for o in outs):
            return
        values = list(args) + [v for k, v in kwargs.items() if k not in out_names]
        if any(isinstance(v, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in v) for v in values):
            return
        key = (op, tuple((v.dtype, tuple(min(s, 1) for s in v.shape)) if isinstance(v, torch.Tensor)
                         else (type(v), v if not isinstance(v, list) else tuple(v)) for v in values),
               tuple(k for k in kwargs if k not in out_names), tuple(o.dtype for o in outs))
        def run():
            small_args = [_small(a) if isinstance(a, torch.Tensor) else a for a in args]
            small_kwargs = {k: _small(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()
                            if k not in out_names}
            for name, o in zip(out_names, outs):
                small_kwargs[name] = torch.empty(0, dtype=o.dtype, device="cpu")
            op(*small_args, **small_kwargs)

        _probe_once(key, run)
    return check


def _probing(probe, cpp_meta, op):
    meta_keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
    # A Python kernel gets a wrapped number (x.copy_(0.5)) as a Python number;
    # the C++ kernel is called with it as a tensor again.
    tensor_args = [i for i, a in enumerate(op._schema.arguments) if str(a.type) == "Tensor"]

    def meta(*args, **kwargs):
        probe(*args, **kwargs)
        if any(i < len(args) and isinstance(args[i], (bool, int, float, complex)) for i in tensor_args):
            device = next((a.device for a in args if isinstance(a, torch.Tensor)), "meta")
            args = tuple(torch.tensor(a, device=device) if i in tensor_args and isinstance(a, (bool, int, float, complex))
                         else a for i, a in enumerate(args))
        with _ProbedMeta():
            return cpp_meta.call_boxed(meta_keys, *args, **kwargs)
    return meta


def _unprobed_inside(python_meta):
    """`python_meta`, with the random ops it calls itself left unprobed."""
    def meta(*args, **kwargs):
        with _ProbedMeta():
            return python_meta(*args, **kwargs)
    return meta


_EXACT_OUT_DTYPE = re.compile(r"Expected out tensor to have dtype torch\.(\w+) but got torch\.(\w+) instead")


def _cpu_lenient(op, python_meta):
    """`python_meta` of an out= op, where an out dtype the CPU's kernel took
    (its probe passed) but the Python Meta kernel wants exact (abs of a
    complex tensor into a complex out) is given the CPU's answer: the result is
    computed as if into an out of the wanted dtype, and `out` resized to it
    (functionalization then casts the values into it, as the CPU kernel does)."""
    outs = [a.name for a in op._schema.arguments if a.is_out]
    if len(outs) != 1:
        return python_meta

    def meta(*args, **kwargs):
        try:
            return python_meta(*args, **kwargs)
        except RuntimeError as e:
            match = _EXACT_OUT_DTYPE.search(str(e))
            out = kwargs.get(outs[0])
            if match is None or not isinstance(out, torch.Tensor):
                raise
            wanted = dict(kwargs, **{outs[0]: out.new_empty(0, dtype=getattr(torch, match.group(1)))})
            result = python_meta(*args, **wanted)
            if out.shape != result.shape:
                out.resize_(result.shape)
            return out
    return meta


def _with_kernel_check(check, python_meta, op=None):
    """`python_meta` behind `check`, and the index of the argument it writes
    when the call can be memoized (an out= op with one `out`), else None."""
    inner = _unprobed_inside(python_meta)
    outs = [i for i, a in enumerate(op._schema.arguments) if a.is_out] if op is not None else []
    if len(outs) != 1:
        def meta(*args, **kwargs):
            check(*args, **kwargs)
            return inner(*args, **kwargs)
        return meta, None
    _python_metas[op] = inner

    def checked(*args, **kwargs):
        check(*args, **kwargs)
        return _python_metas[op](*args, **kwargs)
    return checked, outs[0]


# Per checked in-place op, and per out= op with one `out`: the Python Meta
# kernel that runs after the checks (looked up at each call: tests count them).
_python_metas = {}


def _register(op, meta, written=None):
    """`meta` as `op`'s neuron Meta kernel. With `written` (the index of the
    tensor the op writes), behind torch_neuron._C's signature memo: the op's
    checks depend on its arguments' dtypes, shapes, strides and integer values
    alone, so a signature that passed once (the kernel returned the written
    tensor, its shape and strides unchanged) is not checked again; the memo
    keys the boxed arguments in C++, where a Python memo cost more than tracing
    the op."""
    from . import _C
    _C._neuron_meta_impl(op._schema.name, op._schema.overload_name, written, meta)


def _checking(op, python_meta, broadcast, overlap, functional=None):
    """The Meta kernel of in-place `op`: the CPU's checks, then `python_meta`;
    and 0 (self's index) when its passed signatures may be remembered, else None."""
    kernel_check = _kernel_check(op)
    if op._schema.name.split("::")[1] in CPU_PROBED:
        python_meta = _unprobed_inside(python_meta)
    # A pointwise in-place op leaves self's metadata as it is, and its checks
    # depend on its arguments' signature alone: a signature that passed once
    # passes again, and the Python Meta kernel (a torch._refs function, about
    # 100 us a call) need not run again. Ops with a kernel check (CPU probes of
    # parameter values) always run it, unless the check too depends on the
    # signature alone (SIGNATURE_CHECKS).
    memo = kernel_check is None or op._schema.name.split("::")[1].rstrip("_") in SIGNATURE_CHECKS
    _python_metas[op] = python_meta

    def checked(self, *args, **kwargs):
        if kernel_check is not None:
            kernel_check(self, *args, **kwargs)
        if isinstance(self, torch.Tensor) and torch._debug_has_internal_overlap(self) == 1:
            if overlap:
                raise RuntimeError(_OVERLAP)
            if torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.Functionalize):
                # Functionalization's meta run of a write the CPU allows
                # (fill_ of an expanded tensor): its write-back would sum the
                # copies of each element (expand's inverse is a sum), a wrong
                # result; refuse it instead.
                raise NotImplementedError(
                    f"{op._schema.name}: writing into a tensor whose elements share memory "
                    "(an expanded tensor) is not supported on lazy devices; write into the tensor "
                    "it was expanded from, or clone() it first")
        if broadcast:
            shapes = [tuple(a.shape) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            if shapes:
                shape = _broadcast_shape([tuple(self.shape), *shapes])
                if shape != list(self.shape):
                    raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the "
                                       f"broadcast shape {shape}")
        if functional is not None and isinstance(self, torch.Tensor):
            # The CPU computes in the promoted dtype and refuses to write a
            # result self's dtype cannot hold (int32 *= float32 0-dim tensor);
            # some Python Meta kernels convert it silently.
            others = [a for a in args if isinstance(a, (torch.Tensor, int, float, complex, bool))]
            if _key(op) in BROADCAST_FIRST:
                # Shifts: the CPU promotes, then finds the cast unsafe, before
                # the shift's own integral check.
                dtype = torch.result_type(self, others[0]) if others else None
            else:
                try:
                    dtype = functional(self, *args, **kwargs).dtype
                except Exception:  # noqa: BLE001 - the op's own Meta kernel below words the error
                    dtype = None
            if isinstance(dtype, torch.dtype) and not torch.can_cast(dtype, self.dtype):
                raise RuntimeError(f"result type {_dtype_name(dtype)} can't be cast to the "
                                   f"desired output type {_dtype_name(self.dtype)}")
        try:
            return _python_metas[op](self, *args, **kwargs)
        except RuntimeError as e:
            cpu = _cpu_cast_message(str(e))
            if cpu is None:
                raise
            raise RuntimeError(cpu) from None
    return checked, (0 if torch.Tag.pointwise in op.tags and memo else None)


_UNSAFE_CAST = re.compile(r"Attempting to cast from torch\.(\w+) to out tensor with dtype torch\.(\w+), "
                          r"but this can't be cast because it is not safe")


def _cpu_cast_message(message):
    """The CPU's words for the refs' unsafe-cast error ("result type Float
    can't be cast to the desired output type Char"), or None for another error."""
    match = _UNSAFE_CAST.search(message)
    if match is None:
        return None
    source, target = (_dtype_name(getattr(torch, n)) for n in match.groups())
    return f"result type {source} can't be cast to the desired output type {target}"


def _inplace_ops():
    """{op: Python Meta function} of the in-place ops (self written, no out=)
    that PyTorch's decomposition tables hold one for, in the order PyTorch
    picks them (torch._meta_registrations.activate_meta)."""
    ops = {}
    for table in ("meta", "post_autograd", "pre_autograd"):
        for op, fn in torch._decomp.global_decomposition_table[table].items():
            if not isinstance(op, torch._ops.OpOverload) or op in ops:
                continue
            schema = op._schema
            first = schema.arguments[0] if schema.arguments else None
            if (first is None or str(first.type) != "Tensor"
                    or first.alias_info is None or not first.alias_info.is_write
                    or not schema.name.endswith("_")
                    or any(a.kwarg_only and a.alias_info is not None for a in schema.arguments)):
                continue
            if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
                continue  # decomposed before Meta is reached: its parts are checked
            ops[op] = fn
    return dict(sorted(ops.items(), key=lambda kv: str(kv[0])))


# Reductions to values and indices, which lack the reduction tag.
_PROBED_OUT_NAMES = ("aten::mode", "aten::median", "aten::nanmedian")


def _probed_out_ops():
    ops = []
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if not any(a.is_out for a in op._schema.arguments):
                continue
            if (torch.Tag.pointwise not in op.tags and torch.Tag.reduction not in op.tags
                    and op._schema.name not in _PROBED_OUT_NAMES):
                continue
            try:
                kernel = torch.library.get_kernel(op, "Meta")
            except RuntimeError:
                continue
            if "_meta_registrations" in repr(kernel):
                ops.append(op)
    return ops


def _both(first, second):
    def check(*args, **kwargs):
        first(*args, **kwargs)
        second(*args, **kwargs)
    return check


def _key(op):
    return f"{op._schema.name.split('::')[1]}.{op._overloadname}"


def install() -> None:
    global _installed
    if _installed:
        return
    with warnings.catch_warnings():
        # Each in-place op's Functionalize kernel is overridden (for neuron tensors only), on purpose.
        warnings.simplefilter("ignore")
        for op, python_meta in _inplace_ops().items():
            broadcast = (_key(op) in LAX_BROADCAST or _key(op) in BROADCAST_FIRST
                         or torch.Tag.pointwise in op.tags)
            overlap = op._schema.name.split("::")[1] not in OVERLAP_ALLOWED
            # Only where PyTorch's Python function is the Meta kernel (copy_ has
            # a C++ one): the checks run, then that function.
            original = torch.library.get_kernel(op, "Meta")
            if "_meta_registrations" not in repr(original):
                continue
            # Pointwise ops, and the shifts (__irshift__ lacks the tag).
            promotes = torch.Tag.pointwise in op.tags or _key(op) in BROADCAST_FIRST
            functional = _functional_of(op) if promotes else None
            _register(op, *_checking(op, python_meta, broadcast, overlap, functional))
            _originals[op] = original
        # The functional and out= overloads of the ops with kernel checks.
        probed_out = set(_probed_out_ops())
        tables = [torch._decomp.global_decomposition_table[t] for t in ("meta", "post_autograd", "pre_autograd")]
        for name in KERNEL_CHECKS:
            for overload in getattr(torch.ops.aten, name).overloads():
                try:
                    op = getattr(getattr(torch.ops.aten, name), overload)
                    original = torch.library.get_kernel(op, "Meta")
                except (AttributeError, RuntimeError):
                    continue  # an overload the dispatcher does not hold (index_put.hacked_twin)
                python_meta = next((t[op] for t in tables if op in t), None)
                check = KERNEL_CHECKS[name]
                if "Composite" in repr(original):
                    # A composite Meta kernel (randperm.generator's) calls the
                    # checked overloads on meta tensors, which the tracer's
                    # shape inference would not see: the check goes first.
                    _register(op, _probing(check, original, op))
                    _originals[op] = original
                    continue
                if python_meta is None or "_meta_registrations" not in repr(original):
                    continue
                if op in probed_out:  # mode(out=): the out dtype probe too
                    check = _both(check, _out_probe(op))
                _register(op, _with_kernel_check(check, python_meta)[0], None)
                _originals[op] = original
        # Pointwise and reduction out= overloads with a Python Meta kernel: the CPU's dtype checks first.
        for op in probed_out:
            if op in _originals:
                continue
            python_meta = next((t[op] for t in tables if op in t), None)
            if python_meta is None:
                continue
            original = torch.library.get_kernel(op, "Meta")
            _register(op, *_with_kernel_check(_out_probe(op), _cpu_lenient(op, python_meta), op))
            _originals[op] = original
        for name, check in CPP_META_CHECKS.items():
            for overload in getattr(torch.ops.aten, name).overloads():
                try:
                    op = getattr(getattr(torch.ops.aten, name), overload)
                    original = torch.library.get_kernel(op, "Meta")
                except (AttributeError, RuntimeError):
                    continue  # an overload TorchScript knows and the dispatcher does not (copy_.Tensor)
                if op in _originals or "_meta_registrations" in repr(original):
                    continue
                _register(op, _probing(check, original, op))
                _originals[op] = original
        # The random ops whose Meta kernel is C++ (random_): the probe, then it.
        for name in CPU_PROBED:
            for overload in getattr(torch.ops.aten, name).overloads():
                op = getattr(getattr(torch.ops.aten, name), overload)
                if op in _originals:
                    continue  # a Python Meta kernel: _checking probes first
                original = torch.library.get_kernel(op, "Meta")
                _register(op, _probing(_cpu_probe(name), original, op))
                _originals[op] = original
        from . import _C
        _C._register_foreach_meta()
    _installed = True


def original_meta_kernel(op):
    """The Meta kernel of `op` that its neuron Meta kernel runs after the checks, or None."""
    return _originals.get(op)
