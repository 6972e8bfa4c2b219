"""Adaptive eager mode against lazy mode, per-op eager and PyTorch on the CPU:
the steady training step, the first iteration with a cold and a warm compile
cache, and the share of ops that ran inside compiled groups per iteration.

  lazy         TORCH_NEURON_MODE=lazy: the step traced, one graph per mark_step
  adaptive     TORCH_NEURON_MODE=eager: groups of ops compiled in the background
  per-op       TORCH_NEURON_MODE=eager, TORCH_NEURON_EAGER_GROUPS=0: each op its own graph
  cpu eager    PyTorch on the CPU
  (and, for the steady step only, lazy mode recording every op's source line,
  as eager mode always does: the cost of the frame walk in a real model)

Steady steps are timed after warm-up (every group compiled), the four peers
interleaved in one process (A B C D A B C D ...), each with its own model copy
(SGD with momentum, one mark_step per step). The first iteration is timed in a
fresh process per run, from building the model to the end of its first step
(import excluded), with an empty compile cache (cold) and again with the cache
the cold run left (warm); cold and warm runs of the three neuron peers alternate.
The grouped share is counted (eager.op.grouped.count / eager.op.count) per
iteration of those fresh adaptive runs, which never wait for their compiles: with
a cold cache it depends on how fast the background compiles finish against how
fast the loop iterates, so each run goes on until 95% of an iteration's ops ran
in groups and says when that was.

    python benchmarks/bench_eager.py [--quick] [--out DIR]
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
import torch_neuron  # noqa: E402
from common import bench_parser, fmt, interleaved, print_table, ratios, summary, table, write_results  # noqa: E402
from models import MLP, SmallCNN, TinyDecoder, loss_fn, make_batches  # noqa: E402

MODELS = {"mlp": MLP, "cnn": SmallCNN, "transformer": TinyDecoder}
BATCH = {"mlp": 64, "cnn": 32, "transformer": 16}
PEERS = ("lazy", "adaptive", "per-op", "cpu eager")
# Lazy mode recording every op's source line, as eager mode always does: what
# the frame walk costs in a real model's step (steady table only).
LINES = "lazy + lines"


class Peer:
    """One model + optimizer in one mode, stepping through a fixed batch."""

    def __init__(self, kind: str, peer: str):
        self.kind, self.peer = kind, peer
        self.device = "cpu" if peer == "cpu eager" else "neuron"
        with self.mode():
            torch.manual_seed(0)
            self.model = MODELS[kind]().to(self.device)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
            x, y = make_batches(kind, 1, batch=BATCH[kind])[0]
            self.x, self.y = x.to(self.device), y.to(self.device)
            self.sync()

    def mode(self):
        if self.peer == "adaptive":
            return torch_neuron.mode("eager")
        if self.peer == LINES:
            return _stacked(torch_neuron.config.override(TORCH_NEURON_IR_DEBUG="1"), torch_neuron.mode("lazy"))
        if self.peer == "per-op":
            return _stacked(torch_neuron.config.override(TORCH_NEURON_EAGER_GROUPS="0"),
                            torch_neuron.mode("eager"))
        return torch_neuron.mode("lazy")

    def sync(self):
        if self.device == "neuron":
            torch_neuron.mark_step()
            torch_neuron.wait_device_ops()

    def step_ms(self) -> float:
        with self.mode():
            start = time.perf_counter()
            loss = loss_fn(self.kind, self.model, self.x, self.y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.sync()
            return (time.perf_counter() - start) * 1e3


class _stacked:
    def __init__(self, *contexts):
        self.contexts = contexts

    def __enter__(self):
        for c in self.contexts:
            c.__enter__()

    def __exit__(self, *exc):
        for c in reversed(self.contexts):
            c.__exit__(*exc)


def steady(kind: str, repeats: int) -> dict:
    peers = {name: Peer(kind, name) for name in PEERS + (LINES,)}
    for p in peers.values():  # warm-up: per-op and group compiles, momentum buffers
        for _ in range(3):
            p.step_ms()
            torch_neuron._C._eager_wait_compiles()
    torch_neuron.metrics.reset()
    samples = interleaved({n: p.step_ms for n, p in peers.items()}, repeats=repeats, settle=1)
    grouped, ops, _ = torch_neuron._C._eager_grouped_share(10_000)
    return {"samples": samples, "summaries": {n: summary(v) for n, v in samples.items()},
            "adaptive_over_lazy": ratios(samples["adaptive"], samples["lazy"]),
            "per_op_over_lazy": ratios(samples["per-op"], samples["lazy"]),
            "lines_over_lazy": ratios(samples[LINES], samples["lazy"]),
            "steady_grouped_share": grouped / ops if ops else 0.0}


# ------------------------------------------------------------ first iteration

# A fresh run goes on until REACHED of its ops ran inside compiled groups (or
# MAX_SECONDS): how many iterations, and how long, the background compiles need.
REACHED = 0.95
MAX_SECONDS = 60.0


def first_iteration_child(kind: str, peer: str, iterations: int) -> None:
    """Runs in a fresh process: prints the first step's wall time (model built
    on the device first), the grouped share of each iteration, and the first
    iteration (1-based) whose share reached REACHED with the seconds until then,
    as JSON."""
    start = time.perf_counter()
    p = Peer(kind, peer)
    first = None
    shares = []
    reached = None
    for i in itertools.count():
        # The first `iterations`, then (adaptive only) on until REACHED.
        done = reached is not None or peer != "adaptive" or time.perf_counter() - start > MAX_SECONDS
        if i >= iterations and done:
            break
        before = (torch_neuron.metrics.counter("eager.op.grouped.count"),
                  torch_neuron.metrics.counter("eager.op.count"))
        p.step_ms()
        if i == 0:
            first = (time.perf_counter() - start) * 1e3
        grouped = torch_neuron.metrics.counter("eager.op.grouped.count") - before[0]
        ops = torch_neuron.metrics.counter("eager.op.count") - before[1]
        shares.append(grouped / ops if ops else 0.0)
        if reached is None and shares[-1] >= REACHED:
            reached = {"iteration": i + 1, "seconds": time.perf_counter() - start}
    print(json.dumps({"first_ms": first, "shares": shares[:iterations], "reached": reached}))


def first_iteration(kind: str, peer: str, cache_dir: str, iterations: int) -> dict:
    env = dict(os.environ, TORCH_NEURON_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, peer, str(iterations)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def first_iterations(kind: str, repeats: int, iterations: int) -> dict:
    neuron_peers = [p for p in PEERS if p != "cpu eager"]
    cold = {p: [] for p in neuron_peers}
    warm = {p: [] for p in neuron_peers}
    adaptive = {}
    for r in range(repeats):
        for peer in neuron_peers:
            with tempfile.TemporaryDirectory(prefix="bench_eager_") as cache:
                run = first_iteration(kind, peer, cache, iterations)
                cold[peer].append(run["first_ms"])
                warm_run = first_iteration(kind, peer, cache, iterations)
                warm[peer].append(warm_run["first_ms"])
                if peer == "adaptive" and r == 0:
                    adaptive = {"cold": run, "warm": warm_run}
    return {"cold": {p: summary(v) for p, v in cold.items()}, "warm": {p: summary(v) for p, v in warm.items()},
            "grouped_share_per_iteration": adaptive["cold"]["shares"],
            "grouped_share_per_iteration_warm": adaptive["warm"]["shares"],
            "reached_cold": adaptive["cold"]["reached"], "reached_warm": adaptive["warm"]["reached"]}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        first_iteration_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    args = bench_parser(__doc__).parse_args()
    torch.set_num_threads(1)
    repeats, first_repeats, iterations = (5, 1, 4) if args.quick else (20, 3, 6)
    kinds = list(MODELS)
    results = {}
    for kind in kinds:
        results[kind] = {"steady": steady(kind, repeats), "first": first_iterations(kind, first_repeats, iterations)}

    steady_rows, first_rows, share_rows = [], [], []
    for kind in kinds:
        s, f = results[kind]["steady"], results[kind]["first"]
        med = {n: s["summaries"][n]["median"] for n in PEERS}
        steady_rows.append([kind] + [fmt(med[n]) for n in PEERS]
                           + [fmt(s["adaptive_over_lazy"]["median"]), fmt(s["per_op_over_lazy"]["median"]),
                              fmt(s["lines_over_lazy"]["median"]), f"{100 * s['steady_grouped_share']:.1f}%"])
        first_rows.append([kind] + [fmt(f["cold"][p]["median"]) for p in ("lazy", "adaptive", "per-op")]
                          + [fmt(f["cold"]["adaptive"]["median"] / f["cold"]["per-op"]["median"])]
                          + [fmt(f["warm"][p]["median"]) for p in ("lazy", "adaptive", "per-op")])
        for cache in ("cold", "warm"):
            shares = f["grouped_share_per_iteration" + ("" if cache == "cold" else "_warm")]
            reached = f[f"reached_{cache}"]
            share_rows.append([kind, cache] + [f"{100 * x:.1f}%" for x in shares]
                              + [f"iteration {reached['iteration']} ({reached['seconds']:.2f} s)" if reached
                                 else f"not in {MAX_SECONDS:.0f} s"])
    steady_header = ["model"] + [f"{n} ms" for n in PEERS] + ["adaptive / lazy", "per-op / lazy",
                                                              "lines / lazy", "ops in groups"]
    first_header = ["model", "cold lazy ms", "cold adaptive ms", "cold per-op ms", "cold adaptive / per-op",
                    "warm lazy ms", "warm adaptive ms", "warm per-op ms"]
    share_header = (["model", "cache"] + [f"iter {i + 1}" for i in range(iterations)]
                    + [f"{100 * REACHED:.0f}% from"])
    print_table("steady training step (median of interleaved samples)", steady_header, steady_rows)
    print_table("first iteration, fresh process (model built + first step)", first_header, first_rows)
    print_table("adaptive: share of ops inside compiled groups per iteration (fresh process)", share_header,
                share_rows)
    headline = {}
    for kind in kinds:
        s, f = results[kind]["steady"], results[kind]["first"]
        headline[f"eager_{kind}"] = (
            f"adaptive eager {kind} step {fmt(s['adaptive_over_lazy']['median'])}x lazy "
            f"(per-op {fmt(s['per_op_over_lazy']['median'])}x); cold first iteration "
            f"{fmt(f['cold']['adaptive']['median'] / f['cold']['per-op']['median'])}x per-op's; "
            f"{100 * f['grouped_share_per_iteration_warm'][2]:.0f}% of ops grouped in iteration 3 with a warm "
            f"cache, {100 * f['grouped_share_per_iteration'][2]:.0f}% with a cold one")
    path = write_results("eager", {
        "command": "python benchmarks/bench_eager.py" + (" --quick" if args.quick else ""),
        "title": "Adaptive eager mode",
        "description": " ".join(__doc__.split("\n\n")[2].split()),
        "results": results,
        "tables": [table("Steady training step", steady_header, steady_rows),
                   table("First iteration (fresh process, cold and warm cache)", first_header, first_rows),
                   table("Share of ops inside compiled groups per iteration", share_header, share_rows)],
        "plots": [{"name": "grouped_share", "title": "Adaptive eager: ops inside compiled groups",
                   "kind": "line", "xlabel": "iteration", "ylabel": "share of ops",
                   "x": [str(i + 1) for i in range(iterations)],
                   "series": {**{f"{k} (cold)": results[k]["first"]["grouped_share_per_iteration"] for k in kinds},
                              **{f"{k} (warm)": results[k]["first"]["grouped_share_per_iteration_warm"]
                                 for k in kinds}}}],
        "headline": headline,
    }, args.out)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
