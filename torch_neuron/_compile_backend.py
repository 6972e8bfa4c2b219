"""``torch.compile(backend="neuron")``: the compiled road (issue 47;
DESIGN.md, "The compiled road").

Dynamo captures the Python into FX graphs behind its guards; AOTAutograd turns
each into functional ATen graphs (forward and backward when something needs a
gradient, one inference graph otherwise), with input mutations kept in the
inference graph, as ``aot_eager`` does. Each ATen graph becomes a
``_GraphRunner``: at its first call with given input shapes it is traced once
on the lazy path into one IR graph, which goes through the usual hash, caches
(memory, disk, Redis, the compile service) and compiler, and is kept as a
``_C._CompiledGraph`` (csrc/dynamo/compiled_graph.h); every later call with
those shapes binds the inputs' buffers and queues the program on the device:
no op is dispatched, nothing is traced. Dynamo's guards decide when a graph is
compiled again; a graph break runs the code between graphs on the lazy path.

A graph runs op by op on the lazy path instead (each call traces its ops into
the pending graph, as the first version of this backend did) when its inputs
are not all neuron tensors of one device, in eager mode, and, when
``TORCH_NEURON_COMPILE_FALLBACK=1``, when it cannot be one program (an op on the
CPU fallback or a read of a value inside it; a warning says which). Without
that setting such a graph raises a NotImplementedError naming the op, as
TorchNeuron does.

Dynamo finds the backend through the package's ``torch_dynamo_backends`` entry
point (pyproject.toml; scripts/setup.sh writes it for a development build), so
``torch._dynamo.list_backends()`` lists "neuron" and importing torch_neuron does
not import torch._dynamo (issue 23 keeps that import off the first traced op).
This module is imported only when Dynamo looks the backend up.

Counters (torch_neuron.metrics): ``dynamo.graph.forward.count``,
``dynamo.graph.backward.count`` and ``dynamo.graph.inference.count``: the ATen
graphs this backend was handed, one each per compile (a recompile counts
again); ``dynamo.region.trace.count``: graphs traced into programs (one per
graph and input shapes); ``dynamo.region.run.count``: calls that ran a traced
program; ``dynamo.region.op_by_op.count``: calls that ran op by op.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional, Sequence

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition

from . import _C, _size_rebinding, _static_forms, debug

# torch.compile's modes tune Inductor (CUDA graphs, autotuning); this backend
# has no such choices, so each is taken and means the same.
_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


# The message GraphExecutor raises for a sync inside a region's trace
# (csrc/lazy/graph_executor.cc, CheckNotCapturing).
_NOT_ONE_GRAPH = 'inside a torch.compile(backend="neuron") region'


class _GraphRunner:
    """One AOTAutograd graph: traced into a program once per input shapes
    (``_C._CompiledGraph``), then run as that program."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], kind: str):
        self.gm = gm  # run op by op as it is
        # What is traced into a program: library ops that read values replaced
        # by their static-shape forms (_static_forms.py).
        self.program_gm = _static_forms.rewrite(gm)
        self.kind = kind
        self.article = "an" if kind[0] in "aeiou" else "a"
        # Inputs that are not tensors (sizes Dynamo made symbolic): their
        # values pick the traced graphs, as the tensors' shapes do.
        self.scalar_positions = [
            i for i, x in enumerate(example_inputs) if not isinstance(x, torch.Tensor)
        ]
        # Sizes Dynamo made symbolic (dynamic=True, mark_dynamic, automatic
        # dynamic shapes): traced size-generic, so a trace at new sizes finds
        # the program compiled for the first and compiles nothing.
        self.size_generic = _has_symbolic_sizes(example_inputs)
        # A size-generic graph's sizes as expressions of its symbols: its
        # traces then run at other sizes without a trace (_size_rebinding.py).
        self.plan = _size_plan(gm, example_inputs) if self.size_generic else None
        self.rebindings: list = []  # [(Rebinding, result template)], newest first
        self.graphs: dict = {}  # scalar values -> [(traced graph, result template)], newest first
        self.op_by_op = False  # the graph cannot be one program (fallback)

    def __call__(self, args: list) -> Any:
        if self.op_by_op:
            return self._run_op_by_op(args)
        if self.scalar_positions:
            key = tuple(args[i] for i in self.scalar_positions)
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
        else:
            key, tensors = (), args
        graphs = self.graphs.get(key)
        if graphs:
            for graph, template in graphs:
                results = graph.run(tensors)
                if results is not None:
                    return results if template is None else _fill(template, results)
        if self.rebindings:
            results = self._run_rebound(args, tensors)
            if results is not None:
                return results
        return self._trace(args, tensors, key)

    def _run_rebound(self, args: list, tensors: list) -> Optional[list]:
        """The graph run at sizes it was not traced at by a size-generic
        trace's program, or None where none fits."""
        values = self.plan.bind(args)
        if values is None:
            return None
        for rebinding, template in self.rebindings:
            results = rebinding.run(tensors, values)
            if results is None:
                continue
            if template is None:
                return results
            others = rebinding.others(values)
            return _fill([t if t is _TENSOR or o is None else o for t, o in zip(template, others)], results)
        return None

    def _run_op_by_op(self, args: list) -> Any:
        _C._metrics_increment("dynamo.region.op_by_op.count", 1)
        return self.gm(*args)

    def _trace(self, args: list, tensors: list, key: tuple) -> Any:
        device = _C._region_device(tensors)
        if device < 0:
            return self._run_op_by_op(args)
        graph = _C._CompiledGraph()
        # The tensors to trace on: a view among the inputs gets a stand-in
        # over its own buffer (a view read in the trace could be regenerated
        # from its base and keep the base's buffer as a constant, issue 47).
        traced = iter(graph.begin_trace(device, tensors, self.size_generic))
        args = [next(traced) if isinstance(a, torch.Tensor) else a for a in args]
        try:
            if self.plan is not None:
                outputs = _ArmingInterpreter(self.program_gm, self.plan, graph).run(*args)
            else:
                outputs = self.program_gm(*args)
        except BaseException as error:
            graph.abort_trace()
            if _NOT_ONE_GRAPH not in str(error):
                raise
            what = f"{self.article} {self.kind} graph cannot compile as one program: {_failing_op(self.program_gm, error)}"
            if not _C._config()["compile_fallback"]:
                raise NotImplementedError(
                    f"torch.compile(backend='neuron'): {what}. Move it out of the compiled code, or set "
                    f"TORCH_NEURON_COMPILE_FALLBACK=1 to run such graphs op by op on the lazy path"
                ) from error
            warnings.warn(
                f"torch.compile(backend='neuron'): {what}; it runs op by op on the lazy path "
                f"(TORCH_NEURON_COMPILE_FALLBACK)",
                stacklevel=2,
            )
            self.op_by_op = True
            return self._run_op_by_op(args)
        outputs = list(outputs)
        results = [o for o in outputs if isinstance(o, torch.Tensor)]
        if any(o.device.type != "neuron" or o.device.index != device for o in results):
            # A result on another device (a transfer inside the graph): run
            # as the lazy path does, every call.
            graph.abort_trace()
            self.op_by_op = True
            return outputs
        # The results as later calls make them, over the program's buffers: a
        # traced result that is a view would keep its base's traced value.
        results = graph.end_trace(results)
        # Where the results are not all tensors: the others, kept as traced.
        template = None
        if len(results) != len(outputs):
            template = [_TENSOR if isinstance(o, torch.Tensor) else o for o in outputs]
        self.graphs.setdefault(key, []).insert(0, (graph, template))
        if self.plan is not None:
            values = self.plan.bind(args)
            rebinding = _size_rebinding.Rebinding(self.plan, graph, values) if values is not None else None
            if rebinding is not None and rebinding.ok:
                self.rebindings.insert(0, (rebinding, template))
        return results if template is None else _fill(template, results)


_TENSOR = object()  # a template's slot for a tensor result


class _ArmingInterpreter(torch.fx.Interpreter):
    """Runs a size-generic graph for its trace, telling the trace before each
    op which of the op's int arguments are which size expressions."""

    def __init__(self, gm: torch.fx.GraphModule, plan, graph):
        super().__init__(gm)
        self.plan = plan
        self.compiled = graph

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            self.plan.arm(self.compiled, n)
        return super().run_node(n)


def _size_plan(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]):
    """The graph's SizePlan, or None where its sizes cannot be read from
    AOTAutograd's metadata (a node without it)."""
    try:
        plan = _size_rebinding.SizePlan(gm, example_inputs)
    except (AttributeError, KeyError, TypeError):
        return None
    return plan if plan.ok else None


def _has_symbolic_sizes(example_inputs: Sequence[Any]) -> bool:
    """Whether AOTAutograd's example inputs have sizes Dynamo made symbolic."""
    for x in example_inputs:
        if isinstance(x, torch.SymInt):
            return True
        if isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape):
            return True
    return False


def _fill(template: list, results: list) -> list:
    it = iter(results)
    return [next(it) if slot is _TENSOR else slot for slot in template]


def _failing_op(gm: torch.fx.GraphModule, error: BaseException) -> str:
    """"<op> (<user's file:line>) needs its operands' values", from the frame
    of gm's generated code in the traceback of ``error``."""
    code = gm.forward.__code__
    tb = error.__traceback__
    lineno = None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    nodes = list(gm.graph.nodes)
    index = (getattr(gm, "_lineno_map", None) or {}).get(lineno - code.co_firstlineno) if lineno else None
    if index is None or index >= len(nodes):
        return "an op needs its operands' values (it runs on the CPU fallback, or reads a value)"
    node = nodes[index]
    where = debug._fx_line_table(gm).get(lineno, "")
    op = str(node.target) if node.op == "call_function" else node.format_node()
    return f"{op}{f' ({where})' if where else ''} needs its operands' values (it runs on the CPU fallback, or reads a value)"


def _graph_compiler(kind: str) -> Callable:
    """An AOTAutograd compiler for ``kind`` graphs: each becomes a _GraphRunner."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        _C._metrics_increment(f"dynamo.graph.{kind}.count", 1)
        runner = _GraphRunner(gm, example_inputs, kind)
        runner._boxed_call = True  # AOTAutograd calls it with one list of inputs
        return runner

    compile_graph.__name__ = f"neuron_{kind}_graph"
    return compile_graph


_AOT_OPTIONS = dict(
    fw_compiler=_graph_compiler("forward"),
    bw_compiler=_graph_compiler("backward"),
    inference_compiler=_graph_compiler("inference"),
    partition_fn=min_cut_rematerialization_partition,
    keep_inference_input_mutations=True,
)


def neuron_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    mode: Optional[str] = None,
    options: Optional[dict] = None,
) -> Callable:
    """The Dynamo backend "neuron": ``torch.compile(model, backend="neuron")``."""
    if mode not in _MODES:
        raise ValueError(f"torch.compile(backend='neuron'): unknown mode {mode!r}; one of {_MODES[1:]}")
    if options:
        raise ValueError(
            f"torch.compile(backend='neuron') takes no options yet, got {sorted(options)}"
        )
    # A new AotAutograd each time: it rewrites its own options when called.
    return aot_autograd(**_AOT_OPTIONS)(gm, example_inputs)
