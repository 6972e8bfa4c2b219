"""What each op accepts as inputs, for the shape registry's replay (replay.py):
rules that fill a rebuilt call's tensors with values the op's own constraints
allow (index arguments within the dim they index, probabilities in [0, 1],
positive-definite matrices, nonzero divisors...), and the tables of ops whose
inputs need distinct values, whose results are uninitialized, or that cannot be
replayed from a record alone. A rule takes the call and a seeded generator and
fills its tensors in place; one that cannot make valid inputs raises
Unreplayable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch


class Unreplayable(Exception):
    """The signature cannot be rebuilt into a valid call (the message says why)."""

def base_name(op: str) -> Tuple[str, str, str]:
    """("aten", "add", "Tensor") for "aten::add.Tensor"."""
    ns, _, rest = op.partition("::")
    name, _, overload = rest.partition(".")
    return ns, name, overload


def stem(name: str) -> str:
    """The op's family: "index_put" for index_put_, _index_put_impl_ etc."""
    s = name
    if s.endswith("_") and not s.endswith("__"):
        s = s[:-1]
    if s.endswith("_copy") and s not in ("_to_copy", "copy"):
        s = s[: -len("_copy")]
    return s




@dataclass
class Call:
    op: str
    schema: Any
    values: List[Any]  # one per schema argument (tensors made, placeholders kept)

    def index(self, name: str) -> int:
        for i, a in enumerate(self.schema.arguments):
            if a.name == name:
                return i
        return -1

    def get(self, name: str, default=None):
        i = self.index(name)
        return self.values[i] if 0 <= i < len(self.values) else default

    def set(self, name: str, value) -> None:
        i = self.index(name)
        if 0 <= i < len(self.values):
            self.values[i] = value

    def tensor(self, name: str) -> Optional[torch.Tensor]:
        v = self.get(name)
        return v if isinstance(v, torch.Tensor) else None


def _fill_int(t: Optional[torch.Tensor], low: int, high: int, gen: torch.Generator) -> None:
    """Fills an integer tensor with values in [low, high) (an index argument)."""
    if t is None or t.dtype.is_floating_point or t.dtype == torch.bool or t.numel() == 0:
        return
    if high <= low:
        raise Unreplayable(f"an index into an empty dim (range [{low}, {high}))")
    t.copy_(torch.randint(low, high, t.shape, generator=gen).to(t.dtype))


def _dim_size(t: torch.Tensor, dim) -> int:
    if t.dim() == 0:
        return 1
    return t.shape[dim if isinstance(dim, int) else 0]


def _index_rule(index_arg: str, source_arg: str, dim_arg: Optional[str] = "dim"):
    def rule(call: Call, gen):
        src = call.tensor(source_arg)
        if src is None:
            return
        dim = call.get(dim_arg, 0) if dim_arg else 0
        _fill_int(call.tensor(index_arg), 0, _dim_size(src, dim), gen)
    return rule


def _rule_embedding(call, gen):
    w = call.tensor("weight")
    if w is None:
        w = call.tensor("self")  # embedding_renorm(self = the table, indices, ...)
    if w is not None:
        _fill_int(call.tensor("indices"), 0, w.shape[0], gen)


def _rule_embedding_backward(call, gen):
    n = call.get("num_weights")
    if isinstance(n, int):
        _fill_int(call.tensor("indices"), 0, n, gen)


def _rule_embedding_bag(call, gen):
    w, idx, off = call.tensor("weight"), call.tensor("indices"), call.tensor("offsets")
    if w is None or idx is None:
        return
    _fill_int(idx, 0, w.shape[0], gen)
    if off is not None and off.numel() > 0:
        cuts = torch.sort(torch.randint(0, idx.numel() + 1, (off.numel(),), generator=gen)).values
        cuts[0] = 0
        off.copy_(cuts.to(off.dtype))


def _rule_index_list(call, gen):
    src = call.tensor("self")
    indices = call.get("indices")
    if src is None or not isinstance(indices, list):
        return
    values = call.tensor("values")
    for d, t in enumerate(indices):
        if isinstance(t, torch.Tensor) and d < src.dim():
            _fill_int(t, 0, src.shape[d], gen)
            if t.dtype == torch.bool and values is not None and values.dim() > 0 and len(indices) == 1 \
                    and t.dim() + values.dim() - 1 == src.dim() and values.shape[0] <= t.numel():
                # index_put with a mask: as many selected places as values to put.
                flat = torch.zeros(t.numel(), dtype=torch.bool)
                flat[torch.randperm(t.numel(), generator=gen)[: values.shape[0]]] = True
                t.copy_(flat.reshape(t.shape))


def _rule_take_along(call, gen):
    src, dim = call.tensor("self"), call.get("dim")
    if src is not None:
        _fill_int(call.tensor("indices"), 0, src.numel() if dim is None else _dim_size(src, dim), gen)


def _rule_take(call, gen):
    src = call.tensor("self")
    if src is not None:
        _fill_int(call.tensor("index"), 0, src.numel(), gen)


def _rule_nll_loss(call, gen):
    x = call.tensor("self")
    if x is None:
        return
    classes = x.shape[1] if x.dim() >= 2 else x.shape[0] if x.dim() == 1 else 1
    _fill_int(call.tensor("target"), 0, classes, gen)


def _rule_one_hot(call, gen):
    n = call.get("num_classes", -1)
    _fill_int(call.tensor("self"), 0, n if isinstance(n, int) and n > 0 else 4, gen)


def _rule_nonnegative(name: str, high: int = 4):
    def rule(call, gen):
        _fill_int(call.tensor(name), 0, high, gen)
    return rule


def _rule_pool_indices(call, gen):
    x, idx = call.tensor("self"), call.tensor("indices")
    if x is None or idx is None:
        return
    spatial = 2 if "2d" in call.op else 3 if "3d" in call.op else 1
    plane = math.prod(x.shape[-spatial:]) if x.dim() >= spatial else 1
    _fill_int(idx, 0, plane, gen)


def _rule_repeats(call, gen):
    """repeat_interleave: small nonnegative repeats, summing to output_size when
    that is given (the output's length)."""
    repeats = call.tensor("repeats")
    if repeats is None and call.tensor("self") is not None and not call.tensor("self").dtype.is_floating_point \
            and call.index("repeats") < 0:
        repeats = call.tensor("self")  # repeat_interleave.Tensor(repeats, output_size)
    if repeats is None or repeats.numel() == 0:
        return
    total = call.get("output_size")
    if isinstance(total, int) and total >= 0:
        cuts = torch.sort(torch.randint(0, total + 1, (repeats.numel() - 1,), generator=gen)).values
        bounds = torch.cat([torch.zeros(1, dtype=torch.long), cuts, torch.full((1,), total)])
        repeats.copy_(bounds.diff().reshape(repeats.shape).to(repeats.dtype))
    else:
        _fill_int(repeats, 0, 3, gen)


def _rule_probability(*names: str):
    def rule(call, gen):
        for name in names:
            t = call.tensor(name)
            if t is not None and t.dtype.is_floating_point:
                t.copy_(torch.rand(t.shape, generator=gen).mul(0.98).add(0.01).to(t.dtype))
    return rule


def _rule_positive(*names: str):
    def rule(call, gen):
        for name in names:
            t = call.tensor(name)
            if t is not None and (t.dtype.is_floating_point or t.dtype.is_complex):
                t.copy_(t.abs() + 0.5)
    return rule


def _rule_unit_interval(call, gen):
    t = call.tensor("self")
    if t is not None and t.dtype.is_floating_point:
        t.copy_(torch.rand(t.shape, generator=gen).mul(1.98).sub(0.99).to(t.dtype))


def _rule_at_least_one(call, gen):
    t = call.tensor("self")
    if t is not None and t.dtype.is_floating_point:
        t.copy_(t.abs() + 1.0)


def _rule_positive_definite(*names: str):
    def rule(call, gen):
        for name in names:
            t = call.tensor(name)
            if t is None or t.dim() < 2 or t.shape[-1] != t.shape[-2] or not (
                    t.dtype.is_floating_point or t.dtype.is_complex):
                continue
            n = t.shape[-1]
            pd = t @ t.mH + n * torch.eye(n, dtype=t.dtype)
            t.copy_(pd)
    return rule


def _rule_triangular_factor(name: str):
    def rule(call, gen):
        t = call.tensor(name)
        if t is None or t.dim() < 2 or not t.dtype.is_floating_point:
            return
        upper = bool(call.get("upper", False))
        f = torch.triu(t) if upper else torch.tril(t)
        f.diagonal(dim1=-2, dim2=-1).copy_(t.diagonal(dim1=-2, dim2=-1).abs() + 1.0)
        t.copy_(f)
    return rule


def _rule_nonzero_divisor(call, gen):
    t = call.tensor("other")
    if t is not None and not t.dtype.is_floating_point and not t.dtype.is_complex:
        t.copy_(torch.where(t == 0, torch.ones_like(t), t))
        if t.dtype != torch.bool:
            t.copy_(t.abs().clamp(min=1))
    elif not isinstance(t, torch.Tensor):
        v = call.get("other")
        if isinstance(v, int) and not isinstance(v, bool) and v == 0:
            call.set("other", 1)


def _rule_int_exponent(call, gen):
    x, e = call.tensor("self"), call.tensor("exponent")
    if e is not None and not e.dtype.is_floating_point and e.dtype != torch.bool:
        if x is None or not x.dtype.is_floating_point:
            e.copy_(e.abs())


def _rule_shift(call, gen):
    t = call.tensor("other")
    if t is not None and not t.dtype.is_floating_point:
        _fill_int(t, 0, 4, gen)


def _rule_sorted(name: str):
    def rule(call, gen):
        t = call.tensor(name)
        if t is not None and t.numel() > 0:
            t.copy_(torch.sort(t, dim=-1).values)
    return rule


def _rule_true(call, gen):
    t = call.tensor("self")
    if t is not None:
        t.copy_(torch.ones_like(t))


def _rule_ctc(call, gen):
    lp, targets = call.tensor("log_probs"), call.tensor("targets")
    if lp is None or targets is None:
        return
    steps, classes = lp.shape[0], lp.shape[-1]
    batch = lp.shape[1] if lp.dim() == 3 else 1
    blank = call.get("blank", 0)
    # Labels other than the blank; lengths a path through `steps` frames can emit.
    _fill_int(targets, 1 if blank == 0 else 0, classes if blank == 0 else classes - 1, gen)
    longest = max(1, (steps - 1) // 2)
    if targets.dim() == 1:  # concatenated: the lengths sum to its length
        total = targets.numel()
        lengths = [total // batch + (1 if b < total % batch else 0) for b in range(batch)]
        if max(lengths) > longest:
            raise Unreplayable(f"{total} concatenated targets do not fit {batch} sequences of {steps} frames")
    else:
        lengths = [min(targets.shape[-1], longest)] * batch
    for name, value in (("input_lengths", [steps] * batch), ("target_lengths", lengths)):
        current = call.get(name)
        if isinstance(current, torch.Tensor):
            current.copy_(torch.tensor(value, dtype=current.dtype).reshape(current.shape))
        elif isinstance(current, list):
            call.set(name, value)


def _rule_masked_scatter(call, gen):
    """At most as many (broadcast) true mask elements as the source holds."""
    x, mask = call.tensor("self"), call.tensor("mask")
    if mask is None:
        return
    source = call.tensor("source")
    available = source.numel() if source is not None else math.prod(call.get("sizes") or [0])
    full = x.numel() if x is not None else call.tensor("grad_output").numel()
    per_element = max(1, full // max(mask.numel(), 1))
    chosen = min(mask.numel(), available // per_element)
    flat = torch.zeros(mask.numel(), dtype=torch.bool)
    flat[torch.randperm(mask.numel(), generator=gen)[:chosen]] = True
    mask.copy_(flat.reshape(mask.shape))


def _rule_group_offsets(call, gen):
    """_grouped_mm's offs: where each group ends along the grouped dim, sorted,
    the last at its length (rows past it would be left uninitialized)."""
    a, b, offs = call.tensor("self"), call.tensor("mat2"), call.tensor("offs")
    if a is None or b is None or offs is None or offs.numel() == 0:
        return
    if a.dim() == 2 and b.dim() == 3:
        total = a.shape[0]
    elif a.dim() == 3 and b.dim() == 2:
        total = b.shape[1]
    else:
        total = a.shape[-1]
    cuts = torch.sort(torch.randint(0, total + 1, (offs.numel(),), generator=gen)).values
    cuts[-1] = total
    offs.copy_(cuts.to(offs.dtype))


def _rule_bag_backward(call, gen):
    """The embedding-bag backward ops read what the forward made: indices into
    the table, sorted offsets starting at 0, offset2bag naming a bag of each index."""
    indices, offsets, o2b = call.tensor("indices"), call.tensor("offsets"), call.tensor("offset2bag")
    weight = call.tensor("weight")
    rows = weight.shape[0] if weight is not None else call.get("num_weights")
    if indices is not None and isinstance(rows, int):
        _fill_int(indices, 0, rows, gen)
    if offsets is not None and offsets.numel() > 0 and indices is not None:
        cuts = torch.sort(torch.randint(0, indices.numel() + 1, (offsets.numel(),), generator=gen)).values
        cuts[0] = 0
        offsets.copy_(cuts.to(offsets.dtype))
    bags = call.tensor("grad").shape[0] if call.tensor("grad") is not None else 1
    if o2b is not None:
        _fill_int(o2b, 0, max(bags, 1), gen)
    for name in ("bag_size", "maximum_indices"):
        t = call.tensor(name)
        if t is not None and indices is not None:
            _fill_int(t, 0, max(indices.numel(), 1), gen)


def _rule_distinct_index(call, gen):
    """index_copy: indices in range and distinct where the dim has room (two
    writes to one place leave either value, both correct)."""
    src, idx = call.tensor("self"), call.tensor("index")
    if src is None or idx is None or idx.numel() == 0:
        return
    size = _dim_size(src, call.get("dim", 0))
    if idx.numel() > size:
        _fill_int(idx, 0, size, gen)
    else:
        idx.copy_(torch.randperm(size, generator=gen)[:idx.numel()].reshape(idx.shape).to(idx.dtype))


def _rule_targets(call, gen):
    """Class-index targets of the margin losses: in range of the class dim; a
    multilabel row's labels end at the first -1, so none is negative."""
    x, target = call.tensor("self"), call.tensor("target")
    if x is not None and target is not None:
        _fill_int(target, 0, x.shape[-1] if x.dim() > 0 else 1, gen)
    is_target = call.tensor("is_target")  # the forward's marks of each row's labels
    if is_target is not None and target is not None and is_target.shape == target.shape:
        marks = torch.zeros(is_target.shape, dtype=is_target.dtype)
        marks.scatter_(-1, target.long(), 1) if target.dim() else marks.fill_(1)
        is_target.copy_(marks)


def _rule_no_error(call, gen):
    """_linalg_check_errors raises for a nonzero LAPACK info by design."""
    info = call.tensor("info")
    if info is not None:
        info.zero_()


def _rule_put(call, gen):
    x, index = call.tensor("self"), call.tensor("index")
    if x is not None:
        _fill_int(index, 0, x.numel(), gen)


def _rule_segments(call, gen):
    """segment_reduce: lengths (or offsets) that cut data's axis into segments."""
    data = call.tensor("data")
    if data is None:
        return
    axis = call.get("axis", 0)
    total = data.shape[axis] if data.dim() else 1
    lengths, offsets = call.tensor("lengths"), call.tensor("offsets")
    for t, as_offsets in ((lengths, False), (offsets, True)):
        if t is None or t.numel() == 0 or t.dtype.is_floating_point:
            continue
        segments = t.shape[-1] - (1 if as_offsets else 0)
        cuts = torch.sort(torch.randint(0, total + 1, (max(segments - 1, 0),), generator=gen)).values
        bounds = torch.cat([torch.zeros(1, dtype=torch.long), cuts, torch.full((1,), total)])
        row = bounds if as_offsets else bounds.diff()
        t.copy_(row[-t.shape[-1]:].expand(t.shape).to(t.dtype))


def _rule_factorization(kind: str):
    """lu_solve, lu_unpack, ldl_solve: a factor and pivots made by the factoring
    op itself, from a well-conditioned matrix of the factor's shape and dtype."""
    def rule(call, gen):
        factor = call.tensor("LD" if kind == "ldl" else "LU")
        factor = factor if factor is not None else call.tensor("LU_data")  # lu_unpack's names
        pivots = call.tensor("pivots")
        pivots = pivots if pivots is not None else call.tensor("LU_pivots")
        if factor is None or pivots is None or factor.dim() < 2:
            return
        m, n = factor.shape[-2], factor.shape[-1]
        if kind == "ldl" or m == n:
            a = factor + max(m, n) * torch.eye(m, n, dtype=factor.dtype)
        else:
            a = factor.clone()
        if kind == "ldl":
            hermitian = bool(call.get("hermitian", False))
            a = a + (a.mH if hermitian else a.mT)
            made, made_pivots = torch.linalg.ldl_factor(a, hermitian=hermitian)
        else:
            made, made_pivots = torch.linalg.lu_factor(a)
        if made.shape != factor.shape or made_pivots.shape != pivots.shape:
            raise Unreplayable("the recorded pivots do not match the factor's shape")
        factor.copy_(made)
        pivots.copy_(made_pivots.to(pivots.dtype))
    return rule


_scatter = _index_rule("index", "self")
RULES: Dict[str, Callable] = {
    "embedding": _rule_embedding,
    "embedding_dense_backward": _rule_embedding_backward,
    "embedding_backward": _rule_embedding_backward,
    "_embedding_bag": _rule_embedding_bag,
    "_embedding_bag_forward_only": _rule_embedding_bag,
    "embedding_bag": _rule_embedding_bag,
    "gather": _index_rule("index", "self"),
    "scatter": _scatter,
    "scatter_add": _scatter,
    "scatter_reduce": _scatter,
    "index_select": _index_rule("index", "self"),
    "index_add": _index_rule("index", "self"),
    "index_fill": _index_rule("index", "self"),
    "index_reduce": _index_rule("index", "self"),
    "index": _rule_index_list,
    "index_put": _rule_index_list,
    "_index_put_impl": _rule_index_list,
    "_unsafe_index": _rule_index_list,
    "_unsafe_index_put": _rule_index_list,
    "take_along_dim": _rule_take_along,
    "take": _rule_take,
    "nll_loss": _rule_nll_loss,
    "nll_loss_forward": _rule_nll_loss,
    "nll_loss_backward": _rule_nll_loss,
    "nll_loss2d_forward": _rule_nll_loss,
    "nll_loss2d_backward": _rule_nll_loss,
    "nll_loss_nd": _rule_nll_loss,
    "one_hot": _rule_one_hot,
    "bincount": _rule_nonnegative("self", 8),
    "repeat_interleave": _rule_repeats,
    "max_pool2d_with_indices_backward": _rule_pool_indices,
    "max_pool3d_with_indices_backward": _rule_pool_indices,
    "adaptive_max_pool2d_backward": _rule_pool_indices,
    "adaptive_max_pool3d_backward": _rule_pool_indices,
    "fractional_max_pool2d_backward": _rule_pool_indices,
    "fractional_max_pool3d_backward": _rule_pool_indices,
    "max_unpool2d": _rule_pool_indices,
    "max_unpool3d": _rule_pool_indices,
    "index_copy": _rule_distinct_index,
    "put": _rule_put,
    "multi_margin_loss": _rule_targets,
    "multi_margin_loss_backward": _rule_targets,
    "multilabel_margin_loss_forward": _rule_targets,
    "multilabel_margin_loss_backward": _rule_targets,
    "_linalg_check_errors": _rule_no_error,
    "segment_reduce": _rule_segments,
    "_segment_reduce_backward": _rule_segments,
    "linalg_lu_solve": _rule_factorization("lu"),
    "lu_unpack": _rule_factorization("lu"),
    "linalg_ldl_solve": _rule_factorization("ldl"),
    "bernoulli": _rule_probability("self", "p"),
    "binary_cross_entropy": _rule_probability("self", "target"),
    "binary_cross_entropy_backward": _rule_probability("self", "target"),
    "multinomial": _rule_positive("self"),
    "log": _rule_positive("self"), "log2": _rule_positive("self"), "log10": _rule_positive("self"),
    "sqrt": _rule_positive("self"), "rsqrt": _rule_positive("self"),
    "log1p": _rule_positive("self"), "lgamma": _rule_positive("self"), "digamma": _rule_positive("self"),
    "acos": _rule_unit_interval, "asin": _rule_unit_interval, "atanh": _rule_unit_interval,
    "erfinv": _rule_unit_interval, "acosh": _rule_at_least_one,
    "cholesky": _rule_positive_definite("self"),
    "linalg_cholesky_ex": _rule_positive_definite("self"),
    "linalg_cholesky": _rule_positive_definite("self"),
    "linalg_inv_ex": _rule_positive_definite("A"),
    "linalg_inv": _rule_positive_definite("A"),
    "inverse": _rule_positive_definite("self"),
    "linalg_solve_ex": _rule_positive_definite("A"),
    "_linalg_solve_ex": _rule_positive_definite("A"),
    "linalg_eigh": _rule_positive_definite("self"),
    "_linalg_eigh": _rule_positive_definite("A"),
    "logdet": _rule_positive_definite("self"),
    "_linalg_slogdet": _rule_positive_definite("A"),
    "_linalg_det": _rule_positive_definite("A"),
    "cholesky_inverse": _rule_triangular_factor("self"),
    "cholesky_solve": _rule_triangular_factor("input2"),
    "div": _rule_nonzero_divisor, "remainder": _rule_nonzero_divisor, "fmod": _rule_nonzero_divisor,
    "floor_divide": _rule_nonzero_divisor,
    "pow": _rule_int_exponent,
    "bitwise_left_shift": _rule_shift, "bitwise_right_shift": _rule_shift,
    "__lshift__": _rule_shift, "__rshift__": _rule_shift,
    "searchsorted": _rule_sorted("sorted_sequence"),
    "bucketize": _rule_sorted("boundaries"),
    "_assert_async": _rule_true,
    "_ctc_loss": _rule_ctc,
    "_ctc_loss_backward": _rule_ctc,
    "masked_scatter": _rule_masked_scatter,
    "embedding_renorm": _rule_embedding,
    "normal": _rule_positive("std"),
    "_embedding_bag_backward": _rule_bag_backward,
    "_embedding_bag_dense_backward": _rule_bag_backward,
    "_embedding_bag_per_sample_weights_backward": _rule_bag_backward,
    "_grouped_mm": _rule_group_offsets,
    "masked_scatter_backward": _rule_masked_scatter,
}

# Ops that return positions (sort, topk...): ties would make two correct
# answers differ, so their inputs get distinct values.
DISTINCT_VALUES = {
    "sort", "argsort", "topk", "max", "min", "argmax", "argmin", "median", "nanmedian", "mode", "kthvalue",
    "cummax", "cummin", "msort", "unique_consecutive", "_unique2", "unique_dim", "max_pool2d_with_indices",
    "max_pool3d_with_indices", "adaptive_max_pool2d", "adaptive_max_pool1d",
}

# Ops whose results are uninitialized memory: shapes, dtypes compared, not values.
UNDEFINED_VALUES = {
    "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted", "resize",
    "_resize_output",
}


# Backward ops whose CPU kernel reads state only their forward op makes
# consistently (offset2bag, bag sizes, max positions): generated stand-ins gave
# results that vary with the process's memory, so these are not replayed.
NEEDS_FORWARD_STATE = {"_embedding_bag_backward", "_embedding_bag_dense_backward",
                       "_embedding_bag_per_sample_weights_backward"}

# Results partly left uninitialized by the op (CTC's log_alpha beyond each
# sequence's lattice): by result position, compared by shape and dtype only.
UNDEFINED_RESULTS = {"_ctc_loss": {1}}


def constraint_rule(op: str) -> Optional[Callable]:
    """The op's own rule, else its view family's (view_copy is view's): the
    stem alone took index_copy for index."""
    name = base_name(op)[1]
    return RULES.get(name) or RULES.get(stem(name))
