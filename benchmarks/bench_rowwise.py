"""Row and column kernels: softmax, layer norm, a bias-add with tanh, and a
bias gradient (ReLU's backward summed over the rows) over an 8192 x 256
float32 tensor (1024 x 256 with --quick), three peers side by side in one
process:

  neuron         opt level 1: each workload one generated kernel (softmax and
                 layer norm decomposed into row reductions and fused; the bias
                 gradient a column kernel)
  neuron tier 0  opt level 0: the same graphs as ATen calls on the device
  cpu eager      the same ops on the CPU

Each sample is one traced call, mark_step, waited for (on neuron), or one eager
call (on the CPU). Peers alternate (A B C ...), warm-ups discarded, ratios pair
by pair.

    python benchmarks/bench_rowwise.py [--quick] [--out DIR]
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_neuron  # noqa: E402
from common import (bench_parser, doc_description, fmt, interleaved, print_table, ratios,  # noqa: E402
                    summary, table, write_results)

WORKLOADS = {
    "softmax": lambda x, w, b: torch.softmax(x, -1),
    "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
    "bias_tanh": lambda x, w, b: torch.tanh(x + b) * x,
    # ReLU's backward where the activation was x + b, and the bias gradient.
    "bias_grad": lambda x, w, b: torch.where(x + b > 0, x * w, 0.0 * x).sum(0),
}


def main(argv=None) -> int:
    args = bench_parser(__doc__).parse_args(argv)
    rows_, cols = (1024, 256) if args.quick else (8192, 256)
    repeats = 3 if args.quick else 11
    torch.manual_seed(0)
    cpu = [torch.randn(rows_, cols), torch.randn(cols), torch.randn(cols)]
    dev = [t.to("neuron") for t in cpu]
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()

    def neuron(fn, level):
        def run():
            with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL=level):
                start = time.perf_counter()
                y = fn(*dev)
                torch_neuron.mark_step()
                torch_neuron.wait_device_ops()
                elapsed = time.perf_counter() - start
            del y
            return elapsed * 1e3
        return run

    def eager(fn):
        def run():
            start = time.perf_counter()
            fn(*cpu)
            return (time.perf_counter() - start) * 1e3
        return run

    ms, speedup = {}, {}
    print(f"  {rows_} x {cols} floats, {repeats} interleaved repeats per peer ...", flush=True)
    for name, fn in WORKLOADS.items():
        peers = {"neuron": neuron(fn, "1"), "neuron_tier0": neuron(fn, "0"), "cpu_eager": eager(fn)}
        samples = interleaved(peers, repeats=repeats, warmup=2, settle=1)
        ms[name] = {k: summary(v) for k, v in samples.items()}
        speedup[name] = {k: ratios(v, samples["neuron"]) for k, v in samples.items() if k != "neuron"}
    rows = [[name, fmt(ms[name]["neuron"]["median"]), fmt(ms[name]["neuron_tier0"]["median"]),
             fmt(ms[name]["cpu_eager"]["median"]), fmt(speedup[name]["neuron_tier0"]["median"]),
             fmt(speedup[name]["cpu_eager"]["median"])] for name in WORKLOADS]
    header = ["workload", "neuron", "neuron tier 0", "cpu eager", "tier 0 / neuron", "cpu / neuron"]
    path = write_results("rowwise", {
        "quick": args.quick, "shape": [rows_, cols], "step_ms": ms, "speedup": speedup,
        "command": "python benchmarks/bench_rowwise.py",
        "title": "Row kernels: softmax, layer norm, bias and tanh",
        "description": doc_description(__doc__),
        "tables": [table(f"Time per call over {rows_} x {cols} floats (ms, median) and peer time / neuron time",
                         header, rows)],
        "plots": [{"name": "rowwise", "title": f"Time per call over {rows_} x {cols} floats (ms)", "kind": "bar",
                   "xlabel": "workload", "ylabel": "ms", "logx": False, "logy": False, "x": list(WORKLOADS),
                   "series": {peer: [ms[w][peer]["median"] for w in WORKLOADS]
                              for peer in ("neuron", "neuron_tier0", "cpu_eager")}}],
        "headline": {"row kernels": "; ".join(
            f"{name} {fmt(ms[name]['neuron']['median'])} ms (tier 0 "
            f"{fmt(speedup[name]['neuron_tier0']['median'])}x, CPU eager "
            f"{fmt(speedup[name]['cpu_eager']['median'])}x neuron's time)" for name in WORKLOADS)},
    }, args.out)
    print_table("Time per call (ms)", header, rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
