"""Looking at the graphs torch_neuron builds.

    torch_neuron.debug.ir_text([loss])     # the pending graph behind tensors, as text
    torch_neuron.debug.ir_dot([loss])      # ... as Graphviz DOT
    torch_neuron.debug.graph_hash([loss])  # its XXH3-128 hash (hex)
    torch_neuron.debug.overrides()         # what torch_neuron registers and patches in torch

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
import torch._decomp

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


_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REGISTRATION = re.compile(r"^(\w+)(?:\[alias\])?: (?:fallthrough )?registered at (.+?):\d+ ")

# Functions of torch that torch_neuron replaces or changes in place, with the
# module that does it: each one's reason is in that module's docstring.
_PATCHED_IN_PLACE = (
    ("torch._subclasses.meta_utils.MetaTensorDescriber.describe_tensor", "torch_neuron._fake_tensors"),
    ("torch._subclasses.meta_utils.MetaConverter.meta_tensor", "torch_neuron._fake_tensors"),
)
# Where torch_neuron's replacements of torch functions are looked for.
_PATCH_OWNERS = ("torch", "torch.Tensor", "torch.UntypedStorage", "torch.nn.Module", "torch.library.Library", "torch._utils",
                 "torch.utils.dlpack", "torch._tensor_str", "torch._C")


def _cpp_source_root():
    """The directory torch_neuron's C++ sources were built from, as its
    registrations name them (the tracer's PrivateUse1 fallback is its own)."""
    suffix = "csrc/lazy/tracer_registration.cc"
    for line in torch._C._dispatch_dump_table("aten::add.Tensor").splitlines():
        match = _REGISTRATION.match(line)
        if match is not None and match.group(2).endswith(suffix):
            return match.group(2)[:-len(suffix)]
    return None


def _source(path: str, cpp_root):
    """`path` relative to torch_neuron's source tree, or None for another's."""
    if cpp_root is not None and path.startswith(cpp_root + "csrc/"):
        return path[len(cpp_root):]
    path = os.path.abspath(path)
    if path.startswith(os.path.join(_PACKAGE_ROOT, "torch_neuron") + os.sep):
        return os.path.relpath(path, _PACKAGE_ROOT)
    return None


def _resolve(dotted: str):
    module, _, rest = dotted.partition(".")
    obj = sys.modules.get(module)
    for part in rest.split(".") if rest else ():
        obj = getattr(obj, part, None) if obj is not None else None
    return obj


def overrides() -> dict:
    """What torch_neuron registers with PyTorch's dispatcher and replaces in
    torch, as PyTorch reports it now (docs/DISPATCH.md is this, generated by
    scripts/gen_dispatch_md.py):

    - ``kernels``: (dispatch key, operator, source file) of every kernel
      registered from torch_neuron's sources;
    - ``fallbacks``: (dispatch key, source file) of its backend fallbacks;
    - ``patches``: (torch function, torch_neuron's replacement) of every torch
      function it replaced or changed.
    """
    kernels, fallbacks, patches = set(), set(), set()
    root = _cpp_source_root()
    names = sorted(torch._C._dispatch_get_all_op_names())
    for name in names:
        for line in torch._C._dispatch_dump(name).splitlines():
            match = _REGISTRATION.match(line)
            if match is not None and (source := _source(match.group(2), root)) is not None:
                kernels.add((match.group(1), name, source))
    # A backend fallback shows in the table of every op without a kernel of
    # its key: a few ops' tables show them all.
    for name in ("aten::add.Tensor", "aten::empty.memory_format", "aten::_foobar", "aten::zeros"):
        if name not in names:
            continue
        for line in torch._C._dispatch_dump_table(name).splitlines():
            match = _REGISTRATION.match(line)
            if (line.endswith("[backend fallback]") and match is not None
                    and (source := _source(match.group(2), root)) is not None):
                fallbacks.add((match.group(1), source))
    package = os.path.join(_PACKAGE_ROOT, "torch_neuron") + os.sep
    for owner_name in _PATCH_OWNERS:
        owner = _resolve(owner_name)
        for attr, value in (vars(owner).items() if owner is not None else ()):
            module = getattr(value, "__module__", None) or ""
            code = getattr(value, "__code__", None)
            if not callable(value):
                continue
            if module.startswith("torch_neuron"):
                patches.add((f"{owner_name}.{attr}", f"{module}.{getattr(value, '__qualname__', attr)}"))
            elif code is not None and os.path.abspath(code.co_filename).startswith(package):
                # A functools.wraps wrapper takes the original's names: its code tells.
                where = os.path.relpath(code.co_filename, _PACKAGE_ROOT)[:-3].replace(os.sep, ".")
                patches.add((f"{owner_name}.{attr}", f"{where}.{code.co_qualname}"))
    for target, by in _PATCHED_IN_PLACE:
        fn = _resolve(target)
        code = getattr(fn, "__code__", None)
        if code is not None and "neuron" in repr(code.co_consts):
            patches.add((target, by + " (its code's constants)"))
    stand_ins = _lazy_dynamo_stand_ins()
    if stand_ins:
        patches.add((f"__dynamo_disable of {stand_ins} torch._decomp functions", "torch_neuron._lazy_dynamo._stand_in"))
    # Not patches but registrations with Dynamo, made when it loads (an import
    # hook in sys.meta_path): listed so that every change to torch is here.
    from . import _dynamo_hooks

    for module, tell in _dynamo_hooks._TELL.items():
        patches.add((f"{module} (when imported; sys.meta_path hook)", f"torch_neuron._dynamo_hooks.{tell.__name__}"))
    return {"kernels": sorted(kernels), "fallbacks": sorted(fallbacks), "patches": sorted(patches)}


def _lazy_dynamo_stand_ins() -> int:
    """How many of the decomposition tables' functions have _lazy_dynamo's
    stand-in for their dynamo-disabled form."""
    from . import _lazy_dynamo
    roots = [f for table in torch._decomp.global_decomposition_table.values() for f in table.values()]
    count = 0
    for wrapper in _lazy_dynamo._disable_wrappers(roots):
        fn = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__))["fn"].cell_contents
        stand_in = getattr(fn, _lazy_dynamo._DISABLE_ATTR, None)
        count += getattr(stand_in, "__module__", None) == _lazy_dynamo.__name__
    return count


def _install_source_locations() -> None:
    # The C++ twin of user_frame: eager mode asks for every op's line.
    _C._set_native_source_location_getter(list(_SKIP_DIRS))
    _C._set_fx_frame_resolver(_fx_frame_user_line)
