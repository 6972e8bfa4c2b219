"""Time to first step when several processes start the same training at once,
with and without sharing their compiles:

  no sharing      every process its own cache dir, no compile service
  shared disk     one cache dir (a graph is compiled once under its disk lock), no service
  service         one cache dir and TORCH_NEURON_COMPILE_SERVICE=auto (the first
                  process starts the service; its start-up is in the figure)
  heterogeneous   processes whose graphs differ (model depth 1..N) but share
                  generated kernels: shared disk against the service

    python benchmarks/bench_service.py [--quick] [--out DIR]

Each sample launches N processes at once from a cold cache (fresh directories)
training the small transformer (the MLP with --quick) at opt level 1; a process
reports when its first step has finished, and the sample is the median over the
processes and the last one, from the launch. Configurations alternate
(A B C A B C ...); ratios are taken sample by sample. Writes
benchmarks/results/service.json and prints a table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import bench_parser, fmt, interleaved, print_table, ratios, summary, table, write_results  # noqa: E402

ROOT = os.path.dirname(HERE)
TESTS = os.path.join(ROOT, "tests", "python")

STEP_SCRIPT = r"""
import json, sys, time, torch, torch_neuron
sys.path.insert(0, {tests!r})
from models import MLP, TinyDecoder, loss_fn, make_batches
kind, depth = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
# depth 0: the model as it is; N: N blocks (other graphs, the same kernels).
if kind == "mlp":
    model = MLP()
    if depth > 0:
        model = torch.nn.Sequential(model, *[torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
                                              for _ in range(depth)])
else:
    model = TinyDecoder(layers=depth) if depth > 0 else TinyDecoder()
model = model.to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
first = None
for x, y in make_batches(kind, 2, batch=8):
    loss = loss_fn(kind, model, x.to("neuron"), y.to("neuron"))
    opt.zero_grad(); loss.backward(); opt.step()
    torch_neuron.mark_step()
    loss.item()
    first = first or time.time()
c = torch_neuron.metrics.counters()
print(json.dumps({{"first_step_at": first, "compiles": c.get("graph.compile.count", 0),
                  "service": c.get("service.compile.count", 0), "fallback": c.get("service.fallback.count", 0)}}))
"""


def launch_batch(kind: str, n: int, shared: bool, service: bool, heterogeneous: bool) -> dict:
    """N processes started at once; seconds from the launch to each first step."""
    root = tempfile.mkdtemp(prefix="tn_bench_service_")
    procs = []
    try:
        start = time.time()
        for i in range(n):
            env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NEURON_")}
            env.update(TORCH_NEURON_CACHE_DIR=os.path.join(root, "shared" if shared else f"own{i}"),
                       TORCH_NEURON_OPT_LEVEL="1", TORCH_NEURON_COMPILE_SERVICE="auto" if service else "off",
                       TORCH_NEURON_SERVICE_IDLE_S="30", PYTHONPATH=ROOT,
                       # Compiles are what is shared: each new graph waits for tier 1.
                       TORCH_NEURON_TIERED_COMPILE="0")
            depth = str(i + 1 if heterogeneous else 0)
            procs.append(subprocess.Popen([sys.executable, "-c", STEP_SCRIPT.format(tests=TESTS), kind, depth],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=1800)
            if p.returncode != 0:
                raise RuntimeError(f"a benchmark process failed:\n{err[-2000:]}")
            outs.append(json.loads(out.strip().splitlines()[-1]))
        firsts = sorted(o["first_step_at"] - start for o in outs)
        if service:
            assert sum(o["fallback"] for o in outs) == 0, outs
        return {"median_s": firsts[len(firsts) // 2], "last_s": firsts[-1],
                "compiles_here": sum(o["compiles"] for o in outs)}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if service:
            env = dict(os.environ, TORCH_NEURON_CACHE_DIR=os.path.join(root, "shared"), PYTHONPATH=ROOT)
            subprocess.run([sys.executable, "-m", "torch_neuron.service", "stop"], env=env, capture_output=True,
                           timeout=120)
        shutil.rmtree(root, ignore_errors=True)


def measure(kind: str, n: int, repeats: int) -> dict:
    kept = {}

    def peer(name, **how):
        def run() -> float:
            r = launch_batch(kind, n, **how)
            kept.setdefault(name, []).append(r)
            return r["median_s"]
        return run

    peers = {
        "no_sharing": peer("no_sharing", shared=False, service=False, heterogeneous=False),
        "shared_disk": peer("shared_disk", shared=True, service=False, heterogeneous=False),
        "service": peer("service", shared=True, service=True, heterogeneous=False),
        "heterogeneous_shared_disk": peer("heterogeneous_shared_disk", shared=True, service=False,
                                          heterogeneous=True),
        "heterogeneous_service": peer("heterogeneous_service", shared=True, service=True, heterogeneous=True),
    }
    interleaved(peers, repeats=repeats, warmup=0)
    result = {}
    for name, runs in kept.items():
        result[name] = {"median_s": summary([r["median_s"] for r in runs]),
                        "last_s": summary([r["last_s"] for r in runs]),
                        "compiles_here": summary([float(r["compiles_here"]) for r in runs])}

    def pair(a, b, figure):
        return ratios([r[figure] for r in kept[a]], [r[figure] for r in kept[b]])

    result["service_over_no_sharing"] = pair("service", "no_sharing", "median_s")
    result["service_over_shared_disk"] = pair("service", "shared_disk", "median_s")
    result["service_over_shared_disk_last"] = pair("service", "shared_disk", "last_s")
    result["heterogeneous_service_over_shared_disk"] = pair("heterogeneous_service", "heterogeneous_shared_disk",
                                                            "median_s")
    return result


def main(argv=None) -> int:
    args = bench_parser(__doc__).parse_args(argv)
    kind = "mlp" if args.quick else "transformer"
    n = 2 if args.quick else 8
    repeats = 1 if args.quick else 3
    print(f"  {kind}: {n} processes at once, 5 configurations x {repeats} ...", flush=True)
    r = measure(kind, n, repeats)
    configs = ["no_sharing", "shared_disk", "service", "heterogeneous_shared_disk", "heterogeneous_service"]
    rows = [[c, fmt(r[c]["median_s"]["median"]), fmt(r[c]["last_s"]["median"]),
             fmt(r[c]["compiles_here"]["median"])] for c in configs]
    ratio_rows = [[name, fmt(r[name]["median"]), fmt(r[name]["min"]), fmt(r[name]["max"])]
                  for name in ("service_over_no_sharing", "service_over_shared_disk", "service_over_shared_disk_last",
                               "heterogeneous_service_over_shared_disk")]
    headline = {
        "service, first step": (
            f"{n} processes starting the {kind} at once: first step (median process) "
            f"{fmt(r['service_over_no_sharing']['median'])}x no sharing, "
            f"{fmt(r['service_over_shared_disk']['median'])}x the shared disk cache alone; graphs that differ "
            f"but share kernels {fmt(r['heterogeneous_service_over_shared_disk']['median'])}x"),
    }
    path = write_results("service", {
        "quick": args.quick, "model": kind, "processes": n, "results": r,
        "command": "python benchmarks/bench_service.py",
        "title": "The compile service: time to first step of processes starting at once",
        "description": (
            f"Each sample starts {n} processes at once from cold caches, training the {kind} at opt level 1; "
            "the figure is the time from the launch to each process's first finished step (median process, "
            "and the last one). No sharing: a cache dir per process. Shared disk: one cache dir, processes "
            "coordinate by the disk cache's key locks. Service: one cache dir and the compile service "
            "(started by the first process; its start-up counts). Heterogeneous: process i trains a model "
            "of depth i (other graphs, shared kernels). Configurations alternate; ratios are per sample."),
        "tables": [table("Time to first step (s, medians over samples)",
                         ["configuration", "median process", "last process", "graphs compiled in the processes"],
                         rows),
                   table("Ratios (per sample)", ["ratio", "median", "min", "max"], ratio_rows)],
        "plots": [{
            "name": "service_first_step", "title": f"Time to first step, {n} processes (s)", "kind": "bar",
            "xlabel": "configuration", "ylabel": "s", "logx": False, "logy": False, "x": configs,
            "series": {"median process": [r[c]["median_s"]["median"] for c in configs],
                       "last process": [r[c]["last_s"]["median"] for c in configs]},
        }],
        "headline": headline,
    }, args.out)
    print_table("Time to first step (s)", ["configuration", "median process", "last process", "compiled here"], rows)
    print_table("Ratios", ["ratio", "median", "min", "max"], ratio_rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
