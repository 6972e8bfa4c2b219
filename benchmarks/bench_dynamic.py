"""Sizes that change under torch.compile(backend="neuron"): compiles and step
time of size-generic programs against one program per size (issue 49).

Part 1, variable-length training: a tiny GPT-2 (2 layers, width 32, dropout
off) trained with SGD on batches of 2 sequences whose lengths vary (40 batches,
34 distinct lengths; --quick: 12 batches, 9 lengths), the same batches for
every peer, each peer a whole run in a process of its own (no compile cache
on disk, nothing built by another peer; the wall time starts at the first
step):

  compile dynamic   torch.compile(model, backend="neuron"): Dynamo's automatic
                    dynamic shapes, size-generic programs after the first change
  compile static    the same with dynamic=False: one program per length
  lazy              the model traced op by op, one mark_step per step
  lazy dynamic      the same with TORCH_NEURON_DYNAMIC_SHAPES=1 (size-generic
                    lazy graphs)
  cpu eager         PyTorch on the CPU

For each: graphs compiled (graph.compile.count), the run's wall time, and its
last loss (every neuron peer's equals the CPU's to 1e-5).

Part 2, steady step at one size (length 32): the compiled training step run
on its size-generic program (the length marked dynamic) against its static
program at that size (tier 1), and the lazy step with and without
TORCH_NEURON_DYNAMIC_SHAPES, interleaved samples of several steps each,
waited for; the ratio generic / static is what a size-generic program costs.

    python benchmarks/bench_dynamic.py [--quick] [--out DIR]
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
import time

os.environ["TORCH_NEURON_CACHE"] = "0"  # every run compiles what it needs (no disk cache)

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_neuron  # noqa: E402
from common import (bench_parser, doc_description, fmt, interleaved, peer_rows, print_table,  # noqa: E402
                    ratios, summary, table, write_results)

VOCAB = 100


def make_model():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=VOCAB, n_positions=128,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    model.config._attn_implementation = "eager"
    return model


def lengths_for(quick: bool) -> list:
    rng = random.Random(0)
    distinct = list(range(6, 15)) if quick else list(range(6, 40))
    rng.shuffle(distinct)
    extra = 3 if quick else 6
    return distinct + [rng.choice(distinct) for _ in range(extra)]


def batches(lengths):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (2, n), generator=g) for n in lengths]


def train_run(peer: str, model, data) -> dict:
    device = "cpu" if peer == "cpu_eager" else "neuron"
    model = copy.deepcopy(model).to(device)
    step = model
    if peer == "compile_dynamic":
        step = torch.compile(model, backend="neuron")
    elif peer == "compile_static":
        step = torch.compile(model, backend="neuron", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch._dynamo.reset()
    torch_neuron._C._clear_compile_cache()
    torch_neuron.metrics.reset()
    losses = []
    start = time.perf_counter()
    for ids in data:
        ids = ids.to(device)
        loss = step(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        if device == "neuron":
            torch_neuron.mark_step()
        losses.append(loss.detach())
    losses = [float(x) for x in losses]  # waits for the last step
    wall = time.perf_counter() - start
    compiles = torch_neuron.metrics.counters().get("graph.compile.count", 0) if device == "neuron" else 0
    return {"wall_s": wall, "compiles": compiles, "losses": losses}


def steady_peers(model, steps: int) -> dict:
    ids = torch.randint(0, VOCAB, (2, 32), generator=torch.Generator().manual_seed(2)).to("neuron")

    def timed_steps(forward, params, setting: dict, x):
        """A peer: warmed up by two steps, then `steps` steps per sample, waited for."""
        opt = torch.optim.SGD(params, lr=0.01)

        def one():
            forward(x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad()
            torch_neuron.mark_step()

        def run() -> float:
            with torch_neuron.config.override(**setting):
                start = time.perf_counter()
                for _ in range(steps):
                    one()
                torch_neuron.wait_device_ops()
                return (time.perf_counter() - start) / steps * 1e3

        with torch_neuron.config.override(**setting):
            for _ in range(2):
                one()
            torch_neuron.wait_device_ops()
        return run

    def make(dynamic: bool):
        m = copy.deepcopy(model).to("neuron")
        x = ids.clone()
        if dynamic:
            torch._dynamo.mark_dynamic(x, 1)
        step = torch.compile(m, backend="neuron", dynamic=None if dynamic else False)
        return timed_steps(step, m.parameters(), {}, x)

    def make_lazy(dynamic: bool):
        m = copy.deepcopy(model).to("neuron")
        return timed_steps(m, m.parameters(), {"TORCH_NEURON_DYNAMIC_SHAPES": "1" if dynamic else "0"}, ids)

    return {"static": make(False), "generic": make(True), "lazy": make_lazy(False),
            "lazy_dynamic": make_lazy(True)}


def run_peer_process(peer: str, quick: bool) -> dict:
    """train_run of `peer` in a fresh process (this script with --peer)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--peer", peer] + (["--quick"] if quick else [])
    env = dict(os.environ)
    if peer == "lazy_dynamic":
        env["TORCH_NEURON_DYNAMIC_SHAPES"] = "1"
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"peer {peer} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--peer" in argv:  # a part-1 child: one whole run, its result as JSON
        peer = argv[argv.index("--peer") + 1]
        quick = "--quick" in argv
        print(json.dumps(train_run(peer, make_model(), batches(lengths_for(quick)))))
        return 0
    args = bench_parser(__doc__).parse_args(argv)
    model = make_model()
    lengths = lengths_for(args.quick)
    runs = {}
    for peer in ("cpu_eager", "compile_dynamic", "compile_static", "lazy", "lazy_dynamic"):
        print(f"  part 1: {peer}, {len(lengths)} steps of {len(set(lengths))} lengths ...", flush=True)
        runs[peer] = run_peer_process(peer, args.quick)
    cpu_losses = runs["cpu_eager"]["losses"]
    for peer, r in runs.items():
        r["max_loss_diff"] = max(abs(a - b) for a, b in zip(r["losses"], cpu_losses))
    rows1 = [[peer, r["compiles"], fmt(r["wall_s"]), fmt(r["wall_s"] / runs["compile_dynamic"]["wall_s"]),
              f"{r['max_loss_diff']:.2e}"] for peer, r in runs.items()]
    header1 = ["peer", "graphs compiled", "wall (s)", "wall / compile dynamic", "max |loss - cpu|"]

    steps = 5 if args.quick else 20
    repeats = 3 if args.quick else 7
    print(f"  part 2: {repeats} interleaved samples of {steps} steady steps per peer ...", flush=True)
    samples = interleaved(steady_peers(model, steps), repeats=repeats, warmup=1)
    ms = {k: summary(v) for k, v in samples.items()}
    relative = {"generic": ratios(samples["generic"], samples["static"]),
                "lazy": ratios(samples["lazy"], samples["static"]),
                "lazy_dynamic": ratios(samples["lazy_dynamic"], samples["static"])}
    rows2 = peer_rows(ms, relative)
    header2 = ["peer", "median", "min", "max", "time / static step"]

    path = write_results("dynamic", {
        "quick": args.quick, "lengths": lengths, "part1": runs, "steady_ms": ms, "steady_relative": relative,
        "command": "python benchmarks/bench_dynamic.py",
        "title": "Sizes that change under torch.compile",
        "description": doc_description(__doc__),
        "tables": [table("variable-length training", header1, rows1),
                   table("steady training step at length 32 (ms)", header2, rows2)],
        "headline": {
            "variable-length training": (
                f"{len(set(lengths))} lengths: {runs['compile_dynamic']['compiles']} graphs compiled with "
                f"size-generic programs, {runs['compile_static']['compiles']} with one program per length, "
                f"{runs['lazy']['compiles']} lazy, {runs['lazy_dynamic']['compiles']} lazy with "
                f"TORCH_NEURON_DYNAMIC_SHAPES=1; wall {fmt(runs['compile_dynamic']['wall_s'])} s against "
                f"{fmt(runs['compile_static']['wall_s'])} s"),
            "steady step": (f"size-generic {fmt(ms['generic']['median'])} ms, static "
                            f"{fmt(ms['static']['median'])} ms per step "
                            f"({fmt(relative['generic']['median'])}x)"),
        },
    }, args.out)
    print_table("variable-length training", header1, rows1)
    print_table("steady training step at length 32 (ms)", header2, rows2)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
