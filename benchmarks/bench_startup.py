"""Start-up: the time from `import torch_neuron` to the first traced op, and
the first training steps of a process whose compile cache is empty.

  neuron        a new process: import torch and torch_neuron, then trace one op
                (no sync); torch._dynamo is not imported (torch_neuron/_lazy_dynamo.py)
  with dynamo   a new process that imports torch._dynamo first, as every process's
                first traced op did before (PyTorch's Python Meta kernels import it
                on their first call): its import time plus its first op
  cold step     a new process with an empty compile cache (no compile service)
                trains the MLP / the small transformer (tests/python/models.py)
                for 8 steps, each waited for; tiered (TORCH_NEURON_TIERED_COMPILE=1:
                tier 0 at once, tier 1 in the background) against untiered (the
                first run of each graph waits for tier 1, the system C++
                compiler); and warm, a new process whose disk cache already
                holds every graph's tier-1 NEFF. Figures: the first step, the
                last step, first / last, and cold tiered / warm first step

    python benchmarks/bench_startup.py [--quick] [--out DIR]

Each sample is its own process; the two kinds alternate (A B A B ...). The
first op (an add) takes ATen's C++ meta function (lazy/structured_meta.cc), so
it imports neither torch._dynamo nor sympy, which PyTorch's Python Meta kernels
import at their first call (about 200 ms).
Writes benchmarks/results/startup.json and prints a table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import bench_parser, fmt, interleaved, print_table, ratios, summary, table, write_results  # noqa: E402

SCRIPT = r"""
import json, sys, time
start = time.perf_counter()
import torch
if {dynamo_first}:
    t = time.perf_counter(); import torch._dynamo; dynamo_s = time.perf_counter() - t
else:
    dynamo_s = 0.0
import torch_neuron
imported = time.perf_counter()
x = torch.ones(3, device="neuron") + 1
first_op = time.perf_counter()
print(json.dumps({{"import_s": imported - start - dynamo_s, "dynamo_s": dynamo_s,
                  "first_op_s": first_op - imported, "dynamo_imported": "torch._dynamo" in sys.modules}}))
"""


STEPS_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, {tests!r})
import torch, torch_neuron
from models import MLP, TinyDecoder, loss_fn, make_batches
kind = {kind!r}
torch.manual_seed(0)
model = (MLP if kind == "mlp" else TinyDecoder)().to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = make_batches(kind, 1, batch=64 if kind == "mlp" else 16)[0]
x, y = x.to("neuron"), y.to("neuron")
torch_neuron.mark_step(); torch_neuron.wait_device_ops()
times = []
for _ in range(8):
    t = time.perf_counter()
    loss = loss_fn(kind, model, x, y); opt.zero_grad(); loss.backward(); opt.step()
    torch_neuron.mark_step(); torch_neuron.wait_device_ops()
    times.append(time.perf_counter() - t)
print(json.dumps({{"times_s": times}}))
"""


def run_steps(kind: str, tiered: bool, cache: str = "") -> list:
    """The step times of a new process training `kind`; with an empty compile
    cache, or with `cache` (a directory a run before filled: warm)."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="bench_cold_") as empty:
        env = dict(os.environ, TORCH_NEURON_CACHE_DIR=cache or empty, TORCH_NEURON_COMPILE_SERVICE="off",
                   TORCH_NEURON_TIERED_COMPILE="1" if tiered else "0", TORCH_NEURON_OPT_LEVEL="1")
        env.pop("TORCH_NEURON_MODE", None)
        tests = os.path.join(os.path.dirname(HERE), "tests", "python")
        out = subprocess.run([sys.executable, "-c", STEPS_SCRIPT.format(tests=tests, kind=kind)], env=env,
                             capture_output=True, text=True, check=True, cwd=os.path.dirname(HERE))
    return json.loads(out.stdout.strip().splitlines()[-1])["times_s"]


def run(dynamo_first: bool) -> dict:
    env = dict(os.environ)
    env.pop("TORCH_NEURON_MODE", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(dynamo_first=dynamo_first)], env=env,
                         capture_output=True, text=True, check=True, cwd=os.path.dirname(HERE))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    args = bench_parser(__doc__).parse_args(argv)
    repeats = 2 if args.quick else 7
    seen = {"neuron": [], "with dynamo": []}

    def neuron() -> float:
        r = run(False)
        assert not r["dynamo_imported"], "the first traced op imported torch._dynamo"
        seen["neuron"].append(r)
        return r["first_op_s"] * 1e3

    def with_dynamo() -> float:
        r = run(True)
        seen["with dynamo"].append(r)
        return (r["dynamo_s"] + r["first_op_s"]) * 1e3

    samples = interleaved({"neuron": neuron, "with dynamo": with_dynamo}, repeats=repeats, warmup=0)
    figures = {
        "first_op_ms": summary(samples["neuron"]),
        "dynamo_import_plus_first_op_ms": summary(samples["with dynamo"]),
        "first_op_over_dynamo_path": ratios(samples["neuron"], samples["with dynamo"]),
        "import_ms": summary([r["import_s"] * 1e3 for r in seen["neuron"]]),
        "dynamo_import_ms": summary([r["dynamo_s"] * 1e3 for r in seen["with dynamo"]]),
    }
    import tempfile
    for kind in ("mlp", "transformer"):
        steps = {"tiered": [], "untiered": [], "warm": []}
        with tempfile.TemporaryDirectory(prefix="bench_warm_") as warm_cache:
            run_steps(kind, False, warm_cache)  # fills the cache with every graph's tier-1 NEFF

            def sampler(name):
                def sample() -> float:
                    times = run_steps(kind, name == "tiered", warm_cache if name == "warm" else "")
                    steps[name].append(times)
                    return times[0] * 1e3
                return sample

            cold = interleaved({name: sampler(name) for name in steps},
                               repeats=1 if args.quick else 3, warmup=0)
        figures[f"{kind}_cold_first_step_tiered_ms"] = summary(cold["tiered"])
        figures[f"{kind}_cold_first_step_untiered_ms"] = summary(cold["untiered"])
        figures[f"{kind}_warm_first_step_ms"] = summary(cold["warm"])
        figures[f"{kind}_cold_first_step_tiered_over_untiered"] = ratios(cold["tiered"], cold["untiered"])
        # The "cold first step at most 2x warm": the same first step
        # with an empty cache (tiered) over one whose disk cache holds it.
        figures[f"{kind}_cold_first_step_tiered_over_warm"] = ratios(cold["tiered"], cold["warm"])
        for name, runs in steps.items():
            figures[f"{kind}_last_step_{name}_ms"] = summary([t[-1] * 1e3 for t in runs])
            figures[f"{kind}_first_over_last_step_{name}"] = summary([t[0] / t[-1] for t in runs])
    rows = [[name, fmt(s["median"]), fmt(s["min"]), fmt(s["max"])] for name, s in figures.items()]
    path = write_results("startup", {
        "quick": args.quick, "figures": figures,
        "command": "python benchmarks/bench_startup.py",
        "title": "Start-up: import to the first traced op",
        "description": (
            "Each sample is a new process. neuron: import torch and torch_neuron, then trace "
            "one op (no sync), without importing torch._dynamo. with dynamo: the same after "
            "importing torch._dynamo first, which every process's first traced op paid before "
            "(PyTorch's Python Meta kernels import it at their first call); its figure is that "
            "import plus the first op. The kinds alternate (A B A B ...). Cold steps: a new "
            "process with an empty compile cache trains 8 steps, each waited for, with tiered "
            "compilation on (tier 0 at once, tier 1 in the background) or off (each new graph "
            "waits for tier 1), and warm: a new process whose disk cache holds every graph's "
            "tier-1 NEFF (filled by a run before); first step, last step, and their ratio, and "
            "the cold tiered first step over the warm one."),
        "tables": [table("Start-up (ms; ratios unitless)", ["figure", "median", "min", "max"], rows)],
        "plots": [],
        "headline": {"first traced op": (
            f"{fmt(figures['first_op_ms']['median'])} ms after import, against "
            f"{fmt(figures['dynamo_import_plus_first_op_ms']['median'])} ms when it imported torch._dynamo "
            f"({fmt(figures['first_op_over_dynamo_path']['median'])}x)"),
            "cold first step": (
            f"MLP {fmt(figures['mlp_cold_first_step_tiered_ms']['median'])} ms tiered against "
            f"{fmt(figures['mlp_cold_first_step_untiered_ms']['median'])} ms untiered, transformer "
            f"{fmt(figures['transformer_cold_first_step_tiered_ms']['median'])} against "
            f"{fmt(figures['transformer_cold_first_step_untiered_ms']['median'])} ms; over a warm "
            f"cache's first step: MLP {fmt(figures['mlp_cold_first_step_tiered_over_warm']['median'])}x, "
            f"transformer {fmt(figures['transformer_cold_first_step_tiered_over_warm']['median'])}x")},
    }, args.out)
    print_table("Start-up (median, min, max)", ["figure", "median", "min", "max"], rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
