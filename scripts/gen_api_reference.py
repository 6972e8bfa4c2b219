"""Writes docs/API.md, the API reference of torch_neuron and torch.neuron, from
the docstrings and signatures of the public functions and classes.

    python scripts/gen_api_reference.py            # rewrite docs/API.md
    python scripts/gen_api_reference.py --check    # exit 1 if docs/API.md is stale

tests/python/test_docs.py runs the check, and fails on a public name without a
docstring, so the reference always matches the code.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "API.md"

# (title, module, what it is), in reading order.
MODULES = [
    ("torch_neuron", "torch_neuron", "Steps, syncs and modes."),
    ("torch_neuron.NeuronGraph and graph", "torch_neuron.graphs", "Captured steps."),
    ("torch.neuron", "torch_neuron.device", "The device module (`torch.neuron`), shaped like `torch.cuda`."),
    ("torch_neuron.metrics", "torch_neuron.metrics", "Counters of the runtime."),
    ("torch_neuron.debug", "torch_neuron.debug", "Looking at graphs."),
    ("torch_neuron.config", "torch_neuron.config", "Settings."),
    ("torch_neuron.cache", "torch_neuron.cache", "The disk compile cache (also `python -m torch_neuron.cache`)."),
    ("torch_neuron.distributed", "torch_neuron.distributed",
     "The `neuron` backend of torch.distributed (`dist.init_process_group(\"neuron\")`)."),
]


def public_names(module):
    """Functions and classes the module defines (or lists in __all__), without
    a leading underscore, in source order."""
    names = getattr(module, "__all__", None)
    found = []
    for name, obj in vars(module).items():
        if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if names is not None and name not in names:
            continue
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        found.append((name, obj))
    order = {name: i for i, name in enumerate(vars(module))}
    return sorted(found, key=lambda item: order[item[0]])


def signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def document(prefix: str, name: str, obj) -> list[str]:
    kind = "class" if inspect.isclass(obj) else "def"
    doc = inspect.getdoc(obj) or ""
    lines = [f"### `{prefix}.{name}{signature(obj)}`", "", f"*{kind}*", ""]
    lines += [doc, ""] if doc else ["", ""]
    if inspect.isclass(obj):
        for member, fn in vars(obj).items():
            if member.startswith("_") or not callable(fn) or getattr(fn, "__doc__", None) is None:
                continue
            lines += [f"- `{member}{signature(fn)}`: " + (inspect.getdoc(fn) or "").replace("\n", " "), ""]
    return lines


def render() -> str:
    import torch_neuron  # noqa: F401  (registers torch.neuron)
    import importlib

    out = ["# API reference", "",
           "Generated from the docstrings by `python scripts/gen_api_reference.py`; do not edit "
           "by hand (`tests/python/test_docs.py` checks it is current).", ""]
    for title, module_name, blurb in MODULES:
        module = importlib.import_module(module_name)
        prefix = "torch.neuron" if module_name == "torch_neuron.device" else (
            "torch_neuron" if module_name in ("torch_neuron", "torch_neuron.graphs") else module_name)
        out += [f"## {title}", "", blurb, ""]
        for name, obj in public_names(module):
            out += document(prefix, name, obj)
    return "\n".join(textwrap.dedent(line).rstrip() for line in out).rstrip() + "\n"


def undocumented() -> list[str]:
    """Public names without a docstring."""
    import importlib
    import torch_neuron  # noqa: F401

    missing = []
    for _, module_name, _ in MODULES:
        module = importlib.import_module(module_name)
        for name, obj in public_names(module):
            if not inspect.getdoc(obj):
                missing.append(f"{module_name}.{name}")
    return missing


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that docs/API.md is current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is stale: run python scripts/gen_api_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
