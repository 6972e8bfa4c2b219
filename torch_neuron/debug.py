"""Looking at the graphs torch_neuron builds.

    torch_neuron.debug.ir_text([loss])     # the pending graph behind tensors, as text
    torch_neuron.debug.ir_dot([loss])      # ... as Graphviz DOT
    torch_neuron.debug.graph_hash([loss])  # its XXH3-128 hash (hex)

Environment: TORCH_NEURON_IR_DEBUG=1 records the user's source line of every
traced op (shown in IR text and execution errors; eager mode always records
it); TORCH_NEURON_DEBUG=1 prints
why a graph compiled when an earlier graph came from the same place;
TORCH_NEURON_DEBUG_DIR=dir saves every compiled graph there.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Iterable, Tuple, List

import torch

from . import _C

_SKIP_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch,)
) + (os.path.dirname(os.path.abspath(__file__)) + os.sep,)


def _tensors(tensors) -> List[torch.Tensor]:
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    return list(tensors)


def ir_text(tensors: Iterable[torch.Tensor]) -> str:
    """The pending graph that computes ``tensors``, one node per line."""
    return _C._ir_text(_tensors(tensors))


def ir_dot(tensors: Iterable[torch.Tensor]) -> str:
    """The pending graph that computes ``tensors``, in Graphviz DOT."""
    return _C._ir_dot(_tensors(tensors))


def compiled_text(tensors: Iterable[torch.Tensor]) -> Tuple[str, str]:
    """The pending graph that computes ``tensors`` as the compiler leaves it, at
    the opt level in force, and the C++ source of its generated kernels ("" at
    tier 0). Compiles, runs nothing."""
    return tuple(_C._compiled_text(_tensors(tensors)))


def graph_hash(tensors: Iterable[torch.Tensor]) -> str:
    """The hash (32 hex digits) of the pending graph that computes ``tensors``."""
    return _C._graph_hash(_tensors(tensors))


def last_recompile_reason() -> str:
    """Why the last compiled graph differs from the previous one from the same
    place (TORCH_NEURON_DEBUG=1), or "" if it was the first there."""
    return _C._last_recompile_reason()


def user_frame() -> str:
    """"file:line" of the innermost frame outside torch and torch_neuron (in a
    torch.compile region's graph, the user's line its op was traced from)."""
    try:
        frame = sys._getframe(1)
    except ValueError:  # called from C++ on a thread with no Python frame (autograd)
        return ""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_FX_GENERATED_FILE):
            where = _fx_frame_user_line(frame)
            if where:
                return where
        elif not os.path.abspath(filename).startswith(_SKIP_DIRS):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


# The ops of a torch.compile region run from the code FX generates for the
# region's graph (file "<eval_with_key>.N", forward and backward alike); each
# line of it calls one node, whose stack_trace Dynamo (and AOTAutograd after
# it) recorded from the user's code. Tables from the generated code's lines to
# those user lines, built at a code object's first lookup, keyed by the code
# object (kept in the entry, so its id is not reused). Bounded: a process that
# compiles without end starts over.
_FX_GENERATED_FILE = "<eval_with_key>"
_FX_TABLES_MAX = 4096
_fx_tables: dict = {}
_USER_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def _fx_line_table(gm) -> dict:
    first = gm.forward.__code__.co_firstlineno
    nodes = list(gm.graph.nodes)
    table = {}
    for offset, index in (getattr(gm, "_lineno_map", None) or {}).items():
        if index is None or index >= len(nodes):
            continue
        lines = _USER_LINE.findall(nodes[index].meta.get("stack_trace") or "")
        if lines:
            file, line = lines[-1]  # the innermost user frame
            table[first + offset] = f"{file}:{line}"
    return table


def _fx_frame_user_line(frame) -> str:
    """The user's "file:line" of the node a frame of FX's generated code is
    running, or "" (the C++ source-location walk calls this for such frames)."""
    entry = _fx_tables.get(id(frame.f_code))
    if entry is None or entry[0] is not frame.f_code:
        gm = frame.f_locals.get("self")  # forward(self, ...): its GraphModule
        if not isinstance(gm, torch.fx.GraphModule) or gm.forward.__code__ is not frame.f_code:
            return ""
        if len(_fx_tables) >= _FX_TABLES_MAX:
            _fx_tables.clear()
        entry = _fx_tables[id(frame.f_code)] = (frame.f_code, _fx_line_table(gm))
    return entry[1].get(frame.f_lineno, "")


def _install_source_locations() -> None:
    # The C++ twin of user_frame: eager mode asks for every op's line.
    _C._set_native_source_location_getter(list(_SKIP_DIRS))
    _C._set_fx_frame_resolver(_fx_frame_user_line)
