"""Steady-state training step time of the MLP, the CNN and the small transformer
(tests/python/models.py), and of two real-sized models (benchmarks/real_models.py:
a GPT-2-style decoder from transformers with AdamW, a ResNet-18-style CNN on
64x64 images), eight peers side by side in one process:

  neuron lazy    the step traced, one mark_step, waited for (the whole step)
  neuron pipelined  10 steps, a mark_step after each, waited for once at the
                 end, time / 10: a training loop that reads its loss now and
                 then, where tracing a step overlaps the previous one's run
  neuron graph   the step captured once (torch_neuron.graph) and replayed 10
                 times, waited for once, time / 10: no tracing, the compiled
                 step alone (as a CUDA graph replays a captured step)
  neuron compile  the model under torch.compile(backend="neuron"), 10 steps
                 with a mark_step each (the optimizer's step, traced, ends
                 it), waited for once, time / 10: the forward and backward
                 graphs run as their programs, nothing traced but the
                 optimizer's step and the loss around them
  neuron compile step  the same with the optimizer's step compiled too
                 (torch.compile(optimizer.step, backend="neuron")): only the
                 loss is traced each step
  neuron eager   TORCH_NEURON_MODE=eager: every op runs as it is traced
  cpu eager      PyTorch on the CPU
  torch.compile  inductor on the CPU (model compiled; not in --quick)

and the peak memory of one step above its starting state, and each peer's
first step (compiles included; the compile caches as they are, so a warm
disk cache shortens it). On neuron: the
highest of the device arena's peak and the peak, during an execution, of the
arena's allocated bytes plus the graph's host intermediates (ATen results,
which the emulator keeps in host memory beside the arena;
graph.execute.peak_total_bytes), each byte counted once; less the arena's bytes
at the start. On the CPU: the tensors the step creates, live at once, less the
gradients of the step before once they are freed (a dispatch mode counting
storages from the op that makes them until their last tensor dies;
approximate: a storage whose first tensor dies before a view of it is released
early). Both credit the step for the old gradients it frees (zero_grad).

After the interleaved runs, the neuron lazy peer's step is timed phase by
phase on its own (tracing, mark_step, the wait for the execution): the
emulated device runs its graphs on the same host cores, so a waited step costs
its tracing plus an execution that takes about as long as the captured replay.

    python benchmarks/bench_training.py [--quick] [--models mlp,gpt2,...] [--out DIR]

The real-sized models take seconds a step on a small host: their pipelined and
captured peers run 3 steps a sample instead of 10, they have no neuron eager
peer, and they are measured 5 times (the toys 15); --quick runs the MLP only.

Each peer has its own copy of the model and SGD with momentum (AdamW for
the decoder); warm-up steps
(compiles) are discarded, then the peers alternate step by step (A B C D A B C
D ...), and ratios are taken pair by pair.
"""

from __future__ import annotations

import os
import sys
import time
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
import torch_neuron  # noqa: E402
from common import (bench_parser, fmt, interleaved, print_table, ratios, summary, table,  # noqa: E402
                    write_results)
import real_models  # noqa: E402
from models import MLP, SmallCNN, TinyDecoder, loss_fn, make_batches  # noqa: E402

MODELS = {"mlp": MLP, "cnn": SmallCNN, "transformer": TinyDecoder}
BATCH = {"mlp": 64, "cnn": 32, "transformer": 16}
REAL_SIZED = ("gpt2", "resnet")
PIPELINE = 10  # steps per measurement of the pipelined peer (toys)
REAL_PIPELINE = 3  # ... and of the real-sized models


class Peer:
    """One model + optimizer on one device, stepping through a fixed batch."""

    def __init__(self, kind: str, device: str, compiled: str = "", eager: bool = False,
                 pipelined: int = 1, captured: bool = False, compile_step: bool = False):
        torch.manual_seed(0)
        self.kind, self.device, self.eager, self.pipelined = kind, device, eager, pipelined
        # The first step of a captured peer traces (warm-up: momentum buffers),
        # the second captures, the rest replay.
        self.graph = torch_neuron.NeuronGraph() if captured else None
        self.steps = 0
        if kind in REAL_SIZED:
            self.model = real_models.make_model(kind).to(device)
            self.opt = real_models.make_optimizer(kind, self.model)
            x, y = real_models.make_batch(kind)
        else:
            self.model = MODELS[kind]().to(device)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
            x, y = make_batches(kind, 1, batch=BATCH[kind])[0]
        # compiled: a torch.compile backend ("inductor", "neuron"), or "" for none.
        self.forward = torch.compile(self.model, backend=compiled) if compiled else self.model
        self.opt_step = torch.compile(self.opt.step, backend=compiled) if compile_step else self.opt.step
        self.x, self.y = x.to(device), y.to(device)
        if device == "neuron":
            torch_neuron.mark_step()
            torch_neuron.wait_device_ops()

    def train_step(self):
        if self.kind in REAL_SIZED:
            loss = real_models.loss(self.kind, self.forward, self.x, self.y)
        else:
            loss = loss_fn(self.kind, self.forward, self.x, self.y)
        self.opt.zero_grad()
        loss.backward()
        self.opt_step()
        return loss

    def step(self) -> float:
        self.steps += 1
        if self.graph is not None and self.steps == 2:
            with torch_neuron.graph(self.graph):
                self.train_step()
        if self.graph is not None and self.steps >= 2:
            start = time.perf_counter()
            for _ in range(self.pipelined):
                self.graph.replay()
            torch_neuron.wait_device_ops()
            return (time.perf_counter() - start) * 1e3 / self.pipelined
        if self.eager:
            torch_neuron.set_mode("eager")
        start = time.perf_counter()
        for _ in range(self.pipelined):
            self.train_step()
            if self.device == "neuron":
                torch_neuron.mark_step()
        if self.device == "neuron":
            torch_neuron.wait_device_ops()
        elapsed = time.perf_counter() - start
        if self.eager:
            torch_neuron.set_mode("lazy")
        return elapsed * 1e3 / self.pipelined


def neuron_step_peak(peer: Peer) -> dict:
    """Peak bytes of one step above its start: the device arena's own peak, and
    the peak of the arena plus the graph's host intermediates during an
    execution (each byte once); the step's peak is the higher. Also the host
    intermediates' own peak (graph.execute.peak_bytes)."""
    torch_neuron.wait_device_ops()
    base = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    torch_neuron.metrics.reset()
    peer.step()
    arena = torch.neuron.max_memory_allocated() - base
    during = torch_neuron.metrics.counter("graph.execute.peak_total_bytes") - base
    return {"arena": arena, "intermediates": torch_neuron.metrics.counter("graph.execute.peak_bytes"),
            "total": max(arena, during)}


class _LiveTensorBytes(TorchDispatchMode):
    """Counts the bytes of tensor storages the ops under it create, live at once:
    a storage counts from the op that made it until its last tensor is freed."""

    def __init__(self):
        super().__init__()
        self.current = self.peak = 0
        self.live = set()

    def _free(self, key, nbytes):
        self.live.discard(key)
        self.current -= nbytes

    def _free_old(self, nbytes):
        self.current -= nbytes

    def track_old(self, t: torch.Tensor):
        """Counts `t` (made before the step) as freed when it dies."""
        weakref.finalize(t, self._free_old, t.untyped_storage().nbytes())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                storage = t.untyped_storage()
                key, nbytes = storage.data_ptr(), storage.nbytes()
                if nbytes and key not in self.live:
                    self.live.add(key)
                    self.current += nbytes
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(t, self._free, key, nbytes)
        return out


def cpu_step_peak(peer: Peer) -> int:
    tracker = _LiveTensorBytes()
    for p in peer.model.parameters():  # the old gradients zero_grad lets go
        if p.grad is not None:
            tracker.track_old(p.grad)
    with tracker:
        peer.step()
    return tracker.peak


def step_phases(peer: Peer, repeats: int) -> dict:
    """Where a waited neuron step's time goes, each phase timed on its own:
    tracing (the step's Python code on lazy tensors: forward, backward,
    optimizer), mark_step's host work (canonicalize, hash, look up, queue) and
    the wait for the execution. The device is idle when each step starts."""
    phases = {"trace": [], "mark_step": [], "wait": []}
    for _ in range(repeats):
        torch_neuron.wait_device_ops()
        start = time.perf_counter()
        # The optimizer's step would end the step itself: kept apart here.
        with torch_neuron.config.override(TORCH_NEURON_STEP_ON_OPTIMIZER="0"):
            peer.train_step()
        traced = time.perf_counter()
        torch_neuron.mark_step()
        marked = time.perf_counter()
        torch_neuron.wait_device_ops()
        done = time.perf_counter()
        phases["trace"].append((traced - start) * 1e3)
        phases["mark_step"].append((marked - traced) * 1e3)
        phases["wait"].append((done - marked) * 1e3)
    return {name: summary(values) for name, values in phases.items()}


def measure(kind: str, repeats: int, inductor: bool) -> dict:
    real = kind in REAL_SIZED
    pipeline = REAL_PIPELINE if real else PIPELINE
    peers = {"neuron_lazy": Peer(kind, "neuron"), "neuron_pipelined": Peer(kind, "neuron", pipelined=pipeline),
             "neuron_graph": Peer(kind, "neuron", pipelined=pipeline, captured=True),
             "neuron_compile": Peer(kind, "neuron", compiled="neuron", pipelined=pipeline),
             "neuron_compile_step": Peer(kind, "neuron", compiled="neuron", pipelined=pipeline, compile_step=True)}
    if not real:
        peers["neuron_eager"] = Peer(kind, "neuron", eager=True)
    peers["cpu_eager"] = Peer(kind, "cpu")
    if inductor:
        peers["inductor"] = Peer(kind, "cpu", compiled="inductor")
    first = {}
    for name, p in peers.items():  # warm-up: compiles, optimizer state, allocator pools
        first[name] = p.step()
        for _ in range(2):
            p.step()
    samples = interleaved({name: p.step for name, p in peers.items()}, repeats=repeats, warmup=1,
                          settle=1)
    result = {"step_ms": {k: summary(v) for k, v in samples.items()}, "ratios": {}, "first_step_ms": first}
    for base in ("neuron_lazy", "neuron_pipelined", "neuron_graph", "neuron_compile", "neuron_compile_step"):
        others = ("cpu_eager", "inductor", "neuron_eager", "neuron_lazy")
        others += {"neuron_graph": ("neuron_pipelined",), "neuron_compile": ("neuron_graph",),
                   "neuron_compile_step": ("neuron_graph", "neuron_compile")}.get(base, ())
        for other in others:
            if other in samples and other != base:
                result["ratios"][f"{other}/{base}"] = ratios(samples[other], samples[base])
    result["phases_ms"] = step_phases(peers["neuron_lazy"], repeats)
    neuron = neuron_step_peak(peers["neuron_lazy"])
    result["peak_bytes"] = {"neuron_arena": neuron["arena"], "neuron_intermediates": neuron["intermediates"],
                            "neuron_lazy": neuron["total"],
                            "cpu_eager": cpu_step_peak(peers["cpu_eager"])}
    return result


def main(argv=None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--models", default=None,
                        help=f"comma-separated subset of {','.join([*MODELS, *REAL_SIZED])}")
    args = parser.parse_args(argv)
    kinds = ["mlp"] if args.quick else [*MODELS, *REAL_SIZED]
    if args.models:
        kinds = [k.strip() for k in args.models.split(",") if k.strip()]
        unknown = [k for k in kinds if k not in MODELS and k not in REAL_SIZED]
        if unknown:
            parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join([*MODELS, *REAL_SIZED])}")
    results = {}
    for kind in kinds:
        repeats = 3 if args.quick else 5 if kind in REAL_SIZED else 15
        print(f"  {kind}: {repeats} interleaved steps per peer ...", flush=True)
        results[kind] = measure(kind, repeats, inductor=not args.quick)

    peers = [p for p in ("neuron_lazy", "neuron_pipelined", "neuron_graph", "neuron_compile",
                         "neuron_compile_step", "neuron_eager", "cpu_eager", "inductor")
             if any(p in r["step_ms"] for r in results.values())]
    step_rows = [[kind] + [fmt(r["step_ms"][p]["median"]) if p in r["step_ms"] else "-" for p in peers]
                 for kind, r in results.items()]
    ratio_names = []
    for r in results.values():
        ratio_names += [n for n in r["ratios"] if n not in ratio_names]
    ratio_rows = [[kind] + [f"{fmt(r['ratios'][n]['median'])} ({fmt(r['ratios'][n]['min'])}-"
                            f"{fmt(r['ratios'][n]['max'])})" if n in r["ratios"] else "-" for n in ratio_names]
                  for kind, r in results.items()]
    first_rows = [[kind] + [fmt(r["first_step_ms"][p]) if p in r["first_step_ms"] else "-" for p in peers]
                  for kind, r in results.items()]
    mem_rows = [[kind, r["peak_bytes"]["neuron_arena"], r["peak_bytes"]["neuron_intermediates"],
                 r["peak_bytes"]["neuron_lazy"], r["peak_bytes"]["cpu_eager"],
                 fmt(r["peak_bytes"]["neuron_lazy"] / max(r["peak_bytes"]["cpu_eager"], 1))]
                for kind, r in results.items()]
    phase_rows = []
    for kind, r in results.items():
        ph = {name: r["phases_ms"][name]["median"] for name in ("trace", "mark_step", "wait")}
        cpu = r["step_ms"]["cpu_eager"]["median"]
        phase_rows.append([kind, fmt(ph["trace"]), fmt(ph["mark_step"]), fmt(ph["wait"]),
                           fmt(r["step_ms"]["neuron_graph"]["median"]), fmt(cpu),
                           fmt(cpu / max(ph["trace"], 1e-9)),
                           fmt(cpu / max(ph["mark_step"] + ph["wait"], 1e-9))])
    phase_header = ["model", "trace", "mark_step", "wait (execution)", "neuron graph (execution alone)",
                    "cpu eager", "cpu eager / trace", "cpu eager / (mark_step + wait)"]
    headline = {}
    for kind, r in results.items():
        for base in ("neuron_lazy", "neuron_pipelined", "neuron_graph", "neuron_compile", "neuron_compile_step"):
            parts = [f"{n.split('/')[0]} {fmt(r['ratios'][n]['median'])}x" for n in ratio_names
                     if n.endswith("/" + base) and not n.startswith("neuron") and n in r["ratios"]]
            headline[f"training step, {kind}, {base.replace('_', ' ')}"] = (
                f"{base.replace('_', ' ')} {fmt(r['step_ms'][base]['median'])} ms; peer time / its "
                f"time: {', '.join(parts)} (above 1: neuron is faster)")
        headline[f"peak step memory, {kind}"] = (
            f"neuron {r['peak_bytes']['neuron_lazy']} B (arena and graph intermediates) vs CPU eager "
            f"{r['peak_bytes']['cpu_eager']} B")
    path = write_results("training", {
        "quick": args.quick, "models": results,
        "command": "python benchmarks/bench_training.py",
        "title": "Training step time and peak memory",
        "description": (
            "Steady-state step of the MLP, the CNN and the small transformer with SGD and "
            "momentum, and of two real-sized models (a GPT-2-style decoder from transformers: "
            "6 layers, hidden 512, 8 heads, sequence 256, batch 8, vocabulary 8192, AdamW; a "
            "ResNet-18-style CNN on 3x64x64 images, batch 32, SGD with momentum; their pipelined "
            "and captured peers run 3 steps a sample, and they have no neuron eager peer), "
            "eight peers side by side in one process: neuron lazy (the step traced, "
            "one mark_step, waited for), neuron pipelined (10 steps with a mark_step each, "
            "waited for once: tracing overlaps the previous step's run), neuron graph (the "
            "step captured once with torch_neuron.graph, then 10 replays waited for once: "
            "no tracing), neuron compile (the model under torch.compile(backend=\"neuron\"), "
            "10 steps with a mark_step each, waited for once: forward and backward run as "
            "their programs, the optimizer's step is traced), neuron compile step (the same with "
            "the optimizer's step compiled too: only the loss is traced), neuron eager (every op run as "
            "it is traced), CPU "
            "eager, and torch.compile (inductor, CPU). Each peer has its own model copy; "
            "warm-up steps (compiles) are discarded, then peers alternate step by step and "
            "ratios are taken pair by pair. Peak memory of one step above its starting state: "
            "on neuron, the higher of the device arena's peak and the peak, during an "
            "execution, of the arena's allocated bytes plus the graph's host intermediates "
            "(ATen results, which the emulator keeps in host memory beside the arena), each "
            "byte counted once; on the CPU, the tensors the step creates, live at once (a "
            "dispatch mode counting storages from their op to their last tensor's death), "
            "less the previous step's gradients once zero_grad lets them go. After the "
            "interleaved runs the neuron lazy step is also timed phase by phase, alone: "
            "tracing, mark_step, and the wait for the execution (on this emulated device the "
            "graph runs on the same host cores)."),
        "tables": [
            table("Step time (ms, median)", ["model"] + peers, step_rows),
            table("Peer step time / neuron step time (median, min-max)", ["model"] + ratio_names,
                  ratio_rows),
            table("First step (ms, compiles included; with the compile caches as they were)",
                  ["model"] + peers, first_rows),
            table("Where the neuron lazy step's time goes (ms, median; the last two columns: CPU eager's "
                  "step over tracing alone, and the ratio neuron lazy would reach if tracing cost nothing)",
                  phase_header, phase_rows),
            table("Peak memory of one step above its starting state (bytes)",
                  ["model", "neuron arena", "neuron host intermediates", "neuron step",
                   "cpu eager", "neuron / cpu"], mem_rows),
        ],
        "plots": [{
            "name": "training_step", "title": "Training step time (ms)", "kind": "bar",
            "xlabel": "model", "ylabel": "ms", "logx": False, "logy": True, "x": list(results),
            # A peer a model lacks (the real-sized models have no neuron eager) is a gap.
            "series": {p: [r["step_ms"][p]["median"] if p in r["step_ms"] else None for r in results.values()]
                       for p in peers},
        }],
        "headline": headline,
    }, args.out)
    print_table("Step time (ms, median)", ["model"] + peers, step_rows)
    print_table("Ratios", ["model"] + ratio_names, ratio_rows)
    print_table("First step (ms)", ["model"] + peers, first_rows)
    print_table("Where the neuron lazy step goes (ms)", phase_header, phase_rows)
    print_table("Peak step memory (bytes)", ["model", "arena", "intermediates", "neuron", "cpu", "ratio"],
                mem_rows)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
