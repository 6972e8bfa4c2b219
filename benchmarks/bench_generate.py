"""generate() on neuron, in two parts.

Without mark_step: per-token decode time and nodes executed per token of a tiny
GPT-2 (greedy, default dynamic cache), beside the same loop with a mark_step
per token (a stopping criterion that calls it) and CPU eager.

With the static cache (``cache_implementation="static"``), where generate()
compiles its decoding step with torch.compile(backend="neuron") by itself:
per-token time of a tiny Llama (greedy), four peers: compiled (the decoding
step runs as one program, nothing traced), lazy (``disable_compile=True``: the
step traced every token), eager mode (TORCH_NEURON_MODE=eager, not compiled)
and CPU eager (the static cache, not compiled, as generate() does on the CPU).
A call's time over its new tokens (the prompt's forward included).

generate() reads a value each token (its stopping criteria) and never calls
mark_step. A read materializes every live tensor its graph computes and keeps
the values it computes for pending tensors off its way (the KV cache, the
attention mask), so each token's graph holds that token's work only: nodes per
token stay flat, as with a mark_step per token. Each peer generates the same
tokens as the CPU (checked); times are per generated token after a first call
that compiles every cache length.

    python benchmarks/bench_generate.py [--quick] [--out DIR]

Every peer generates the CPU's tokens (checked; the exit status is 1 if not).
"""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (bench_parser, doc_description, fmt, interleaved, peer_rows, print_table,  # noqa: E402
                    ratios, summary, table, write_results)

import torch_neuron  # noqa: E402


def build(tokens: int):
    from transformers import GPT2Config, GPT2LMHeadModel, StoppingCriteria, StoppingCriteriaList

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=128)
    model = GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, 100, (1, 5), generator=torch.Generator().manual_seed(1))

    class Recorder(StoppingCriteria):
        """Never stops; records graph.execute.nodes at each token, and with
        `step` ends the step first (the mark_step-per-token peer)."""

        def __init__(self, step: bool):
            self.step, self.nodes = step, []

        def __call__(self, input_ids, scores, **kwargs):
            if self.step:
                torch_neuron.mark_step()
            self.nodes.append(torch_neuron.metrics.counter("graph.execute.nodes"))
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def generate(device: str, step: bool = False):
        recorder = Recorder(step)
        with torch.no_grad():
            out = model.to(device).generate(prompt.to(device), max_new_tokens=tokens, min_new_tokens=tokens,
                                            do_sample=False, pad_token_id=0,
                                            stopping_criteria=StoppingCriteriaList([recorder]))
        return out.cpu(), recorder.nodes

    return generate


def build_static(tokens: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(3, 100, (1, 5), generator=torch.Generator().manual_seed(1))

    def generate(device: str, compiled: bool = True):
        with torch.no_grad():
            out = model.to(device).generate(prompt.to(device), max_new_tokens=tokens, min_new_tokens=tokens,
                                            do_sample=False, cache_implementation="static",
                                            disable_compile=not compiled)
        return out.cpu()

    return generate


def static_cache_part(tokens: int, repeats: int) -> dict:
    generate = build_static(tokens)
    expected = generate("cpu", compiled=False)
    peers = {"neuron_compiled": ("neuron", True, False), "neuron_lazy": ("neuron", False, False),
             "neuron_eager": ("neuron", False, True), "cpu_eager": ("cpu", False, False)}
    checks = {}

    def timed(device: str, compiled: bool, eager: bool):
        def run() -> float:
            if eager:
                torch_neuron.set_mode("eager")
            start = time.perf_counter()
            out = generate(device, compiled)
            elapsed = time.perf_counter() - start
            if eager:
                torch_neuron.set_mode("lazy")
            run.out = out
            return elapsed / tokens * 1e3
        return run

    runs = {name: timed(*spec) for name, spec in peers.items()}
    for name, run in runs.items():  # compiles every shape, traces the step
        run()
        checks[name] = bool(torch.equal(run.out, expected))
    print(f"  tiny Llama, static cache, {tokens} tokens, {repeats} interleaved calls per peer ...", flush=True)
    samples = interleaved(runs, repeats=repeats, warmup=1)
    for name, run in runs.items():
        checks[name] = checks[name] and bool(torch.equal(run.out, expected))
    ms = {k: summary(v) for k, v in samples.items()}
    relative = {k: ratios(v, samples["neuron_compiled"]) for k, v in samples.items() if k != "neuron_compiled"}
    return {"token_ms": ms, "relative": relative, "tokens_equal_cpu": checks}


def main(argv=None) -> int:
    args = bench_parser(__doc__).parse_args(argv)
    tokens = 16 if args.quick else 32
    repeats = 3 if args.quick else 7
    generate = build(tokens)
    expected, _ = generate("cpu")
    per_token = {}
    checks = {}
    for name, device, step in (("neuron", "neuron", False), ("neuron_mark_step", "neuron", True)):
        out, nodes = generate(device, step)  # compiles every cache length
        out, nodes = generate(device, step)
        per_token[name] = [b - a for a, b in zip(nodes, nodes[1:])]
        checks[name] = bool(torch.equal(out, expected))

    def timed(device: str, step: bool = False):
        def run() -> float:
            start = time.perf_counter()
            generate(device, step)
            return (time.perf_counter() - start) / tokens * 1e3
        return run

    print(f"  tiny GPT-2, {tokens} tokens, {repeats} interleaved calls per peer ...", flush=True)
    samples = interleaved({"neuron": timed("neuron"), "neuron_mark_step": timed("neuron", True),
                           "cpu_eager": timed("cpu")}, repeats=repeats, warmup=1)
    ms = {k: summary(v) for k, v in samples.items()}
    relative = {k: ratios(v, samples["neuron"]) for k, v in samples.items() if k != "neuron"}
    rows = peer_rows(ms, relative)
    static = static_cache_part(tokens, repeats)
    static_rows = peer_rows(static["token_ms"], static["relative"])
    static_rows = [row + ["yes" if static["tokens_equal_cpu"][row[0]] else "NO"] for row in static_rows]
    node_rows = [[name, nodes[0], nodes[len(nodes) // 2], nodes[-1], "yes" if checks[name] else "NO"]
                 for name, nodes in per_token.items()]
    path = write_results("generate", {
        "quick": args.quick, "tokens": tokens, "token_ms": ms, "relative": relative,
        "nodes_per_token": per_token, "tokens_equal_cpu": checks, "static_cache": static,
        "command": "python benchmarks/bench_generate.py",
        "title": "generate() without mark_step",
        "description": doc_description(__doc__),
        "tables": [table("Per-token time (ms) and peer time / neuron time", ["peer", "median", "min", "max",
                                                                              "time / neuron"], rows),
                   table("Nodes executed per token", ["peer", "token 2", "middle", "last", "tokens = CPU's"],
                         node_rows),
                   table("Static cache, tiny Llama: per-token time (ms) and peer time / compiled time",
                         ["peer", "median", "min", "max", "time / compiled", "tokens = CPU's"], static_rows)],
        "headline": {"generate": (
            f"tiny GPT-2, {tokens} tokens: neuron {fmt(ms['neuron']['median'])} ms per token without "
            f"mark_step, {fmt(relative['neuron_mark_step']['median'])}x that with a mark_step per token; "
            f"nodes per token {per_token['neuron'][0]} -> {per_token['neuron'][-1]}"),
            "generate, static cache": (
                f"tiny Llama, {tokens} tokens: compiled (backend neuron) "
                f"{fmt(static['token_ms']['neuron_compiled']['median'])} ms per token; peer time / its time: "
                + ", ".join(f"{k} {fmt(v['median'])}x" for k, v in static["relative"].items())
                + " (above 1: compiled is faster)")},
    }, args.out)
    print_table("Per-token time (ms)", ["peer", "median", "min", "max", "time / neuron"], rows)
    print_table("Nodes executed per token", ["peer", "token 2", "middle", "last", "tokens = CPU's"], node_rows)
    print_table("Static cache, tiny Llama: per-token time (ms)",
                ["peer", "median", "min", "max", "time / compiled", "tokens = CPU's"], static_rows)
    print(f"\nresults: {path}")
    return 0 if all(checks.values()) and all(static["tokens_equal_cpu"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
