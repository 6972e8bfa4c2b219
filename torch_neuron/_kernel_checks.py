"""The CPU kernels' own checks of their arguments, per op, for the Meta kernels.

PyTorch's Meta kernels compute an op's output metadata; the checks that live in
the CPU kernels (parameter ranges, dtype pairs an op refuses, subtraction with
bool tensors, searchsorted's sorter and side, the 64-dim limit of reductions
over named dims, writes into overlapping memory) are missing there, so on a
lazy device bad input would be accepted at the call and fail when the graph
runs. Each check here raises the CPU's error with the CPU's words: by name, or
by running the same call on one-element CPU tensors (a probe), once per
signature. ``_meta_checks.install()`` puts them in front of the Meta kernels.
"""

from __future__ import annotations

import threading
import warnings

import torch

_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to "
            "a single memory location. Please clone() the tensor before performing the operation.")


def _dtype_name(dtype):
    """c10's name of `dtype` (Float, Long, ComplexDouble), as CPU errors say it."""
    return _C_NAMES[dtype]


_C_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.complex32: "ComplexHalf", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
    torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long",
    torch.bool: "Bool", torch.uint16: "UInt16", torch.uint32: "UInt32", torch.uint64: "UInt64",
}


def _functional_of(op):
    """The functional overload of in-place `op` (mul_.Tensor -> mul.Tensor,
    __ilshift__.Tensor -> __lshift__.Tensor), or None."""
    name = op._schema.name.split("::")[1]
    if name.startswith("__i") and name.endswith("__"):
        functional = "__" + name[3:]  # __ilshift__ -> __lshift__
    elif name.endswith("_") and not name.startswith("_"):
        functional = name[:-1]
    else:
        return None
    packet = getattr(torch.ops.aten, functional, None)
    overload = op._overloadname
    return getattr(packet, overload, None) if packet is not None and overload in packet.overloads() else None


def _heaviside_check(self, values, *rest, **kwargs):
    if not isinstance(values, torch.Tensor):
        return
    if self.is_complex() or values.is_complex():
        raise RuntimeError("heaviside is not yet implemented for complex tensors.")
    if self.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")


def _no_complex(name):
    def check(self, other=None, *rest, **kwargs):
        if any(isinstance(t, torch.Tensor) and t.is_complex() for t in (self, other)):
            raise RuntimeError(f"{name} not implemented for complex tensors.")
    return check


_TYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16"}


def _embedding_bag_check(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                         per_sample_weights=None, *rest, **kwargs):
    if indices.dim() not in (1, 2):
        raise RuntimeError(f"input has to be a 1D or 2D Tensor, but got Tensor of dimension {indices.dim()}")
    if offsets.dim() != 1:
        raise RuntimeError(f"offsets has to be a 1D Tensor, but got Tensor of dimension {offsets.dim()}")
    if weight.dim() != 2:
        raise RuntimeError(f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.dim()}")
    if per_sample_weights is not None and per_sample_weights.dtype != weight.dtype:
        w, p = (_TYPE_NAMES.get(t.dtype, str(t.dtype)) for t in (weight, per_sample_weights))
        raise RuntimeError(
            f"Expected tensor for argument #1 'weight' to have the same type as tensor for argument #1 "
            f"'per_sample_weights'; but type torch.{w}Tensor does not equal torch.{p}Tensor")


_warned_once = set()


def _warn_once(message):
    # The CPU kernel's TORCH_WARN_ONCE: once per process.
    if message not in _warned_once:
        _warned_once.add(message)
        warnings.warn(message, UserWarning, stacklevel=3)


def _non_contiguous_warnings(values, boundaries, sorter=None):
    # searchsorted and bucketize copy non-contiguous arguments on the CPU and
    # warn once that it costs; neuron tensors report the CPU's strides, so the
    # same warning comes at the call (the kernel that runs later sees dense data).
    for what, t in (("input value", values), ("boundary", boundaries), ("sorter", sorter)):
        if isinstance(t, torch.Tensor) and not t.is_contiguous():
            _warn_once(f"torch.searchsorted(): {what} tensor is non-contiguous, this will lower the performance "
                       f"due to extra data copy when converting non-contiguous tensor to contiguous, please use "
                       f"contiguous {what} tensor if possible. This message will only appear once per program.")


def _searchsorted_check(sorted_sequence, values, *rest, out_int32=False, right=False, side=None, sorter=None,
                        out=None, **kwargs):
    # The CPU kernel checks side, right, the sorter and the out's dtype, where
    # the Meta kernel converts or ignores: the same call on one-element CPU
    # tensors raises the CPU's error (the sorter's size, cut away there, first).
    if not isinstance(sorted_sequence, torch.Tensor):
        return
    if isinstance(sorter, torch.Tensor) and sorter.shape != sorted_sequence.shape:
        raise RuntimeError(f"torch.searchsorted(): boundary and sorter must have the same size, but got boundary "
                           f"tensor {list(sorted_sequence.shape)}and got sorter tensor {list(sorter.shape)}")
    tensor = isinstance(values, torch.Tensor)
    key = (torch.searchsorted, sorted_sequence.dtype, sorted_sequence.dim(), values.dtype if tensor else type(values),
           out_int32, right, side, None if sorter is None else sorter.dtype, None if out is None else out.dtype)
    _probe_once(key, lambda: torch.searchsorted(
        _small(sorted_sequence), _small(values) if tensor else values, out_int32=out_int32, right=right, side=side,
        sorter=None if sorter is None else torch.zeros_like(_small(sorter)),
        out=None if out is None else torch.empty(0, dtype=out.dtype)))
    _non_contiguous_warnings(values, sorted_sequence, sorter)


def _bucketize_check(values, boundaries, *rest, **kwargs):
    if isinstance(boundaries, torch.Tensor) and boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    _non_contiguous_warnings(values, boundaries)


def _dim_mask_check(self, dim=None, *rest, **kwargs):
    # The CPU's reductions over named dims keep them in a 64-bit mask and
    # refuse tensors of more dims, in the kernel (these Meta kernels do not).
    if isinstance(self, torch.Tensor) and self.dim() > 64 and dim is not None and dim != []:
        raise RuntimeError("only tensors with up to 64 dims are supported")


def _index_put_check(self, indices, values, *rest, **kwargs):
    if isinstance(values, torch.Tensor) and values.dtype != self.dtype and self.dtype in _C_NAMES \
            and values.dtype in _C_NAMES:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{_dtype_name(self.dtype)} for the destination and {_dtype_name(values.dtype)} "
                           f"for the source.")
    tensors = [i for i in indices if i is not None]
    if not tensors or any(i.dtype in (torch.bool, torch.uint8) for i in tensors):
        return  # masks: the result's shape is their count of True, known when the graph runs
    try:
        torch.broadcast_shapes(*(i.shape for i in tensors))
    except RuntimeError:
        shapes = ", ".join(str(list(i.shape)) for i in tensors)
        raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with shapes {shapes}") from None
    result = list(torch.ops.aten.index.Tensor(self, list(indices)).shape)
    value = list(values.shape)
    if len(value) > len(result) or any(v not in (1, r) for v, r in zip(reversed(value), reversed(result))):
        raise RuntimeError(f"shape mismatch: value tensor of shape {value} cannot be broadcast to indexing "
                           f"result of shape {result}")


# Probes: where PyTorch's Meta kernels are more lenient than the CPU kernels,
# the same call on small CPU tensors raises the CPU's error (and warns its
# warnings). Each signature is probed once, unless the call warned (the CPU
# warns at every call).
_probed = set()


def _probe_once(key, call):
    if key in _probed:
        return
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        call()
    for w in warned:
        warnings.warn(w.message, w.category, stacklevel=3)
    if not warned and len(_probed) < 8192:
        _probed.add(key)


def _small(a):
    """A CPU tensor of `a`'s dtype and rank, each dim cut to at most one element."""
    return torch.ones([min(s, 1) for s in a.shape], dtype=a.dtype, device="cpu")


def _elementwise_probe(fn):
    # torch.complex and torch.polar refuse mixed or integral dtypes (and an out
    # of another complex dtype) in the CPU kernel.
    def check(a, b, *args, out=None, **kwargs):
        key = (fn, a.dtype, b.dtype, None if out is None else out.dtype)
        _probe_once(key, lambda: fn(_small(a), _small(b), out=None if out is None else
                                     torch.empty(0, dtype=out.dtype, device="cpu")))
    return check


def _alpha_probe(fn):
    # add, sub and rsub: the CPU kernels refuse subtraction with bool tensors
    # and an alpha of the wrong kind for the result's dtype (a float alpha for
    # integral or bool results, a bool alpha for others); PyTorch's Meta kernel
    # makes only some of these checks. The same call on one-element CPU tensors
    # raises the CPU's error.
    def check(self, other, *rest, alpha=1, out=None, **kwargs):
        if not isinstance(self, torch.Tensor):
            return
        tensor = isinstance(other, torch.Tensor)
        key = (fn, self.dtype, other.dtype if tensor else type(other), tensor and other.dim() == 0, type(alpha))
        _probe_once(key, lambda: fn(_small(self), _small(other) if tensor else other, alpha=alpha))
    return check


def _bernoulli_check(self, p=None, *args, **kwargs):
    if isinstance(p, (int, float)):  # torch.bernoulli(x, p): the CPU checks p as bernoulli_ does
        _cpu_probe("bernoulli_")(self, p)


# randperm's CPU kernel refuses an n its result dtype cannot count to
# (check_supported_max_int_with_precision in TensorFactories.cpp).
_RANDPERM_LIMITS = {torch.float16: (2**11 + 1, "2049"), torch.float32: (2**24 + 1, "2^24+1"),
                    torch.float64: (2**53 + 1, "2^53+1")}


def _randperm_check(n, *args, dtype=None, out=None, **kwargs):
    dtype = out.dtype if out is not None else (torch.int64 if dtype is None else dtype)
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    torch.scalar_tensor(n - 1 if n > 0 else n, dtype=dtype, device="cpu")  # raises on overflow
    limit = _RANDPERM_LIMITS.get(dtype)
    if limit is not None and n > limit[0]:
        raise RuntimeError(f"n cannot be greater than {limit[1]} for {_dtype_name(dtype)} type.")


def _clamp_check(self, min=None, max=None, *rest, **kwargs):  # noqa: A002 - the schema's names
    if min is None and max is None:
        # The refs' Meta kernel raises a ValueError in other words.
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")


def _pow_check(self, exponent=None, *rest, **kwargs):
    # pow.Tensor_Scalar's C++ Meta kernel refuses an integer (or bool) tensor to
    # a negative integer power, as NumPy does; pow_.Scalar's Python one does not,
    # so x.pow_(-1) on an integer tensor was traced and failed at the sync.
    if (isinstance(self, torch.Tensor) and isinstance(exponent, int) and exponent < 0
            and not self.dtype.is_floating_point and not self.dtype.is_complex):
        raise RuntimeError("Integers to negative integer powers are not allowed.")


def _nonempty_reduction(name, reported=None):
    """max, min, median, nanmedian and mode over a dim of size 0 have no value
    to give: the CPU refuses them (an IndexError naming the dim, as wrapped), and
    max() and min() of an empty tensor; the Meta kernels return empty results."""
    reported = reported or name

    def check(self, dim=None, *args, **kwargs):
        if not isinstance(self, torch.Tensor):
            return
        if dim is None and name == "mode":
            dim = -1  # mode(self, dim=-1): the default may not be passed
        if dim is None:
            if name in ("max", "min") and not args and isinstance(self.numel(), int) and self.numel() == 0:
                raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                                   "Specify the reduction dim with the 'dim' argument.")
            return
        if type(dim) is not int or self.dim() == 0 or not -self.dim() <= dim < self.dim():
            return  # max(a, b), a named dim, a scalar or a bad dim: the Meta kernel decides
        wrapped = dim % self.dim()
        size = self.shape[wrapped]
        if isinstance(size, int) and size == 0:
            raise IndexError(f"{reported}(): Expected reduction dim {wrapped} to have non-zero size.")
    return check


# Checks the CPU kernels make and PyTorch's Python Meta kernels do not
# (heaviside of mixed dtypes, maximum of complex tensors, index_put's shapes,
# embedding_bag's dimensions and per-sample weights): without them neuron
# traced the op and failed at the sync, in unrelated code. With them the Meta
# kernel refuses the inputs, so the tracer hands the op to the CPU fallback,
# whose CPU kernel raises its own error at the call. Keyed by the op's name
# without a trailing "_"; they run for every overload (out= and in-place).
KERNEL_CHECKS = {
    "heaviside": _heaviside_check,
    "maximum": _no_complex("maximum"),
    "minimum": _no_complex("minimum"),
    "fmax": _no_complex("fmax"),
    "fmin": _no_complex("fmin"),
    "clamp": _clamp_check,
    "pow": _pow_check,
    "randperm": _randperm_check,
    "bernoulli": _bernoulli_check,
    "complex": _elementwise_probe(torch.complex),
    "polar": _elementwise_probe(torch.polar),
    "index_put": _index_put_check,
    "_index_put_impl": _index_put_check,
    "searchsorted": _searchsorted_check,
    "add": _alpha_probe(torch.add),
    "sub": _alpha_probe(torch.sub),
    "rsub": _alpha_probe(torch.rsub),
    "nansum": _dim_mask_check,
    "argmax": _dim_mask_check,
    "argmin": _dim_mask_check,
    "bucketize": _bucketize_check,
    "_embedding_bag": _embedding_bag_check,
    "_embedding_bag_forward_only": _embedding_bag_check,
    "max": _nonempty_reduction("max"),
    "min": _nonempty_reduction("min"),
    "median": _nonempty_reduction("median"),
    "nanmedian": _nonempty_reduction("nanmedian", reported="median"),
    "mode": _nonempty_reduction("mode"),
}


# Kernel checks whose outcome depends on the arguments' signature alone
# (dtypes, ranks, scalar kinds), not on scalar values.
SIGNATURE_CHECKS = {"add", "sub", "rsub"}


# The in-place random ops: their CPU kernels check the parameters (from < to
# and the dtype's range for random_, std >= 0, p in [0, 1], a floating self
# for uniform_) where the Meta kernels do not, or word the error otherwise. The
# same call on an empty CPU tensor of self's dtype raises the CPU's error; it
# draws with a generator of its own, so the user's streams stay untouched.
# Parameters that passed are remembered (a dropout's bernoulli_ every step).
# The probe has one element (none for an empty self), so the CPU kernel's
# dtype errors come too ("normal_kernel_cpu" not implemented for 'Int'). Only
# the user's call is probed: a Meta kernel that calls another random op
# (geometric_'s draws uniform_ into its int self) runs that one unprobed.
CPU_PROBED = ("random_", "uniform_", "normal_", "exponential_", "geometric_", "cauchy_",
              "log_normal_", "bernoulli_")
_probing_now = threading.local()


class _ProbedMeta:
    """Marks the thread as running a probed op's Meta kernel."""

    def __enter__(self):
        _probing_now.depth = getattr(_probing_now, "depth", 0) + 1

    def __exit__(self, *exc):
        _probing_now.depth -= 1


def _cpu_probe(name):
    def check(self, *args, generator=None, **kwargs):
        if getattr(_probing_now, "depth", 0) > 0:
            return
        if any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values())):
            return  # bernoulli_ with a tensor of probabilities: its Meta kernel checks
        numel = self.numel()
        if not isinstance(numel, int):
            return  # symbolic sizes (torch.compile's fake tensors)
        key = (name, self.dtype, numel > 0, args, tuple(sorted(kwargs.items())))
        _probe_once(key, lambda: getattr(torch.empty(min(numel, 1), dtype=self.dtype, device="cpu"), name)(
            *args, generator=torch.Generator(), **kwargs))
    return check


def _complex_abs_in_place(self, *args, **kwargs):
    # abs of a complex tensor is real: the CPU refuses to write it into self.
    if isinstance(self, torch.Tensor) and self.is_complex():
        raise RuntimeError("In-place abs is not supported for complex tensors.")


def _as_strided_scatter_check(self, src, size, stride, storage_offset=None, *args, **kwargs):
    # The CPU refuses to scatter into a strided image whose elements repeat (a
    # zero stride); the C++ Meta kernel does not check. (Functionalization's own
    # write-back through such a view is refused here too: it cannot say which
    # of the repeated elements a write meant.)
    if any(isinstance(n, int) and isinstance(st, int) and st == 0 and n > 1 for n, st in zip(size, stride)):
        raise RuntimeError(_OVERLAP)


def _copy_check(self, src, *args, **kwargs):
    # copy_ into a tensor whose elements share memory (an expanded tensor): the
    # CPU refuses it; functionalization's write-back through expand would sum
    # the copies of each element, a wrong result.
    if torch._debug_has_internal_overlap(self) == 1:
        raise RuntimeError(_OVERLAP)


# Ops whose Meta kernel is C++: the check, then it.
CPP_META_CHECKS = {"as_strided_scatter": _as_strided_scatter_check, "copy_": _copy_check}

# Checks of in-place forms only, by the op's name.
INPLACE_CHECKS = {"abs_": _complex_abs_in_place}


def _kernel_check(op):
    name = op._schema.name.split("::")[1]
    if name in CPU_PROBED:
        return _cpu_probe(name)
    return INPLACE_CHECKS.get(name) or KERNEL_CHECKS.get(name.rstrip("_"))
