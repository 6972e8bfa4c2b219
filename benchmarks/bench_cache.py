"""Compile cache figures for the demo MLP and the small transformer:

  cold first step   a new process, empty cache: trace + compile + run step 1
  warm first step   a new process, the cache holds the NEFFs: trace + load + run
  remote first step a new process, empty local cache, Redis holds the NEFFs (a
                    second machine; a redis-server on loopback, when installed)
  memory-hit step   a later step in the same process (L1 hit)
  NEFF load time    reading and validating one NEFF from disk

    python benchmarks/bench_cache.py [--quick] [--out DIR]

  torch.compile     inductor's cold first step in a new process (not in --quick)

Each sample is its own process; cold and warm runs alternate (A B A B ...).
Writes benchmarks/results/cache.json and prints a table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import (bench_parser, fmt, interleaved, print_table, ratios, summary, table,  # noqa: E402
                    write_results)

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
                  "remote_hits": c.get("remote.hit.count", 0),
                  "load_ns": c.get("cache.load.ns", 0), "compiles": c.get("graph.compile.count", 0)}}))
"""


INDUCTOR_SCRIPT = r"""
import json, os, sys, time, torch
sys.path.insert(0, {tests!r})
from models import MLP, TinyDecoder, loss_fn, make_batches
kind = {kind!r}
torch.manual_seed(0)
model = MLP() if kind == "mlp" else TinyDecoder()
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
times = []
for x, y in make_batches(kind, 3, batch=8):
    start = time.perf_counter()
    loss = loss_fn(kind, compiled, x, y)
    opt.zero_grad(); loss.backward(); opt.step()
    loss.item()
    times.append(time.perf_counter() - start)
print(json.dumps({{"times": times}}))
"""


def run_inductor(kind: str) -> dict:
    """torch.compile's cold start: a new process with an empty inductor cache."""
    cache = tempfile.mkdtemp(prefix="tn_bench_inductor_")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=cache)
    try:
        out = subprocess.run([sys.executable, "-c", INDUCTOR_SCRIPT.format(tests=TESTS, kind=kind)],
                             env=env, capture_output=True, text=True, check=True, timeout=900)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_steps(kind: str, cache_dir: str, remote: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NEURON_")}
    env["TORCH_NEURON_CACHE_DIR"] = cache_dir
    # What is measured is the cache levels against compiling: every new graph
    # waits for tier 1 (bench_startup.py measures tiered compilation).
    env["TORCH_NEURON_TIERED_COMPILE"] = "0"
    if remote:
        env["TORCH_NEURON_REMOTE_CACHE"] = remote
    out = subprocess.run([sys.executable, "-c", STEP_SCRIPT.format(tests=TESTS, kind=kind)], env=env,
                         capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def start_redis():
    """A redis-server on a free loopback port (None if not installed): (process, url)."""
    import socket
    import time

    server = shutil.which("redis-server")
    if server is None:
        return None, ""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    return None, ""


def measure(kind: str, repeats: int, inductor: bool) -> dict:
    warm_dir = tempfile.mkdtemp(prefix="tn_bench_warm_")
    redis, remote = start_redis()
    run_steps(kind, warm_dir, remote)  # populate (the disk, and Redis when there is one)
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

    def warm_remote() -> float:
        d = tempfile.mkdtemp(prefix="tn_bench_remote_")
        try:
            r = run_steps(kind, d, remote)
            assert r["compiles"] == 0 and r["remote_hits"] > 0, r
            return r["times"][0] * 1e3
        finally:
            shutil.rmtree(d, ignore_errors=True)

    peers = {"cold_first_step_ms": cold, "warm_first_step_ms": warm}
    if remote:
        peers["remote_first_step_ms"] = warm_remote
    if inductor:
        peers["inductor_cold_first_step_ms"] = lambda: run_inductor(kind)["times"][0] * 1e3
    try:
        samples = interleaved(peers, repeats=repeats, warmup=0)
    finally:
        if redis is not None:
            redis.terminate()
            redis.wait(timeout=30)
    shutil.rmtree(warm_dir, ignore_errors=True)
    result = {k: summary(v) for k, v in samples.items()}
    result["memory_hit_step_ms"] = summary([t * 1e3 for t in hits])
    result["neff_load_ms"] = summary(loads)
    result["cold_over_warm_ratio"] = ratios(samples["cold_first_step_ms"], samples["warm_first_step_ms"])
    if remote:
        result["remote_over_warm_ratio"] = ratios(samples["remote_first_step_ms"], samples["warm_first_step_ms"])
    if inductor:
        result["inductor_over_cold_ratio"] = ratios(samples["inductor_cold_first_step_ms"],
                                                    samples["cold_first_step_ms"])
    return result


FIGURES = ["cold_first_step_ms", "warm_first_step_ms", "remote_first_step_ms", "inductor_cold_first_step_ms",
           "memory_hit_step_ms", "neff_load_ms", "cold_over_warm_ratio", "remote_over_warm_ratio",
           "inductor_over_cold_ratio"]


def main(argv=None) -> int:
    args = bench_parser(__doc__).parse_args(argv)
    kinds = ["mlp"] if args.quick else ["mlp", "transformer"]
    repeats = 1 if args.quick else 5
    results = {}
    for kind in kinds:
        print(f"  {kind}: {repeats} cold, warm{'' if args.quick else ' and torch.compile'} processes ...",
              flush=True)
        results[kind] = measure(kind, repeats, inductor=not args.quick)
    rows = [[kind, name, fmt(r[name]["median"]), fmt(r[name]["min"]), fmt(r[name]["max"])]
            for kind, r in results.items() for name in FIGURES if name in r]
    headline = {}
    for kind, r in results.items():
        line = (f"cold {fmt(r['cold_first_step_ms']['median'])} ms, warm disk cache "
                f"{fmt(r['warm_first_step_ms']['median'])} ms, cached step {fmt(r['memory_hit_step_ms']['median'])} ms")
        if "remote_first_step_ms" in r:
            line += (f"; warm from Redis (empty local cache) {fmt(r['remote_first_step_ms']['median'])} ms "
                     f"({fmt(r['remote_over_warm_ratio']['median'])}x the warm disk cache)")
        if "inductor_cold_first_step_ms" in r:
            line += (f"; torch.compile cold {fmt(r['inductor_cold_first_step_ms']['median'])} ms "
                     f"({fmt(r['inductor_over_cold_ratio']['median'])}x neuron's cold first step)")
        headline[f"first step, {kind}"] = line
    plot_names = [n for n in ("cold_first_step_ms", "warm_first_step_ms", "remote_first_step_ms",
                              "inductor_cold_first_step_ms")
                  if all(n in r for r in results.values())]
    path = write_results("cache", {
        "quick": args.quick, "models": results,
        "command": "python benchmarks/bench_cache.py",
        "title": "Time to first step and the compile cache",
        "description": (
            "Each sample is a new process running SGD steps of the model. Cold: empty "
            "compile cache (trace, compile, run). Warm: the disk cache holds the NEFFs "
            "(trace, load, run). Remote: an empty local cache and a redis-server on loopback "
            "holding the NEFFs (a second machine: trace, fetch, verify, load, write to the "
            "local disk, run). torch.compile: inductor's cold start with an empty "
            "inductor cache, on the CPU. Peers alternate (A B C A B C ...). Also the "
            "in-memory cache-hit step and the time to read and validate one NEFF."),
        "tables": [table("First step and cache figures (ms; ratios unitless)",
                         ["model", "figure", "median", "min", "max"], rows)],
        "plots": [{
            "name": "first_step", "title": "Time to first step (ms)", "kind": "bar",
            "xlabel": "model", "ylabel": "ms", "logx": False, "logy": True, "x": list(results),
            "series": {n.replace("_ms", ""): [r[n]["median"] for r in results.values()] for n in plot_names},
        }],
        "headline": headline,
    }, args.out)
    print_table("Compile cache (median, min, max)", ["model", "figure", "median", "min", "max"], rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
