"""What one call of a torch.compile(backend="neuron") region costs the caller:
Dynamo's guard check, AOTAutograd's wrapper and the launch of the region's
program, with nothing traced.

Two regions under no_grad: one op (``a + 1`` on 64 floats) and the MLP of
tests/python/models.py (batch 64). Peers, side by side in one process:

  compiled call    calls of the compiled region, not waited for, time / call:
                   what the calling thread spends (the program runs on the
                   device queue meanwhile)
  compiled waited  the same calls, waited for once at the end, time / call
  lazy             the same code traced, one mark_step per call, waited for
                   once, time / call
  captured         the same code captured once (torch_neuron.graph) and
                   replayed, waited for once, time / call
  cpu eager        PyTorch on the CPU

    python benchmarks/bench_compiled_call.py [--quick] [--out DIR]
"""

from __future__ import annotations

import copy
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
import torch_neuron  # noqa: E402
from common import (bench_parser, doc_description, fmt, interleaved, peer_rows, print_table,  # noqa: E402
                    ratios, summary, table, write_results)
from models import MLP  # noqa: E402


def regions():
    torch.manual_seed(0)
    mlp = MLP().eval()
    features = next(mlp.parameters()).shape[1]
    return {"one op": (lambda a: a + 1, torch.randn(64)),
            "mlp": (mlp, torch.randn(64, features))}


def peers_of(fn, x, calls: int) -> dict:
    neuron_fn = copy.deepcopy(fn).to("neuron") if isinstance(fn, torch.nn.Module) else fn
    cpu_fn = fn
    xn = x.to("neuron")
    compiled = torch.compile(neuron_fn, backend="neuron")
    graph = torch_neuron.NeuronGraph()
    with torch.no_grad():
        compiled(xn)
        torch_neuron.mark_step()
        with torch_neuron.graph(graph):
            out = neuron_fn(xn)
    torch_neuron.wait_device_ops()

    def timed(body, wait: bool):
        def run() -> float:
            with torch.no_grad():
                start = time.perf_counter()
                for _ in range(calls):
                    body()
                if wait:
                    torch_neuron.wait_device_ops()
                elapsed = time.perf_counter() - start
            torch_neuron.wait_device_ops()
            return elapsed / calls * 1e6
        return run

    def lazy():
        out = neuron_fn(xn)  # alive at the mark_step, which then runs it
        torch_neuron.mark_step()
        return out

    return {"compiled_call": timed(lambda: compiled(xn), wait=False),
            "compiled_waited": timed(lambda: compiled(xn), wait=True),
            "lazy": timed(lazy, wait=True),
            "captured": timed(graph.replay, wait=True),
            "cpu_eager": timed(lambda: cpu_fn(x), wait=False)}, out


def main(argv=None) -> int:
    args = bench_parser(__doc__).parse_args(argv)
    calls = 200 if args.quick else 1000
    repeats = 3 if args.quick else 9
    results, rows = {}, {}
    for name, (fn, x) in regions().items():
        print(f"  {name}: {repeats} interleaved samples of {calls} calls per peer ...", flush=True)
        peers, _ = peers_of(fn, x, calls)
        samples = interleaved(peers, repeats=repeats, warmup=1)
        us = {k: summary(v) for k, v in samples.items()}
        relative = {k: ratios(v, samples["compiled_call"]) for k, v in samples.items() if k != "compiled_call"}
        results[name] = {"call_us": us, "relative": relative}
        rows[name] = peer_rows(us, relative)
    header = ["peer", "median", "min", "max", "time / compiled call"]
    path = write_results("compiled_call", {
        "quick": args.quick, "calls": calls, "regions": results,
        "command": "python benchmarks/bench_compiled_call.py",
        "title": "A call of a compiled region",
        "description": doc_description(__doc__),
        "tables": [table(f"{name}: time per call (us)", header, r) for name, r in rows.items()],
        "headline": {f"compiled call, {name}": (
            f"{fmt(r['call_us']['compiled_call']['median'])} us per call (guard, wrapper, launch); "
            f"waited {fmt(r['call_us']['compiled_waited']['median'])} us, lazy "
            f"{fmt(r['call_us']['lazy']['median'])} us, captured {fmt(r['call_us']['captured']['median'])} us, "
            f"CPU eager {fmt(r['call_us']['cpu_eager']['median'])} us") for name, r in results.items()},
    }, args.out)
    for name, r in rows.items():
        print_table(f"{name}: time per call (us)", header, r)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
