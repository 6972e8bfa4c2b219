"""An AdamW step over 10M float32 parameters (10 tensors of 1M), four peers side
by side in one process:

  neuron       AdamW() on neuron with PyTorch's default there, the foreach path:
               the update traced, mark_step, waited for (tier 1 expands the
               _foreach_* ops and fuses each parameter's update into one kernel)
  neuron loop  AdamW(foreach=False) on neuron: the per-tensor path
  cpu eager    AdamW(foreach=True) on the CPU, PyTorch's default there
  cpu loop     AdamW(foreach=False) on the CPU

Gradients are fixed tensors set once; each sample is one optimizer step. Peers
alternate (A B C ...), warm-ups discarded, ratios pair by pair.

    python benchmarks/bench_adamw.py [--quick] [--out DIR]
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


def make_step(device: str, foreach: bool | None, tensors: int, numel: int):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(numel).to(device)) for _ in range(tensors)]
    for p in params:
        p.grad = torch.randn(numel).to(device)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=foreach)
    if device == "neuron":
        torch_neuron.mark_step()
        torch_neuron.wait_device_ops()

    def step() -> float:
        start = time.perf_counter()
        opt.step()
        if device == "neuron":
            torch_neuron.mark_step()
            torch_neuron.wait_device_ops()
        return (time.perf_counter() - start) * 1e3

    return step


def main(argv=None) -> int:
    args = bench_parser(__doc__).parse_args(argv)
    tensors, numel = (10, 1 << 17) if args.quick else (10, 1 << 20)
    repeats = 3 if args.quick else 11
    peers = {"neuron": make_step("neuron", None, tensors, numel),
             "neuron_loop": make_step("neuron", False, tensors, numel),
             "cpu_eager_foreach": make_step("cpu", True, tensors, numel),
             "cpu_eager_loop": make_step("cpu", False, tensors, numel)}
    for step in peers.values():  # warm-up: state creation, compiles
        step()
        step()
    print(f"  {tensors} x {numel} parameters, {repeats} interleaved steps per peer ...", flush=True)
    samples = interleaved(peers, repeats=repeats, warmup=1, settle=1)
    ms = {k: summary(v) for k, v in samples.items()}
    speedup = {k: ratios(v, samples["neuron"]) for k, v in samples.items() if k != "neuron"}
    rows = peer_rows(ms, speedup)
    params = tensors * numel
    path = write_results("adamw", {
        "quick": args.quick, "parameters": params, "step_ms": ms, "speedup": speedup,
        "command": "python benchmarks/bench_adamw.py",
        "title": "AdamW step",
        "description": doc_description(__doc__),
        "tables": [table(f"AdamW step over {params:,} parameters (ms) and peer time / neuron time",
                         ["peer", "median", "min", "max", "time / neuron"], rows)],
        "plots": [{"name": "adamw", "title": f"AdamW step over {params:,} parameters (ms)", "kind": "bar",
                   "xlabel": "peer", "ylabel": "ms", "logx": False, "logy": False, "x": list(ms),
                   "series": {"step ms": [v["median"] for v in ms.values()]}}],
        "headline": {"AdamW step": (
            f"{params:,} parameters: neuron {fmt(ms['neuron']['median'])} ms; CPU eager foreach "
            f"{fmt(speedup['cpu_eager_foreach']['median'])}x neuron's time")},
    }, args.out)
    print_table("AdamW step (ms)", ["peer", "median", "min", "max", "time / neuron"], rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
