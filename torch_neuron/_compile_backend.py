"""``torch.compile(backend="neuron")``: the first version of the compiled road
(issue 47; DESIGN.md, "The compiled road").

Dynamo captures the Python into FX graphs behind its guards; AOTAutograd turns
each into functional ATen graphs (forward and backward when something needs a
gradient, one inference graph otherwise), with input mutations kept in the
graph, as ``aot_eager`` does. This version runs those graphs on the lazy path:
every call of a compiled region traces its ATen ops into the pending graph,
exactly as the same ops written out by hand would be, and the pending graph
runs at the next sync (``mark_step``, a read) through the usual hash, caches and
compiler. Results are therefore the lazy path's, and a compiled region never
runs anything by itself; what Dynamo adds is its guards, graph breaks and
recompiles, and AOTAutograd's joint forward/backward graphs.

What it does not do yet, the issue's goal: turn each ATen graph into the
project's IR once per guard set, so that a call traces nothing per op.

Dynamo finds the backend through the package's ``torch_dynamo_backends`` entry
point (pyproject.toml; scripts/setup.sh writes it for a development build), so
``torch._dynamo.list_backends()`` lists "neuron" and importing torch_neuron does
not import torch._dynamo (issue 23 keeps that import off the first traced op).
This module is imported only when Dynamo looks the backend up.

Counters (torch_neuron.metrics): ``dynamo.graph.forward.count``,
``dynamo.graph.backward.count`` and ``dynamo.graph.inference.count``: the ATen
graphs this backend was handed, one each per compile (a recompile counts again).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition

from . import _C

# torch.compile's modes tune Inductor (CUDA graphs, autotuning); this backend
# has no such choices, so each is taken and means the same.
_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _lazy_graph_runner(kind: str) -> Callable:
    """An AOTAutograd compiler that runs its graph as it is, op by op: on
    neuron tensors every op traces into the pending graph."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        _C._metrics_increment(f"dynamo.graph.{kind}.count", 1)
        return make_boxed_func(gm.forward)

    compile_graph.__name__ = f"neuron_{kind}_graph"
    return compile_graph


_AOT_OPTIONS = dict(
    fw_compiler=_lazy_graph_runner("forward"),
    bw_compiler=_lazy_graph_runner("backward"),
    inference_compiler=_lazy_graph_runner("inference"),
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
