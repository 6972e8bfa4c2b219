"""Running a size-generic region's program at sizes it was not traced at
(issue 49; torch_neuron/_compile_backend.py, csrc/dynamo/compiled_graph.h).

A graph whose sizes Dynamo made symbolic is traced size-generic: every SymInt
argument of its ops is a scalar parameter of the program, and the program
takes its sizes from its operands when it runs (tier 0). What a trace at
other sizes would change is only those parameters' values and the sizes of
the program's outputs. Both are expressions of the graph's size symbols,
which AOTAutograd's graph carries (each node's ``meta["val"]``): so while the
graph is traced, each op is told (``_CompiledGraph.arm_origins``) which of its
int arguments are which expressions, and the trace notes, per parameter, the
expression it holds. A later call at new sizes binds the symbols from its
inputs' sizes, checks every input size against its expression, evaluates the
parameters and output sizes, and runs the program without a trace.

Everything is checked at the trace, where the expressions must give back the
values traced: a parameter whose origin is unknown (an op traced inside
another's kernel), a size-dependent value held as a constant, a layout other
than plain contiguous or an expression that does not evaluate to what was
traced leaves the graph to be traced at each new size, as before.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import sympy
import torch

_LITERAL = -1  # csrc/lazy/size_origins.h, SizeOrigins::kLiteral


def _expr_of(value: Any):
    """The sympy expression of a SymInt, the int itself, or None."""
    if isinstance(value, torch.SymInt):
        return value.node.expr
    if isinstance(value, int) and not isinstance(value, bool):
        return sympy.Integer(value)
    return None


def _is_int_type(t) -> bool:
    """Whether a schema argument's type is int-like: int or SymInt, possibly
    in a list or optional."""
    name = str(t)
    while True:
        for wrapper in ("Optional[", "List["):
            if name.startswith(wrapper) and name.endswith("]"):
                name = name[len(wrapper):-1]
                break
        else:
            break
    name = name.rstrip("?").replace("[]", "")
    return name in ("int", "SymInt")


def _is_scalar_type(t) -> bool:
    """Whether a schema argument's type is a Scalar, possibly optional or in
    a list."""
    name = str(t)
    for wrapper in ("Optional[", "List["):
        if name.startswith(wrapper) and name.endswith("]"):
            name = name[len(wrapper):-1]
    return name.rstrip("?").replace("[]", "") in ("Scalar", "number")


def _sizes_used_as_values(gm: torch.fx.GraphModule) -> bool:
    """Whether some op takes a size expression as a value the trace cannot
    rebind: a SymInt passed where its schema has a Tensor (``x / x.shape[0]``
    is ``div.Tensor(x, s0)``), or a SymFloat or SymBool made from one. The
    trace holds such a value as data (a wrapped number is a constant of the
    graph), not as a parameter whose origin is known, so a program run at
    other sizes would compute with the traced one. A SymInt where the schema
    has a Scalar (``arange(s0)``, ``full(..., s0)``) is a scalar parameter whose
    origin the trace notes (ArgumentBinder::ScalarOperand): it is rebound."""
    for n in gm.graph.nodes:
        if n.op != "call_function" or not hasattr(n.target, "_schema"):
            continue
        for i, a in enumerate(n.target._schema.arguments):
            value = n.args[i] if i < len(n.args) else n.kwargs.get(a.name)
            values = value if isinstance(value, (list, tuple)) else [value]
            for v in values:
                if not isinstance(v, torch.fx.Node):
                    continue
                val = v.meta.get("val")
                if isinstance(val, torch.SymInt) and (_is_int_type(a.type) or _is_scalar_type(a.type)):
                    continue
                if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                    return True
    return False


class SizePlan:
    """A size-generic graph's size expressions: how its inputs bind the
    symbols, which expression each op argument is, and the sizes of its
    results. Built once per graph; ``ok`` is False where the graph's sizes
    cannot be read this way (inputs whose sizes bind no symbol alone)."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]):
        self.exprs: List[Any] = []
        self._numbers: Dict[Any, int] = {}
        # Per input: its sizes' expressions (tensors) or its expression (a
        # SymInt), and where each symbol is read from.
        self.input_exprs: List[Any] = []
        self.input_layouts: List[Any] = []  # per tensor input: strides' and offset's expressions
        self.symbol_at: Dict[Any, Tuple[int, Optional[int]]] = {}
        for i, x in enumerate(example_inputs):
            if isinstance(x, torch.Tensor):
                sizes = [_expr_of(s) for s in x.shape]
                self.input_exprs.append(sizes)
                self.input_layouts.append(([_expr_of(s) for s in x.stride()], _expr_of(x.storage_offset())))
                for d, e in enumerate(sizes):
                    if isinstance(e, sympy.Symbol):
                        self.symbol_at.setdefault(e, (i, d))
            else:
                e = _expr_of(x)
                self.input_exprs.append(e)
                self.input_layouts.append(None)
                if isinstance(e, sympy.Symbol):
                    self.symbol_at.setdefault(e, (i, None))
        needed = set()
        for e in self.input_exprs:
            for part in (e if isinstance(e, list) else [e]):
                if part is not None:
                    needed |= part.free_symbols
        # The graph's outputs: per output, sizes' expressions (a tensor) or
        # an expression (a SymInt) or None (another value, kept as traced);
        # per tensor output, its strides' and storage offset's.
        output = next(n for n in gm.graph.nodes if n.op == "output")
        self.outputs: List[Any] = []
        self.layouts: List[Tuple[List[Any], Any]] = []
        for node in output.args[0]:
            val = node.meta.get("val") if isinstance(node, torch.fx.Node) else node
            if isinstance(val, torch.Tensor):
                self.outputs.append([_expr_of(s) for s in val.shape])
                self.layouts.append(([_expr_of(s) for s in val.stride()], _expr_of(val.storage_offset())))
            else:
                self.outputs.append(_expr_of(val) if isinstance(val, torch.SymInt) else None)
        for out in self.outputs:
            for part in (out if isinstance(out, list) else [out]):
                if part is not None:
                    needed |= part.free_symbols
        for layout in self.input_layouts:
            for part in ([*layout[0], layout[1]] if layout is not None else []):
                if part is not None:
                    needed |= part.free_symbols
        self.ok = not _sizes_used_as_values(gm) and needed <= set(self.symbol_at) and all(
            e is not None for s in self.input_exprs if isinstance(s, list) for e in s
        ) and all(e is not None for o in self.outputs if isinstance(o, list) for e in o) and all(
            e is not None and e.free_symbols <= set(self.symbol_at)
            for strides, offset in self.layouts for e in [*strides, offset]
        )

    def _origin(self, value: Any) -> int:
        e = _expr_of(value)
        if e is None or not e.free_symbols:
            return _LITERAL
        number = self._numbers.get(e)
        if number is None:
            number = self._numbers[e] = len(self.exprs)
            self.exprs.append(e)
        return number

    def _arg_origins(self, value: Any) -> List[int]:
        if isinstance(value, torch.fx.Node):
            val = value.meta.get("val")
            if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
                return [self._origin(val)]
            if isinstance(val, torch.SymFloat):
                return [-2]  # not evaluated here: the trace stays per size
            return []
        if isinstance(value, (list, tuple)):
            out = []
            for v in value:
                o = self._arg_origins(v)
                out.append(o[0] if o else _LITERAL)
            return out
        if isinstance(value, (int, float, bool)):
            return [_LITERAL]
        return []

    def arm(self, graph, node: torch.fx.Node) -> None:
        """Tells the trace the origins of ``node``'s int arguments."""
        schema = node.target._schema
        args = []
        for i, a in enumerate(schema.arguments):
            if i < len(node.args):
                value = node.args[i]
            elif a.name in node.kwargs:
                value = node.kwargs[a.name]
            else:
                value = a.default_value  # not given: the schema's default, a literal
            args.append(self._arg_origins(value))
        graph.arm_origins(schema.name, args)

    def bind(self, args: Sequence[Any]) -> Optional[Dict[Any, int]]:
        """The symbols' values read from ``args``, or None where an input's
        sizes do not fit their expressions (or its rank differs)."""
        values: Dict[Any, int] = {}
        for symbol, (i, d) in self.symbol_at.items():
            x = args[i]
            values[symbol] = int(x.shape[d]) if d is not None else int(x)
        for x, e, layout in zip(args, self.input_exprs, self.input_layouts):
            if isinstance(e, list):
                if not isinstance(x, torch.Tensor) or x.dim() != len(e):
                    return None
                if any(int(size) != evaluate(expr, values) for size, expr in zip(x.shape, e)):
                    return None
                # An input whose sizes hold a symbol: laid out as its
                # expressions say (one of fixed sizes keeps its traced
                # layout; _CompiledGraph.run_at checks).
                strides, offset = layout
                if any(s.free_symbols for s in e) and (
                    [int(v) for v in x.stride()] != [evaluate(v, values) for v in strides]
                    or int(x.storage_offset()) != evaluate(offset, values)
                ):
                    return None
            elif e is not None and int(x) != evaluate(e, values):
                return None
        return values


def _contiguous(sizes: List[int]) -> List[int]:
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]


def evaluate(expr, values: Dict[Any, int]) -> int:
    if expr.is_Integer:
        return int(expr)
    return int(expr.xreplace({s: sympy.Integer(v) for s, v in values.items()}))


class Rebinding:
    """How one traced ``_CompiledGraph`` runs at other sizes: its parameter
    slots' expressions and its program outputs' sizes, checked against the
    trace."""

    def __init__(self, plan: SizePlan, graph, traced_values: Dict[Any, int]):
        self.plan = plan
        self.graph = graph
        origins = graph.param_origins()
        self.params = [(slot, o) for slot, o in enumerate(origins) if o >= 0]
        # Each program output's sizes: those of a result or written input it
        # gives, by the graph's own expressions.
        sizes: Dict[int, List[Any]] = {}
        tensor_outputs = [o for o in plan.outputs if isinstance(o, list)]
        for exprs, (kind, index) in zip(tensor_outputs, graph.result_sources()):
            if kind == 0:
                sizes.setdefault(index, exprs)
        # The graph's tensor inputs (its program's) among all its inputs.
        tensor_inputs = [e for e in plan.input_exprs if isinstance(e, list)]
        for input_index, kind, index in graph.mutation_sources():
            if kind == 0:
                sizes.setdefault(index, tensor_inputs[input_index])
        traced = graph.output_sizes()
        self.output_exprs = [sizes.get(i) for i in range(len(traced))]
        self.result_exprs = tensor_outputs
        # A result whose sizes and layout hold no symbol keeps its traced
        # layout (a view of an input of fixed sizes: an expert's weights,
        # whose offset AOTAutograd's metadata has from its first example
        # only; RunAt runs only on such inputs of their traced layout).
        self.traced_layouts = [(list(s), o) for s, o in graph.result_layouts()]
        self.fixed = [
            not any(e.free_symbols for e in [*exprs, *strides, offset])
            for exprs, (strides, offset) in zip(tensor_outputs, plan.layouts)
        ]
        self.ok = (
            bool(origins)
            and len(tensor_outputs) == len(graph.result_sources())
            and self._layouts(traced_values) == self.traced_layouts
            and all(e is not None for e in self.output_exprs)
            and all(graph.param_value(slot) == evaluate(plan.exprs[o], traced_values) for slot, o in self.params)
            and all(
                list(t) == [evaluate(e, traced_values) for e in exprs]
                for t, exprs in zip(traced, self.output_exprs)
            )
        )

    def _layouts(self, values: Dict[Any, int], with_sizes: bool = False) -> list:
        """Each result's (strides, offset) as the trace reports them (no
        strides where contiguous), or (sizes, strides, offset)."""
        out = []
        for i, (exprs, (strides, offset)) in enumerate(zip(self.result_exprs, self.plan.layouts)):
            sizes = [evaluate(e, values) for e in exprs]
            if self.fixed[i]:
                got, at = self.traced_layouts[i]
                got = got or _contiguous(sizes)
            else:
                got = [evaluate(e, values) for e in strides]
                at = evaluate(offset, values)
            if with_sizes:
                out.append((sizes, got, at))
            else:
                out.append(([] if got == _contiguous(sizes) else got, at))
        return out

    def run(self, tensors: list, values: Dict[Any, int]):
        params = [(slot, evaluate(self.plan.exprs[o], values)) for slot, o in self.params]
        sizes = [[evaluate(e, values) for e in exprs] for exprs in self.output_exprs]
        return self.graph.run_at(tensors, params, sizes, self._layouts(values, with_sizes=True))

    def others(self, values: Dict[Any, int]) -> List[Any]:
        """The graph's non-tensor outputs at these sizes (None: not a size)."""
        return [
            evaluate(o, values) if o is not None and not isinstance(o, list) else None
            for o in self.plan.outputs
        ]
