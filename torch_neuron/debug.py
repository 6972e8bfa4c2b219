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
    """"file:line" of the innermost frame outside torch and torch_neuron."""
    try:
        frame = sys._getframe(1)
    except ValueError:  # called from C++ on a thread with no Python frame (autograd)
        return ""
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_SKIP_DIRS):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _install_source_locations() -> None:
    # The C++ twin of user_frame: eager mode asks for every op's line.
    _C._set_native_source_location_getter(list(_SKIP_DIRS))
