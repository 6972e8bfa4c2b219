"""Tracing cost per op, beside PyTorch CPU eager's per-op cost on the same ops
(also while recording shapes or source lines), and the cost of a cached
mark_step for graphs of 10 to 10,000 nodes.

    python benchmarks/bench_tracing.py [--quick] [--out DIR]

Per-op figures are medians over repeats of a loop of small elementwise ops
(16 floats, so the CPU's compute is negligible and both columns show dispatch
and bookkeeping cost). mark_step is timed on a graph already in the cache: it is
the host cost of canonicalizing, hashing, looking up and queueing the graph; the
graph's execution on the device queue is reported separately (graph.execute.ns).
Writes benchmarks/results/tracing.json and prints a table.
"""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_neuron  # noqa: E402
from common import (bench_parser, fmt, interleaved, print_table, ratios, summary, table,  # noqa: E402
                    write_results)


def per_op_trace(ops: int) -> float:
    x = torch.randn(16, device="neuron")
    y = torch.randn(16, device="neuron")
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()
    start = time.perf_counter()
    z = x
    for _ in range(ops):
        z = z * y + x
    elapsed = time.perf_counter() - start
    del z
    torch_neuron.mark_step()  # leave nothing pending for the next sample
    torch_neuron.wait_device_ops()
    return elapsed / (2 * ops) * 1e6


def per_op_trace_recording(ops: int) -> float:
    """per_op_trace with the shape registry's recorder installed (its records
    are dropped after each sample: the cost measured is the recording's)."""
    torch_neuron._C._registry_start()
    try:
        return per_op_trace(ops)
    finally:
        torch_neuron._C._registry_stop()
        torch_neuron._C._registry_take()


def per_op_trace_source_lines(ops: int) -> float:
    """per_op_trace recording each op's source line, as eager mode always does
    (TORCH_NEURON_IR_DEBUG=1 records them in lazy mode): the cost measured is
    the frame walk's."""
    with torch_neuron.config.override(TORCH_NEURON_IR_DEBUG="1"):
        return per_op_trace(ops)


def per_op_trace_inplace(ops: int) -> float:
    """per_op_trace with in-place ops (z.mul_(y).add_(x)): functionalization
    runs each in-place op's Meta kernel to check its arguments before tracing
    the functional form (a repeated signature is answered by the signature
    cache of lazy/cpu_parity.cc, a new one checked and run)."""
    x = torch.randn(16, device="neuron")
    y = torch.randn(16, device="neuron")
    z = torch.randn(16, device="neuron")
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()
    start = time.perf_counter()
    for _ in range(ops):
        z.mul_(y).add_(x)
    elapsed = time.perf_counter() - start
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()
    return elapsed / (2 * ops) * 1e6


def per_op_cpu_inplace(ops: int) -> float:
    x, y, z = torch.randn(16), torch.randn(16), torch.randn(16)
    start = time.perf_counter()
    for _ in range(ops):
        z.mul_(y).add_(x)
    return (time.perf_counter() - start) / (2 * ops) * 1e6


def per_op_cpu(ops: int) -> float:
    x, y = torch.randn(16), torch.randn(16)
    start = time.perf_counter()
    z = x
    for _ in range(ops):
        z = z * y + x
    return (time.perf_counter() - start) / (2 * ops) * 1e6


def cached_mark_step(nodes: int, repeats: int):
    """Median mark_step and execution time (ms) of an n-node graph already
    compiled at tier 1."""
    x = torch.randn(16, device="neuron")
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()
    steps, execs = [], []
    for r in range(repeats + 2):
        z = x
        for _ in range(nodes - 1):  # one leaf + (nodes - 1) ops
            z = z + x
        executed_ns = torch_neuron.metrics.counter("graph.execute.ns")
        start = time.perf_counter()
        torch_neuron.mark_step()
        queued = time.perf_counter()
        torch_neuron.wait_device_ops()
        if r == 0:
            # The first builds the cache entry: a tier-0 stand-in at once, tier 1
            # in the background. Measured with that compile still running, the
            # syncs shared two cores with the C++ compiler (0.28-0.40 ms at
            # 1,000 nodes against 0.15 with it done).
            torch_neuron._C._wait_background_compiles()
        if r >= 2:
            steps.append((queued - start) * 1e3)
            execs.append((torch_neuron.metrics.counter("graph.execute.ns") - executed_ns) / 1e6)
        del z
    return summary(steps), summary(execs)


def main(argv=None) -> int:
    args = bench_parser(__doc__).parse_args(argv)
    ops = 200 if args.quick else 2000
    repeats = 3 if args.quick else 9
    sizes = [10, 100, 1000] if args.quick else [10, 100, 1000, 10000]

    samples = interleaved({"neuron_trace_us": lambda: per_op_trace(ops),
                           "neuron_trace_recording_us": lambda: per_op_trace_recording(ops),
                           "neuron_trace_source_lines_us": lambda: per_op_trace_source_lines(ops),
                           "cpu_eager_us": lambda: per_op_cpu(ops),
                           "neuron_trace_inplace_us": lambda: per_op_trace_inplace(ops),
                           "cpu_eager_inplace_us": lambda: per_op_cpu_inplace(ops)}, repeats=repeats)
    per_op = {k: summary(v) for k, v in samples.items()}
    per_op["trace_over_cpu_ratio"] = ratios(samples["neuron_trace_us"], samples["cpu_eager_us"])
    per_op["inplace_trace_over_cpu_ratio"] = ratios(samples["neuron_trace_inplace_us"],
                                                    samples["cpu_eager_inplace_us"])
    # The shape registry's recording cost (TORCH_NEURON_SHAPE_REGISTRY), pair by pair.
    per_op["recording_over_trace_ratio"] = ratios(samples["neuron_trace_recording_us"], samples["neuron_trace_us"])
    # Recording the user's source line of every op (always on in eager mode).
    per_op["source_lines_over_trace_ratio"] = ratios(samples["neuron_trace_source_lines_us"],
                                                     samples["neuron_trace_us"])

    mark_step = {}
    for n in sizes:
        print(f"  mark_step on a cached {n}-node graph ...", flush=True)
        # A training loop syncs the same graph thousands of times: the figure is
        # the steady state, the median of 30 syncs (the first few after a new
        # graph size are slower, and 9 samples put the median among them).
        step, execute = cached_mark_step(n, repeats=3 if args.quick else 9 if n >= 10000 else 30)
        mark_step[str(n)] = {"mark_step_ms": step, "execute_ms": execute}

    per_op_rows = [[k, fmt(v["median"]), fmt(v["min"]), fmt(v["max"])] for k, v in per_op.items()]
    step_rows = [[int(n), fmt(v["mark_step_ms"]["median"]), fmt(v["mark_step_ms"]["median"] * 1e3 / int(n)),
                  fmt(v["execute_ms"]["median"])] for n, v in mark_step.items()]
    ratio = per_op["trace_over_cpu_ratio"]
    path = write_results("tracing", {
        "quick": args.quick, "per_op": per_op, "cached_mark_step": mark_step,
        "command": "python benchmarks/bench_tracing.py",
        "title": "Tracing and mark_step cost",
        "description": (
            "Per-op cost of tracing a small elementwise op (16 floats, so compute is "
            "negligible) beside PyTorch CPU eager running the same op, interleaved, "
            "ratio taken pair by pair, also while the shape registry records and while "
            "each op's source line is recorded (as eager mode always does), and for in-place "
            "ops (`z.mul_(y).add_(x)`, whose Meta checks functionalization runs first); and the host "
            "cost of `mark_step` on a graph "
            "already in the cache (canonicalize, hash, look up, queue) for 10 to "
            "10,000 nodes, with the graph's execution on the device queue beside it."),
        "tables": [
            table("Per-op cost (microseconds)", ["what", "median", "min", "max"], per_op_rows),
            table("Cached mark_step (ms)", ["nodes", "mark_step", "per node (us)", "execute"], step_rows),
        ],
        "plots": [{
            "name": "mark_step_scaling", "title": "Cached mark_step against graph size",
            "kind": "line", "xlabel": "graph nodes", "ylabel": "ms", "logx": True, "logy": True,
            "x": [int(n) for n in mark_step],
            "series": {"mark_step (host)": [v["mark_step_ms"]["median"] for v in mark_step.values()],
                       "execute (device queue)": [v["execute_ms"]["median"] for v in mark_step.values()]},
        }],
        "headline": {
            "tracing per op": (f"{fmt(per_op['neuron_trace_us']['median'])} us per traced op vs "
                               f"{fmt(per_op['cpu_eager_us']['median'])} us per CPU eager op "
                               f"(ratio {fmt(ratio['median'])}, {fmt(ratio['min'])}-{fmt(ratio['max'])})"),
            "shape registry recording": (
                f"{fmt(per_op['neuron_trace_recording_us']['median'])} us per traced op while recording "
                f"(ratio to not recording {fmt(per_op['recording_over_trace_ratio']['median'])}, "
                f"{fmt(per_op['recording_over_trace_ratio']['min'])}-"
                f"{fmt(per_op['recording_over_trace_ratio']['max'])})"),
            "in-place ops": (f"{fmt(per_op['neuron_trace_inplace_us']['median'])} us per traced in-place op vs "
                             f"{fmt(per_op['cpu_eager_inplace_us']['median'])} us on the CPU (ratio "
                             f"{fmt(per_op['inplace_trace_over_cpu_ratio']['median'])})"),
            "source lines": (
                f"{fmt(per_op['neuron_trace_source_lines_us']['median'])} us per traced op recording its "
                f"source line (ratio to not recording {fmt(per_op['source_lines_over_trace_ratio']['median'])})"),
            "cached mark_step": ", ".join(f"{n} nodes {fmt(v['mark_step_ms']['median'])} ms"
                                          for n, v in mark_step.items()),
        },
    }, args.out)
    print_table("Per-op cost (median of repeats, microseconds)", ["what", "median", "min", "max"], per_op_rows)
    print_table("Cached mark_step (ms)", ["nodes", "mark_step median", "per node (us)", "execute median"],
                step_rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
