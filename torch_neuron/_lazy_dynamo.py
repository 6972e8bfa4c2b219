"""The first traced op of a process without importing ``torch._dynamo``.

PyTorch's Python Meta kernels (the ``torch._refs`` in the decomposition tables:
``aten.add.Tensor``'s among them, which the tracer runs to learn result shapes)
are wrapped with ``torch._disable_dynamo``. That wrapper imports ``torch._dynamo``
at its first call, to build ``torch._dynamo.disable(fn)``: about a second, paid
by the first traced op of every process, for a guard that only matters while
dynamo traces (issue 23; ``python -X importtime`` shows it).

``install()`` gives each such wrapped function the stand-in the wrapper looks
for (``fn.__dynamo_disable``): while ``torch._dynamo`` is not imported it calls
the function itself (nothing can be tracing); once it is, it builds dynamo's
own disabled function, as the wrapper would have, and steps aside for it.
"""

from __future__ import annotations

import sys

import torch
import torch._decomp

_DISABLE_ATTR = "__dynamo_disable"


def _stand_in(fn, recursive):
    def call(*args, **kwargs):
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None:
            return fn(*args, **kwargs)
        real = dynamo.disable(fn, recursive, wrapping=False)
        setattr(fn, _DISABLE_ATTR, real)
        return real(*args, **kwargs)
    return call


def _is_disable_wrapper(f) -> bool:
    code = f.__code__
    return code.co_name == "inner" and code.co_filename.endswith("_compile.py") \
        and "fn" in code.co_freevars and "recursive" in code.co_freevars


def _disable_wrappers(roots, depth=4):
    """The ``torch._disable_dynamo`` wrappers reachable from `roots` through
    ``__wrapped__`` and closures (how torch's decorators nest them)."""
    seen, found = set(), []

    def visit(f, left):
        if left < 0 or id(f) in seen or not hasattr(f, "__code__"):
            return
        seen.add(id(f))
        if _is_disable_wrapper(f):
            found.append(f)
            return
        wrapped = getattr(f, "__wrapped__", None)
        if wrapped is not None:
            visit(wrapped, left - 1)
        for cell in f.__closure__ or ():
            try:
                visit(cell.cell_contents, left - 1)
            except ValueError:  # an empty cell
                pass

    for root in roots:
        visit(root, depth)
    return found


def install() -> int:
    """Installs the stand-ins; returns how many functions got one."""
    if "torch._dynamo" in sys.modules:
        return 0  # dynamo is here already: its own wrappers cost nothing more
    roots = [f for table in torch._decomp.global_decomposition_table.values() for f in table.values()]
    count = 0
    for wrapper in _disable_wrappers(roots):
        cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__))
        fn, recursive = cells["fn"].cell_contents, cells["recursive"].cell_contents
        if getattr(fn, _DISABLE_ATTR, None) is None:
            setattr(fn, _DISABLE_ATTR, _stand_in(fn, recursive))
            count += 1
    return count
