"""Per-op tracing cost and cached mark_step cost of this checkout's build beside
another checkout's (the previous commit's, say), in alternating processes.

    git worktree add /tmp/prev HEAD~1 && (cd /tmp/prev && cmake -S . -B build -G Ninja \\
        -DPython3_EXECUTABLE=$PWD/../main/.venv/bin/python && cmake --build build --target _C)
    python benchmarks/compare_builds.py /tmp/prev [--rounds 7] [--record]
    python benchmarks/compare_builds.py /tmp/prev --callgrind

Each round runs one process per build, A B A B ...: the machine's noise hits
both alike, and the ratio is taken round by round. A process traces 2000 small
elementwise ops (16 floats: dispatch and bookkeeping only) five times and keeps
the median, then times mark_step on a cached 1000-node graph. With --record,
this checkout's processes also record into the shape registry (the cost of
TORCH_NEURON_SHAPE_REGISTRY), the other's do not. Writes
benchmarks/results/compare_builds.json.

With --callgrind, instructions are counted instead of time (valgrind's
callgrind; instruction counts barely move when the machine is busy, where wall
time on a shared 2-core machine can spread 3x within a run). Per build, one
process counts only the traced ops (the Python entry points of `*` and `+`,
per op), two more only mark_steps of a 1000-node graph (2 and 2 + N of them:
the difference is N cached ones). The six processes run at once, a few
minutes in all. Writes benchmarks/results/compare_builds_callgrind.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fmt, print_table, ratios, summary, write_results  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = r"""
import json, statistics, time, torch, torch_neuron
record = %(record)s
if record:
    torch_neuron._C._registry_start()
def trace(ops):
    x = torch.randn(16, device="neuron"); y = torch.randn(16, device="neuron")
    torch_neuron.mark_step(); torch_neuron.wait_device_ops()
    start = time.perf_counter(); z = x
    for _ in range(ops):
        z = z * y + x
    elapsed = time.perf_counter() - start
    del z; torch_neuron.mark_step(); torch_neuron.wait_device_ops()
    return elapsed / (2 * ops) * 1e6
def step(nodes):
    x = torch.randn(16, device="neuron"); torch_neuron.mark_step(); torch_neuron.wait_device_ops()
    times = []
    for r in range(7):
        z = x
        for _ in range(nodes - 1):
            z = z + x
        start = time.perf_counter(); torch_neuron.mark_step(); times.append(time.perf_counter() - start)
        torch_neuron.wait_device_ops(); del z
    return statistics.median(times[2:]) * 1e3
trace(200)
per_op = statistics.median(trace(%(ops)d) for _ in range(5))
print(json.dumps({"file": torch_neuron.__file__, "trace_us": per_op, "mark_step_ms": step(1000)}))
"""


def probe(checkout: str, ops: int, record: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=checkout, TORCH_NEURON_OPT_LEVEL="0")
    env.pop("TORCH_NEURON_SHAPE_REGISTRY", None)
    # From a neutral directory: the current directory would come first on sys.path.
    out = subprocess.run([sys.executable, "-c", PROBE % {"ops": ops, "record": record}], env=env,
                         cwd="/", capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    expected = os.path.join(os.path.abspath(checkout), "torch_neuron")
    if not result["file"].startswith(expected):
        raise SystemExit(f"the probe imported {result['file']}, not the build in {checkout}")
    return result


CALLGRIND_PROBE = r"""
import torch, torch_neuron
kind = %(kind)r
x = torch.randn(16, device="neuron"); y = torch.randn(16, device="neuron")
torch_neuron.mark_step(); torch_neuron.wait_device_ops()
if kind == "trace":
    z = x
    for _ in range(%(ops)d):
        z = z * y + x
    del z
else:
    for _ in range(%(syncs)d):
        z = x
        for _ in range(999):
            z = z + x
        torch_neuron.mark_step(); torch_neuron.wait_device_ops(); del z
print(torch_neuron.__file__)
"""

# The functions whose instructions each kind counts (with what they call).
CALLGRIND_COLLECT = {
    "trace": ["torch::autograd::THPVariable_mul*", "torch::autograd::THPVariable_add*"],
    "mark_step": ["torch_neuron::lazy::GraphExecutor::MarkStep*"],
}


def _callgrind_total(path: str) -> int:
    """The instructions a callgrind run counted."""
    import re
    with open(path) as f:
        match = re.search(r"^(?:totals|summary): (\d+)", f.read(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no instruction total in {path}")
    return int(match.group(1))


def callgrind(other: str, ops: int, syncs: int) -> dict:
    import shutil
    import tempfile
    if shutil.which("valgrind") is None:
        raise SystemExit("compare_builds --callgrind needs valgrind (apt-get install valgrind)")
    out = tempfile.mkdtemp(prefix="compare_builds_")
    # mark_step is counted in two runs, of 2 and of 2 + syncs mark_steps (the
    # inputs' and the chain's first, which compiles it, then cached ones):
    # their difference is `syncs` cached mark_steps.
    probes = {"trace": ("trace", 0), "mark_step_short": ("mark_step", 1), "mark_step_long": ("mark_step", 1 + syncs)}
    runs = {}
    for build, checkout in (("this", HERE), ("other", other)):
        for name, (kind, chains) in probes.items():
            path = os.path.join(out, f"{build}.{name}.out")
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={path}", "--collect-atstart=no"]
            cmd += [f"--toggle-collect={f}" for f in CALLGRIND_COLLECT[kind]]
            # Each process compiles in a cache of its own: runs that shared one
            # would find each other's executables, and the two mark_step runs
            # would differ by more than the cached mark_steps.
            env = dict(os.environ, PYTHONPATH=checkout, TORCH_NEURON_OPT_LEVEL="0",
                       TORCH_NEURON_CACHE_DIR=os.path.join(out, f"{build}.{name}.cache"),
                       TORCH_NEURON_COMPILE_SERVICE="off")
            env.pop("TORCH_NEURON_SHAPE_REGISTRY", None)
            code = CALLGRIND_PROBE % {"kind": kind, "ops": ops, "syncs": chains}
            runs[build, name] = (path, checkout, subprocess.Popen(
                cmd + [sys.executable, "-c", code], env=env, cwd="/", stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True))
    counts = {}
    for (build, name), (path, checkout, proc) in runs.items():
        stdout, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"the {build} build's {name} probe failed under valgrind")
        expected = os.path.join(os.path.abspath(checkout), "torch_neuron")
        if not stdout.strip() or not stdout.strip().splitlines()[-1].startswith(expected):
            raise SystemExit(f"the {build} probe imported {stdout.strip()!r}, not the build in {checkout}")
        counts[build, name] = _callgrind_total(path)
    shutil.rmtree(out, ignore_errors=True)
    figures = {}
    for build in ("this", "other"):
        figures[f"{build}_trace_instructions_per_op"] = counts[build, "trace"] / (2 * ops)
        figures[f"{build}_mark_step_instructions"] = (
            counts[build, "mark_step_long"] - counts[build, "mark_step_short"]) / syncs
    figures["trace_ratio"] = figures["this_trace_instructions_per_op"] / figures["other_trace_instructions_per_op"]
    figures["mark_step_ratio"] = figures["this_mark_step_instructions"] / figures["other_mark_step_instructions"]
    return figures


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("other", help="the other checkout (built)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--record", action="store_true", help="this checkout records into the shape registry")
    p.add_argument("--out", default=None)
    p.add_argument("--callgrind", action="store_true", help="count instructions (valgrind) instead of time")
    args = p.parse_args(argv)
    if args.callgrind:
        ops, syncs = 500, 3
        figures = callgrind(args.other, ops, syncs)
        print_table(f"instructions: this checkout vs {args.other} (per traced op, of {ops * 2}; per cached "
                    f"mark_step of 1000 nodes, of {syncs})",
                    ["what", "value"], [[k, fmt(v)] for k, v in figures.items()])
        path = write_results("compare_builds_callgrind", {"other": args.other, "ops": ops, "syncs": syncs,
                                                          "figures": figures}, args.out)
        print(f"\nresults: {path}")
        return 0
    this, other = [], []
    for r in range(args.rounds):
        this.append(probe(HERE, args.ops, args.record))
        other.append(probe(args.other, args.ops, False))
        print(f"  round {r + 1}/{args.rounds}: trace {this[-1]['trace_us']:.3f} vs {other[-1]['trace_us']:.3f} us, "
              f"mark_step {this[-1]['mark_step_ms']:.3f} vs {other[-1]['mark_step_ms']:.3f} ms", flush=True)
    figures = {
        "this_trace_us": summary([x["trace_us"] for x in this]),
        "other_trace_us": summary([x["trace_us"] for x in other]),
        "trace_ratio": ratios([x["trace_us"] for x in this], [x["trace_us"] for x in other]),
        "this_mark_step_ms": summary([x["mark_step_ms"] for x in this]),
        "other_mark_step_ms": summary([x["mark_step_ms"] for x in other]),
        "mark_step_ratio": ratios([x["mark_step_ms"] for x in this], [x["mark_step_ms"] for x in other]),
    }
    rows = [[k, fmt(v["median"]), fmt(v["min"]), fmt(v["max"])] for k, v in figures.items()]
    print_table(f"this checkout{' (recording)' if args.record else ''} vs {args.other}",
                ["what", "median", "min", "max"], rows)
    path = write_results("compare_builds", {"other": args.other, "record": args.record, "rounds": args.rounds,
                                            "figures": figures}, args.out)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
