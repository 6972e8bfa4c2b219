"""Writes docs/DISPATCH.md: every kernel torch_neuron registers with PyTorch's
dispatcher (key, operator, source file), its backend fallbacks, and every torch
function it replaces, as torch_neuron.debug.overrides() reports them in a fresh
process that has used a neuron tensor.

    python scripts/gen_dispatch_md.py            # rewrite docs/DISPATCH.md
    python scripts/gen_dispatch_md.py --check    # exit 1 if docs/DISPATCH.md is stale

tests/python/test_dispatch_isolation.py runs the check in a child process.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "DISPATCH.md"

# Keys that are torch_neuron's own: a kernel there acts on neuron tensors only.
OWN_KEYS = ("PrivateUse1", "AutogradPrivateUse1", "AutocastPrivateUse1", "QuantizedPrivateUse1",
            "SparsePrivateUse1", "SparseCsrPrivateUse1")

# What each source file registers for, in a line (per dispatch key for the
# registration site, which registers for many); a file missing here fails the
# check (say why a new registration exists).
WHY = {
    "csrc/aten/registration.cc": {
        "PrivateUse1": "the generic tracer (fallback); copies across the device boundary and reads; dropout drawn "
                       "from the neuron generator; normal's std tensor checked at the call; integer histc as CUDA bins it; "
                       "index_put's uint8 masks warned at the call and traced as bool; determinants factored as their "
                       "backward reads the factors; the composites below, for inference_mode",
        "AutogradPrivateUse1": "fused LSTM/GRU cells, ctc_loss with CPU lengths and foreach ops with packed "
                               "scalars, composed of neuron ops; the fused optimizer steps traced as one op; "
                               "linalg.eig/eigh with the eigenvector phase check ATen skips for neuron tensors",
        "AutocastPrivateUse1": "autocast for device_type=\"neuron\" (ATen's shared lists)",
        "QuantizedPrivateUse1": "quantized neuron tensors refused, naming the dtype",
        "SparsePrivateUse1": "sparse neuron tensors refused, naming the layout",
        "SparseCsrPrivateUse1": "sparse neuron tensors refused, naming the layout",
        "Functionalize": "direct *_copy calls on neuron tensors return new contiguous tensors; forward AD's "
                         "storage-size check (_has_same_storage_numel) answered from the functional wrappers; "
                         "a neuron tensor's _to_copy wrapped here, not below (any other call: the kernel that "
                         "was there)",
        "CPU": "neuron's own ops (namespace neuron), collectives and the tensor assert a program runs: their "
               "host kernels",
        "Meta": "neuron's own ops (namespace neuron), collectives and the tensor assert a program runs: their "
                "shapes",
    },
    "csrc/lazy/tracer_registration.cc": "the generic tracer for ops whose device-generic composite kernels would "
                                        "otherwise run on neuron",
    "csrc/lazy/out_checks.cc": {
        "AutogradPrivateUse1": "out= ops: the CPU's checks of out tensors before functionalization",
        "Functionalize": "out= ops under inference_mode (which skips the autograd keys): the same checks, for "
                         "neuron calls (any other call: the kernel that was there)",
    },
    "csrc/lazy/neuron_inplace.cc": "in-place ops on neuron tensors: the CPU's checks, then the functional form "
                                   "(any other call: the kernel that was there)",
    "csrc/lazy/functionalized_custom_ops.cc": "libraries' own operators (torch.library.custom_op and the like) "
                                              "with Python kernels that run below autograd: on neuron tensors "
                                              "the kernel runs functionalized, so writes through views inside it "
                                              "reach their tensors (any other call: the kernel that was there)",
    "csrc/lazy/functionalize_fast.cc": "unboxed functionalization of hot ops for neuron tensors "
                                       "(any other call: PyTorch's fallback)",
    "csrc/lazy/bridge.cc": {
        "Functionalize": "torch.tensor(data, device=\"neuron\") and a plain tensor written from a neuron one "
                         "(any other call: the kernel that was there)",
        "ADInplaceOrView": "torch.tensor(data, device=\"neuron\") and a plain tensor written from a neuron one "
                           "(any other call: the kernel that was there)",
        "PythonTLSSnapshot": "a neuron factory called under a Python dispatch mode from above functionalization "
                             "returns a functional wrapper, as without the mode (any other call: what PyTorch's "
                             "fallback for the key does)",
    },
    "torch_neuron/distributed.py": "functional collectives (_c10d_functional) traced as neuron collectives",
    "torch_neuron/_custom_ops.py": "libraries' own operators with Python PrivateUse1 kernels, run above "
                                   "functionalization",
}


def why(source: str, key: str) -> str:
    text = WHY.get(source)
    return text.get(key) if isinstance(text, dict) else text

# Code run in the child that reports: load torch_neuron (autoload), use it as
# tests/python/test_dispatch_isolation.py's child does, print overrides() as JSON.
_CHILD = """
import json, torch, torch_neuron
x = torch.ones(4, device="neuron")
assert (x.add_(1) * 2).sum().item() == 16.0
torch.nn.Linear(2, 2).to("neuron").to("cpu")
print(json.dumps(torch_neuron.debug.overrides()))
"""


def report() -> dict:
    import json
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NEURON_")}
    env["PYTHONPATH"] = str(ROOT)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1"
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=str(ROOT), capture_output=True,
                         text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def render(overrides: dict) -> str:
    groups = collections.defaultdict(list)
    for key, op, source in overrides["kernels"]:
        groups[(key not in OWN_KEYS, key, source)].append(op)
    lines = [
        "# What torch_neuron registers and patches",
        "",
        "Generated by `python scripts/gen_dispatch_md.py` from `torch_neuron.debug.overrides()` in a fresh",
        "process; `tests/python/test_dispatch_isolation.py` fails when this file is stale, and checks that",
        "nothing here changes what other devices get (issue 48). Kernels on neuron's own keys act on neuron",
        "tensors only. The few on device-agnostic keys (Functionalize, ADInplaceOrView) are there because",
        "PyTorch gives a device no key of its own above functionalization in every mode (AutogradPrivateUse1",
        "is skipped under `inference_mode`): each acts on calls with a neuron tensor and hands every other",
        "call to the kernel that was there. No Meta kernel is registered: neuron's own Meta kernels",
        "(`csrc/lazy/neuron_meta.h`) run only where neuron runs a Meta kernel for itself.",
        "",
        "## Kernels",
        "",
        "| key | source | kernels | what for |",
        "|---|---|---|---|",
    ]
    for (_, key, source), ops in sorted(groups.items()):
        lines.append(f"| {key} | `{source}` | {len(ops)} | {why(source, key) or '?'} |")
    lines += ["", "## Backend fallbacks", "", "| key | source |", "|---|---|"]
    for key, source in overrides["fallbacks"]:
        lines.append(f"| {key} | `{source}` |")
    lines += ["", "## Patched torch functions", "",
              "PyTorch offers no hook for these; each acts on neuron tensors (or on what concerns neuron) and",
              "otherwise does what the original does. `torch_neuron/_patches.py` is their table: the limitation",
              "each works around and the original's signature, checked at import. The entries patched in place",
              "(meta_utils' code constants, the decompositions' Dynamo stand-ins) or by import hooks keep checks",
              "of their own.", "",
              "| torch function | replaced by |", "|---|---|"]
    for target, by in overrides["patches"]:
        lines.append(f"| `{target}` | `{by}` |")
    lines += ["", "## Operators, by key and source", ""]
    for (_, key, source), ops in sorted(groups.items()):
        lines.append(f"### {key}: `{source}` ({len(ops)})")
        lines.append("")
        lines.append(", ".join(f"`{op}`" for op in sorted(ops)))
        lines.append("")
    return "\n".join(lines)


def undescribed(overrides: dict) -> list:
    pairs = {(source, key) for key, _, source in overrides["kernels"]} | {
        (source, key) for key, source in overrides["fallbacks"]}
    return sorted({f"{source} ({key})" for source, key in pairs if not why(source, key)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/DISPATCH.md is stale")
    args = parser.parse_args()
    overrides = report()
    missing = undescribed(overrides)
    if missing:
        print(f"no description in scripts/gen_dispatch_md.py WHY for: {', '.join(missing)}", file=sys.stderr)
        return 1
    text = render(overrides)
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print("docs/DISPATCH.md is stale: run python scripts/gen_dispatch_md.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
