"""Compile cache figures for the demo MLP and the small transformer:

  cold first step   a new process, empty cache: trace + compile + run step 1
  warm first step   a new process, the cache holds the NEFFs: trace + load + run
  memory-hit step   a later step in the same process (L1 hit)
  NEFF load time    reading and validating one NEFF from disk

    python benchmarks/bench_cache.py [--quick]

Each sample is its own process; cold and warm runs alternate (A B A B ...).
Writes benchmarks/results/cache.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import interleaved, print_table, summary, write_results  # noqa: E402

TESTS = os.path.join(os.path.dirname(HERE), "tests", "python")

STEP_SCRIPT = r"""
import json, sys, time, torch, torch_neuron
sys.path.insert(0, {tests!r})
from models import MLP, TinyDecoder, loss_fn, make_batches
kind = {kind!r}
torch.manual_seed(0)
model = (MLP() if kind == "mlp" else TinyDecoder()).to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
times = []
for x, y in make_batches(kind, 6, batch=8):
    start = time.perf_counter()
    loss = loss_fn(kind, model, x.to("neuron"), y.to("neuron"))
    opt.zero_grad(); loss.backward(); opt.step()
    torch_neuron.mark_step()
    loss.item()
    times.append(time.perf_counter() - start)
c = torch_neuron.metrics.counters()
print(json.dumps({{"times": times, "disk_hits": c.get("cache.disk_hit.count", 0),
                  "load_ns": c.get("cache.load.ns", 0), "compiles": c.get("graph.compile.count", 0)}}))
"""


def run_steps(kind: str, cache_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NEURON_")}
    env["TORCH_NEURON_CACHE_DIR"] = cache_dir
    out = subprocess.run([sys.executable, "-c", STEP_SCRIPT.format(tests=TESTS, kind=kind)], env=env,
                         capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(kind: str, repeats: int) -> dict:
    warm_dir = tempfile.mkdtemp(prefix="tn_bench_warm_")
    run_steps(kind, warm_dir)  # populate
    loads, hits = [], []

    def cold() -> float:
        d = tempfile.mkdtemp(prefix="tn_bench_cold_")
        try:
            r = run_steps(kind, d)
            assert r["compiles"] > 0
            hits.extend(r["times"][3:])
            return r["times"][0] * 1e3
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def warm() -> float:
        r = run_steps(kind, warm_dir)
        assert r["compiles"] == 0 and r["disk_hits"] > 0, r
        loads.append(r["load_ns"] / r["disk_hits"] / 1e6)
        return r["times"][0] * 1e3

    samples = interleaved({"cold_first_step_ms": cold, "warm_first_step_ms": warm}, repeats=repeats, warmup=0)
    shutil.rmtree(warm_dir, ignore_errors=True)
    result = {k: summary(v) for k, v in samples.items()}
    result["memory_hit_step_ms"] = summary([t * 1e3 for t in hits])
    result["neff_load_ms"] = summary(loads)
    result["cold_over_warm_ratio"] = summary(
        [c / w for c, w in zip(samples["cold_first_step_ms"], samples["warm_first_step_ms"])])
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one sample of each, MLP only")
    args = parser.parse_args(argv)
    kinds = ["mlp"] if args.quick else ["mlp", "transformer"]
    repeats = 1 if args.quick else 5
    results = {}
    for kind in kinds:
        print(f"  {kind}: {repeats} cold and {repeats} warm processes ...", flush=True)
        results[kind] = measure(kind, repeats)
    path = write_results("cache", {"quick": args.quick, "models": results})
    rows = []
    for kind, r in results.items():
        for name in ("cold_first_step_ms", "warm_first_step_ms", "memory_hit_step_ms", "neff_load_ms",
                     "cold_over_warm_ratio"):
            rows.append([kind, name, f"{r[name]['median']:.3f}", f"{r[name]['min']:.3f}", f"{r[name]['max']:.3f}"])
    print_table("Compile cache (median, min, max)", ["model", "figure", "median", "min", "max"], rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
