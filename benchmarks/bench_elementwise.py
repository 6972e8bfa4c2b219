"""Throughput of an elementwise chain over a 64 MB float32 tensor (8 MB with
--quick) against the machine's memory bandwidth, measured in the same run by a
plain copy.

  copy          dst.copy_(src) on the CPU: reads and writes 64 MB (the limit)
  neuron        y = sigmoid(relu(x * 2 + 1) * x) traced, mark_step, waited for
  neuron_arith  y = relu(x * 2 + 1) * x - 0.5: the chain without sigmoid's exp
                and division, which make the first one compute-bound on two
                cores
  cpu eager     the sigmoid chain op by op on the CPU
  torch.compile the sigmoid chain compiled by inductor (not in --quick)

Effective bandwidth is the bytes a fused kernel must move (read x, write y:
2 x 64 MB) over the time taken, for every peer; the copy moves the same bytes.
Peers alternate (A B C D ...), warm-ups discarded.

    python benchmarks/bench_elementwise.py [--quick] [--out DIR]
"""

from __future__ import annotations

import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_neuron  # noqa: E402
from common import (bench_parser, doc_description, fmt, interleaved, peer_rows,  # noqa: E402
                    print_table, ratios, summary, table, write_results)


def chain(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.relu(x * 2 + 1) * x)


def arith_chain(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2 + 1) * x - 0.5


def main(argv=None) -> int:
    args = bench_parser(__doc__).parse_args(argv)
    mb = 8 if args.quick else 64
    repeats = 3 if args.quick else 11
    n = mb * (1 << 20) // 4
    moved = 2 * n * 4  # bytes: read x once, write y once

    src = torch.randn(n)
    dst = torch.empty_like(src)
    x_dev = src.to("neuron")
    torch_neuron.wait_device_ops()
    compiled = None if args.quick else torch.compile(chain)

    def timed(fn):
        def run():
            start = time.perf_counter()
            fn()
            return moved / (time.perf_counter() - start) / 1e9  # GB/s
        return run

    def on_neuron(fn):
        def run():
            y = fn(x_dev)
            torch_neuron.mark_step()
            torch_neuron.wait_device_ops()
            del y
        return run

    peers = {"copy": timed(lambda: dst.copy_(src)), "neuron": timed(on_neuron(chain)),
             "neuron_arith": timed(on_neuron(arith_chain)), "cpu_eager": timed(lambda: chain(src))}
    if compiled is not None:
        compiled(src)  # compile outside the timing
        peers["torch_compile"] = timed(lambda: compiled(src))
    print(f"  {mb} MB, {repeats} interleaved repeats per peer ...", flush=True)
    samples = interleaved(peers, repeats=repeats, warmup=2, settle=1)
    gbps = {k: summary(v) for k, v in samples.items()}
    fraction = {k: ratios(v, samples["copy"]) for k, v in samples.items() if k != "copy"}
    rows = peer_rows(gbps, fraction)
    path = write_results("elementwise", {
        "quick": args.quick, "megabytes": mb, "gbps": gbps, "fraction_of_copy": fraction,
        "command": "python benchmarks/bench_elementwise.py",
        "title": "Elementwise throughput against memory bandwidth",
        "description": doc_description(__doc__),
        "tables": [table(f"Effective bandwidth over {mb} MB (GB/s) and fraction of the copy's",
                         ["peer", "median", "min", "max", "fraction of copy"], rows)],
        "plots": [{"name": "elementwise", "title": f"Elementwise chain over {mb} MB (GB/s)",
                   "kind": "bar", "xlabel": "peer", "ylabel": "GB/s", "logx": False, "logy": False,
                   "x": list(gbps), "series": {"effective GB/s": [v["median"] for v in gbps.values()]}}],
        "headline": {"elementwise chain": (
            f"neuron reaches {fmt(100 * fraction['neuron']['median'])}% of the copy bandwidth "
            f"({fmt(gbps['copy']['median'])} GB/s) with the sigmoid chain, "
            f"{fmt(100 * fraction['neuron_arith']['median'])}% without sigmoid; CPU eager "
            f"{fmt(100 * fraction['cpu_eager']['median'])}%"
            + (f", torch.compile {fmt(100 * fraction['torch_compile']['median'])}%"
               if "torch_compile" in fraction else ""))},
    }, args.out)
    print_table(f"Effective bandwidth over {mb} MB (GB/s)", ["peer", "median", "min", "max", "of copy"], rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
