"""Writes docs/ZOO.md (and docs/zoo/by_trait.png) from a runner.py results JSON.

    python tests/zoo/report.py /tmp/zoo.json                 # -> docs/ZOO.md
    python tests/zoo/report.py /tmp/zoo.json --out /tmp/ZOO.md --plot /tmp/by_trait.png
    python tests/zoo/report.py docs/zoo/results-o0.json --other-level docs/zoo/results-o1.json \
        --compiled docs/zoo/results-compile-o0.json \
        --generate docs/zoo/results-generate-o0.json   # regenerate from the committed results

Sections: totals; pass rate by trait value (table and bar plot); failures grouped
by cause (exception type and normalized message, or the kind of mismatch), most
common first, each with its known reason where KNOWN_CAUSES has one; per-model
results; the config-broken entries with their CPU errors; entries not run. With
--other-level, --compiled and --generate, sections on a second sweep at another opt
level, on a sweep under torch.compile(backend="neuron") (runner.py --compile) and on
greedy generate() of the LMs (runner.py --generate).
The pass rate counts valid entries only (config-broken ones are excluded).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

STATUSES = ("pass", "mismatch", "error", "crash", "config-broken")
VALID = ("pass", "mismatch", "error", "crash")
DIMENSIONS = ("front_end", "attention", "position", "norm", "mlp", "structure", "head")

# cause pattern (regex on the cause key) -> the written reason. A failure whose cause
# matches none is listed as "no known reason yet", and fails `runner.py --check`.
# A mismatch is explained only by a measurement (the float64 run of float64_check)
# or a named cause, never by its size alone.
KNOWN_CAUSES: List[Tuple[str, str]] = [
    (r"^mismatch: generate: tokens part where the CPU's two best logits are a near tie",
     "Greedy decoding at a near tie: at the first parting step the CPU's two best logits are closer than "
     "the tolerance (rtol x the scores' scale; the margin is in the entry's record), so float32 rounding "
     "picks either token, and every scores before it agree within the tolerance (generate.py)."),
    (r"histogram_cpu\" not implemented for 'Int'",
     "Mixture-of-experts: `torch.nn.functional.grouped_mm` -> `aten::_grouped_mm` has no lowering and runs "
     "on the CPU fallback, whose `histc` on the Int expert ids fails (issue 16)."),
    (r"do not support dtype Complex",
     "Complex dtypes: rotary embeddings built with `torch.polar` / `view_as_complex` (deepseek-v2, llama4...) "
     "and FNet's FFT need complex64 neuron tensors (issue 16)."),
    (r"Expected reduction dim to be specified for input\.numel\(\) == 0",
     "`max()` over an empty tensor on neuron where the CPU run has a non-empty one (mobilebert; issue 16)."),
    (r"^mismatch: rounding-level",
     "A float64 CPU run of the same steps is as far from the CPU's float32 result as from neuron's (within 4x): "
     "the tolerance is tighter than this model's own float32 rounding (a large gradient summed over many "
     "terms); not a wrong result."),
    (r"^mismatch: sensitive to rounding \(within the spread",
     "The CPU's own float32 result moves as far as neuron's when the initial weights move by one ulp "
     "(run_model.perturbed_check: 3 such CPU runs; neuron within 4x of the furthest). At opt level 0 "
     "neuron's results differ from the CPU's by an ulp or two (a tier-0 program materializes transposes, "
     "so `x @ w.t()` runs BLAS on a copied weight: the CPU's own `mm(x, w.t().contiguous())` differs from "
     "`mm(x, w.t())` by 9.5e-7 on values of 4), and a max-pool window with two equal inputs or a ReLU input "
     "of exactly 0.0 then goes the other way (resnet10t at step 3: the CPU's window holds 1.0430272817611694 "
     "twice, neuron's 1.0430269 and 1.0430270, so the gradient reaches the neighbouring pixel and the stem "
     "batch norms' biases move 1.9e-6; one-ulp weight changes move them 1.3e-5 on the CPU alone). Chaotic "
     "training does the same (mnasnet_small: the CPU's step-3 loss moves by 0.22 under one-ulp weight "
     "changes, neuron's by 0.26). A float64 run misses it: it decides the ties as the CPU's float32 run "
     "does. Not a wrong result."),
    (r"^mismatch: after step 1 only, in a training run that diverges",
     "Step 1 matches (logits and every gradient, from the same weights), but the CPU's own run diverges "
     "(its loss grows 4x or more in 3 steps at lr 0.1), and from step 2 on the differences of float32 "
     "rounding are amplified: the float64 run is as far from the CPU's float32 result as the tolerance "
     "allows many times over (mobilenet_v2 at opt level 1: loss 1.25 -> 2.74 -> 24.5 on the CPU, 18.3 on "
     "neuron; the float64 run's step-3 loss differs from the CPU's float32 by 1.9). Not a wrong result."),
    (r"^mismatch: compiles did not settle",
     "Mixture-of-experts with an eager per-expert loop (`expert_mask.nonzero()` and `torch.where(mask)`, so each "
     "expert's token count is data): the routing changes as the weights train, so the graph shapes change "
     "and step 3 builds new graphs (dbrx, jetmoe, longcat-flash, switch-transformers, openai-privacy-filter). "
     "Values match the CPU; only compile counts fail to settle."),
    # Under torch.compile(backend="neuron") (runner.py --compile).
    (r"^fails on the CPU too under torch\.compile\(aot_eager\)",
     "torch.compile itself fails on this model: one CPU step under `torch.compile(backend=\"aot_eager\")` (Dynamo "
     "and AOTAutograd, no neuron) raises as well; a limitation of torch.compile or of the model's code under it, "
     "not of neuron."),
]


def normalize(msg: str) -> str:
    """A message with the instance details taken out, so one cause groups its models."""
    m = msg.strip()
    m = re.sub(r"0x[0-9a-fA-F]+", "0x…", m)
    m = re.sub(r"\[[-0-9, ]+\]", "[…]", m)
    m = re.sub(r"\([-0-9, ]+\)", "(…)", m)
    m = re.sub(r"(?<![A-Za-z0-9_:.])\d+(\.\d+)?(e[-+]?\d+)?(?![A-Za-z0-9_])", "N", m)
    m = re.sub(r"'[^']{40,}'", "'…'", m)
    return m[:220]


# torch_neuron/_compile_backend.py's message for a graph that cannot be one program:
# grouped by the op, without the model's source line.
_NOT_ONE_PROGRAM = re.compile(r"(an? \w+ graph) cannot compile as one program: (\S+)")


def cause_of(r: Dict[str, Any]) -> str:
    st = r["status"]
    if st == "error":
        e = r.get("error", {})
        cpu = r.get("cpu_compile") or {}
        if cpu.get("ok") is False and (cpu.get("error") or {}).get("type") == e.get("type"):
            c = cpu.get("error") or {}
            return f"fails on the CPU too under torch.compile(aot_eager): {c.get('type', '?')}: " \
                   f"{normalize(c.get('message', ''))}"
        m = _NOT_ONE_PROGRAM.search(e.get("message", ""))
        if m:
            return f"{e.get('type', '?')}: {m.group(1)} cannot compile as one program: {m.group(2)}"
        msg = e.get("message", "")
        # Dynamo's wrapper of an error the backend raised: group by that error.
        msg = re.sub(r"^backend='\w+' raised: ", "", msg)
        return f"{e.get('type', '?')}: {normalize(msg)}"
    if st == "crash":
        how = r.get("crash", {}).get("how", "")
        return "crash: timed out" if "timed out" in how else f"crash: {normalize(how)}"
    if st == "config-broken":
        e = r.get("cpu_error", {})
        return f"{e.get('type', '?')}: {normalize(e.get('message', ''))}"
    if st == "mismatch" and r.get("mode") == "generate":
        if r.get("near_tie"):
            return "mismatch: generate: tokens part where the CPU's two best logits are a near tie"
        return "mismatch: generate: " + re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", r.get("mismatch", ""))[:120]
    if st == "mismatch":
        cmp = r.get("compare", {})
        if (r.get("float64_check") or {}).get("rounding_level"):
            return "mismatch: rounding-level (no further from a float64 run than the CPU's float32 is)"
        if (r.get("perturbed_check") or {}).get("within_spread"):
            return "mismatch: sensitive to rounding (within the spread of CPU runs from weights moved by one ulp)"
        if r.get("draws_random"):
            # Both devices drew from the same seed; no reason is written for this
            # cause, since it is a device bug until shown otherwise (cpubone_nano:
            # dropout of a tensor the CPU holds channels_last, issue 50).
            return "mismatch: in a forward that draws random numbers"
        if diverging_after_step_one(r):
            return "mismatch: after step 1 only, in a training run that diverges on the CPU"
        if not cmp.get("ok", True):
            probs = cmp.get("problems") or []
            if probs:
                kind = re.sub(r"^(grad|param) \S+: ", r"\1 ", probs[0])
                return f"mismatch: {kind}"
            w = cmp.get("worst", {})
            score = w.get("score", 0)
            score = float(score) if not isinstance(score, str) else float("inf")
            tensor = str(w.get("tensor", "?"))
            kind = tensor.split(" ")[0].split("[")[0]
            why = w.get("why", "values differ")
            if why != "values differ":
                return f"mismatch: {why} in {kind}"
            size = "marginal (<= 10x tolerance)" if score <= 10 else ("large (> 1000x tolerance)" if score > 1000
                                                                      else "moderate (10-1000x tolerance)")
            return f"mismatch: {size}, worst in {kind}"
        return "mismatch: compiles did not settle"
    return st


def diverging_after_step_one(r: Dict[str, Any]) -> bool:
    """Step 1 (the logits and every gradient, from the same weights) matched, the
    first failures come after an optimizer step, and the CPU's own loss grew at
    least 4x in 3 steps: a diverging run, where steps amplify rounding."""
    cmp = r.get("compare", {})
    failed = cmp.get("failed") or []  # in check order (losses, logits, gradients, parameters), first 20
    if not failed or cmp.get("problems") or any("step 1]" in f for f in failed):
        return False
    # A truncated list shows every step-1 check only if it reaches the parameters.
    if cmp.get("n_failed", 0) > len(failed) and not any(f.startswith("param ") for f in failed):
        return False
    losses = r.get("losses_cpu") or []
    return len(losses) >= 2 and losses[0] > 0 and losses[-1] >= 4 * losses[0]


def known_reason(cause: str) -> str:
    """The written reason for a failure cause, or "" (an unexplained failure)."""
    for pat, why in KNOWN_CAUSES:
        if re.search(pat, cause):
            return why
    return ""


def _fmt(x) -> str:
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    if x == 0:
        return "0"
    return f"{x:.2g}"


def _graphs_per_step(r) -> str:
    """Graphs per training step, or per run of an inference entry (two runs)."""
    c = r.get("compiles_per_step") or r.get("compiles_per_run")
    if not c:
        return ""
    d = r.get("disk_hits_per_step") or r.get("disk_hits_per_run") or [0] * len(c)
    return "/".join(str(a + b) for a, b in zip(c, d))


def library_of(name: str) -> str:
    """catalog_libs names its entries "<library>-<model>/<head>"; the rest are transformers'."""
    head = name.split("/", 1)[0]
    for lib in ("diffusers", "sentence_transformers", "timm"):
        if head.startswith(lib + "-"):
            return lib
    return "transformers"


def render_by_library(results: Dict[str, Any]) -> List[str]:
    table: Dict[Tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    for name, r in results.items():
        table[(library_of(name), r.get("mode", "train"))][r["status"]] += 1
    out = ["## By library and mode", "",
           "Mode: train (3 SGD steps, as above) or infer (catalog_libs.py: a scheduler's sampling loop, or "
           "sentence-transformers' encode; run twice on neuron, the first run's outputs compared with the CPU's, "
           "the second's equal to the first's bit for bit, and the second builds no graph).", "",
           "| library | mode | valid | pass | mismatch | error | crash | config-broken | pass rate |",
           "|---|---|---|---|---|---|---|---|---|"]
    for (lib, mode), c in sorted(table.items()):
        valid = sum(c[s] for s in VALID)
        rate = f"{100.0 * c['pass'] / valid:.1f}%" if valid else "-"
        out.append(f"| {lib} | {mode} | {valid} | {c['pass']} | {c['mismatch']} | {c['error']} | {c['crash']} | "
                   f"{c['config-broken']} | {rate} |")
    out.append("")
    return out


def _fallbacks(r, n=3) -> str:
    fb = r.get("fallback_ops") or {}
    items = sorted(fb.items(), key=lambda kv: (-kv[1], kv[0]))
    s = ", ".join(f"`{k}`×{v}" for k, v in items[:n])
    return s + (f" +{len(items) - n}" if len(items) > n else "")


def by_trait(results: Dict[str, Any], traits_of) -> Dict[Tuple[str, str], collections.Counter]:
    table: Dict[Tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    for name, r in results.items():
        if r["status"] not in VALID:
            continue
        t = r.get("traits") or traits_of(name)
        if not t:
            continue
        for dim in DIMENSIONS:
            for v in t.get(dim, []):
                table[(dim, v)][r["status"]] += 1
    return table


def plot(table, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(table.items(), key=lambda kv: (DIMENSIONS.index(kv[0][0]), kv[0][1]))
    labels = [f"{d}={v} ({sum(c.values())})" for (d, v), c in rows]
    rates = [100.0 * c["pass"] / max(1, sum(c.values())) for _, c in rows]
    colors = [f"C{DIMENSIONS.index(d)}" for (d, _), _ in rows]
    fig, ax = plt.subplots(figsize=(9, max(4, 0.22 * len(rows))))
    ax.barh(range(len(rows)), rates, color=colors)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("pass rate, % of valid entries (count in parentheses)")
    ax.set_title("Model zoo: pass rate by trait value")
    ax.axvline(95, color="gray", linestyle="--", linewidth=0.8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_other_level(other: Dict[str, Any]) -> List[str]:
    """A section on a second sweep (another opt level, often a part of the zoo):
    totals, pass rate, and each failure with its cause and reason."""
    meta, results = other.get("meta", {}), other.get("results", {})
    run = {n: r for n, r in results.items() if not r.get("from_catalog")}
    counts = collections.Counter(r["status"] for r in run.values())
    valid = sum(counts[s] for s in VALID)
    rtol = 1e-4 if meta.get("opt_level") == 0 else 1e-3
    out = [f"## At opt level {meta.get('opt_level')}", "",
           f"A second sweep at opt level {meta.get('opt_level')} (rtol {rtol:g}, the same atol rule), in the "
           f"runner's order (the covering subset, then each architecture's first head, ...), "
           f"{meta.get('jobs')} job(s), {meta.get('wall_s', 0) / 60:.0f} min "
           f"({meta.get('started', '?')} to {meta.get('finished', '?')}; git HEAD {meta.get('git_head', '?')}): "
           f"**{len(run)}** entries run, {len(meta.get('not_run', []))} not reached.", "",
           "| status | entries |", "|---|---|"]
    out += [f"| {s} | {counts[s]} |" for s in STATUSES]
    rate = 100.0 * counts["pass"] / valid if valid else 0.0
    out += ["", f"Pass rate over valid entries: **{counts['pass']}/{valid} = {rate:.1f}%**.", ""]
    failed = sorted(n for n, r in run.items() if r["status"] in ("mismatch", "error", "crash"))
    for n in failed:
        r = run[n]
        cause = cause_of(r)
        why = known_reason(cause)
        out.append(f"- `{n}`: {cause}" + (f" (known: {why[:160]}...)" if why else " (no known reason yet)"))
    if failed:
        out.append("")
    return out


def _per_step(xs) -> str:
    return "/".join(str(x) for x in xs) if xs else ""


def render_compiled(compiled: Dict[str, Any], eager_by_level: Dict[Any, Dict[str, Any]]) -> List[str]:
    """A section on a sweep under torch.compile(backend="neuron") (runner.py --compile):
    totals, pass rate, entries that pass eagerly but not compiled, Dynamo's counts, and
    each failure with its cause and reason, grouped by cause."""
    meta, results = compiled.get("meta", {}), compiled.get("results", {})
    run = {n: r for n, r in results.items() if not r.get("from_catalog")}
    counts = collections.Counter(r["status"] for r in run.values())
    valid = sum(counts[s] for s in VALID)
    level = meta.get("opt_level")
    rtol = 1e-4 if level == 0 else 1e-3
    fallback = ("on: a graph that cannot be one program runs op by op" if meta.get("compile_fallback") else
                "off (the default): a graph that cannot be one program raises NotImplementedError naming the op, "
                "so each such graph is an error below, with its op")
    out = ['## Under torch.compile(backend="neuron")', "",
           f"Each entry's neuron copy runs its forward as `torch.compile(model, backend=\"neuron\")` "
           f"(`runner.py --compile`); the CPU reference stays eager; the same 3 SGD steps and comparisons, except that a "
           f"gradient of zeros on neuron where the CPU has none matches (a compiled graph is one autograd node, "
           f"whose backward gives zeros to the parameters of outputs the loss does not use; the CPU's `aot_eager` "
           f"does the same). Opt level "
           f"{level} (rtol {rtol:g}), TORCH_NEURON_COMPILE_FALLBACK {fallback}. Dynamo is reset for each entry "
           f"(each runs in a process of its own) and its recompile limit raised to 256. Settled also means step 3 "
           f"met no new Dynamo graph and traced no region. In the runner's order, {meta.get('jobs')} job(s), "
           f"{meta.get('wall_s', 0) / 60:.0f} min ({meta.get('started', '?')} to {meta.get('finished', '?')}; "
           f"git HEAD {meta.get('git_head', '?')}): **{len(run)}** entries run, "
           f"{len(meta.get('not_run', []))} not reached. The git HEAD is the last run's: a resumed sweep "
           f"(`--resume --force` reruns entries in place) holds entries of several builds, named here "
           f"(extension mtime: entries): "
           + ", ".join(f"{b}: {n}" for b, n in sorted(collections.Counter(
               r.get("build") or "not recorded" for r in run.values()).items())) + ".", "",
           "| status | entries |", "|---|---|"]
    out += [f"| {s} | {counts[s]} |" for s in STATUSES]
    rate = 100.0 * counts["pass"] / valid if valid else 0.0
    out += ["", f"Pass rate over valid entries: **{counts['pass']}/{valid} = {rate:.1f}%**."]
    subset = meta.get("covering_subset") or []
    sub = [run[n] for n in subset if n in run and run[n]["status"] in VALID]
    if sub:
        out += ["", f"Covering subset: {sum(r['status'] == 'pass' for r in sub)}/{len(sub)} pass."]
    eager = (eager_by_level.get(level) or {}).get("results", {})
    if eager:
        both = [n for n in run if n in eager and eager[n]["status"] in VALID and run[n]["status"] in VALID]
        worse = sorted(n for n in both if eager[n]["status"] == "pass" and run[n]["status"] != "pass")
        better = sorted(n for n in both if eager[n]["status"] != "pass" and run[n]["status"] == "pass")
        out += ["", f"Against the eager sweep at opt level {level}: of {len(both)} entries in both, "
                f"{len(worse)} pass eagerly but not under compile, {len(better)} pass only under compile"
                + (": " + ", ".join(f"`{n}`" for n in better) if better else "") + "."]
    dyn = {n: r["dynamo"] for n, r in run.items() if r.get("dynamo") and r["status"] in VALID}
    if dyn:
        breaking = sum(1 for d in dyn.values() if d.get("graph_breaks"))
        op_by_op = sorted(n for n, d in dyn.items() if sum(d.get("op_by_op") or []))
        aot = sorted(n for n, d in dyn.items() if d.get("aot_not_ok"))
        out += ["", f"Dynamo: {breaking} of {len(dyn)} entries have graph breaks; {len(op_by_op)} ran a graph op by op "
                f"(inputs not all on one neuron device, or a result on another device)"
                + (": " + ", ".join(f"`{n}`" for n in op_by_op) if op_by_op else "")
                + f"; {len(aot)} had a graph AOTAutograd could not take (Dynamo ran it uncompiled)"
                + (": " + ", ".join(f"`{n}`" for n in aot) if aot else "") + "."]
    groups: Dict[str, List[str]] = collections.defaultdict(list)
    for n, r in sorted(run.items()):
        if r["status"] in ("mismatch", "error", "crash"):
            groups[cause_of(r)].append(n)
    if groups:
        out += ["", "### Under compile: failures by cause", ""]
    for cause, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        why = known_reason(cause)
        out += [f"- **{cause}** ({len(names)}): " + (f"known: {why}" if why else "no known reason yet."), ""]
        # An error's cause is its message; a mismatch's detail names its tensor.
        brief = []
        for n in names:
            r = run[n]
            phase = (r.get("error") or {}).get("phase", "")
            eager_st = (eager.get(n) or {}).get("status")
            extra = "; ".join(x for x in (phase, f"eager: {eager_st}" if eager_st else "") if x)
            if r["status"] == "mismatch":
                out.append(f"  - `{n}`: {r.get('mismatch', '')[:300]}" + (f" ({extra})" if extra else ""))
            else:
                brief.append(f"`{n}`" + (f" ({extra})" if extra else ""))
        if brief:
            out.append("  " + ", ".join(brief))
        out.append("")
    out += ["", "### Under compile: per entry", "",
            "Per step 1/2/3: Dynamo graphs handed to the backend (forward, backward), regions traced into "
            "programs, region calls run as programs; graph breaks Dynamo counted (the most frequent reason).", "",
            "| entry | status | Dynamo graphs | traced | run | graph breaks | neuron s |", "|---|---|---|---|---|---|---|"]
    for n, r in sorted(run.items()):
        d = r.get("dynamo") or {}
        reasons = d.get("graph_break_reasons") or []
        brk = str(d.get("graph_breaks", "")) + (f" ({reasons[0][0][:80]})" if reasons else "")
        brk = brk.replace("|", "\\|").replace("\n", " ")
        out.append(f"| `{n}` | {r['status']} | {_per_step(d.get('graphs'))} | {_per_step(d.get('traces'))} | "
                   f"{_per_step(d.get('runs'))} | {brk} | {_fmt(r.get('neuron_s'))} |")
    out.append("")
    return out


def render(data: Dict[str, Any], plot_rel: str, traits_of, other: Optional[Dict[str, Any]] = None,
           compiled: Optional[Dict[str, Any]] = None, generated: Optional[Dict[str, Any]] = None) -> str:
    meta, results = data.get("meta", {}), data.get("results", {})
    counts = collections.Counter(r["status"] for r in results.values())
    valid = sum(counts[s] for s in VALID)
    out: List[str] = []
    w = out.append
    w("# Model zoo results")
    w("")
    w("Generated by `tests/zoo/report.py` from a `tests/zoo/runner.py` results file; do not edit by hand. "
      "See DESIGN.md \"Model zoo\" and `tests/zoo/` for how entries are built, run and compared.")
    w("")
    rtol = 1e-4 if meta.get("opt_level") == 0 else 1e-3
    w(f"- opt level **{meta.get('opt_level')}**: |neuron - cpu| <= atol + rtol x |cpu| with rtol {rtol:g} and, per "
      "tensor, atol = rtol x max(max|cpu tensor|, 1e-3 x max|cpu, all tensors of its kind|) (see `run_model.py`)")
    w(f"- transformers {meta.get('transformers')}, torch {meta.get('torch')}; {meta.get('jobs')} jobs, "
      f"timeout {meta.get('timeout_s')} s per entry; wall time {meta.get('wall_s', 0) / 60:.1f} min "
      f"({meta.get('started', '?')} to {meta.get('finished', '?')})")
    w("- a run: build on the CPU from seed 0, deep-copy to neuron, 3 SGD steps (lr 0.1, or 1e-3 for the two "
      "diffusers UNets that diverge at 0.1) on both with the same "
      "batch; compared: the 3 losses, step-1 logits, every parameter's step-1 gradient by name, every parameter "
      "after step 3")
    builds = collections.Counter(r.get("build") or "not recorded" for r in results.values()
                                 if r["status"] != "config-broken")
    if builds:
        w(f"- torch_neuron builds seen (extension mtime: entries): " +
          ", ".join(f"{b}: {n}" for b, n in sorted(builds.items())) + f"; git HEAD {meta.get('git_head', '?')}")
    w("")
    w("## Totals")
    w("")
    w(f"Catalog: **{meta.get('catalog_size', len(results))}** (architecture, head) entries; "
      f"recorded here: {len(results)}; not run (sweep cut short): {len(meta.get('not_run', []))}.")
    w("")
    w("| status | entries |")
    w("|---|---|")
    for s in STATUSES:
        w(f"| {s} | {counts[s]} |")
    w("")
    rate = 100.0 * counts["pass"] / valid if valid else 0.0
    w(f"Pass rate over valid entries (config-broken excluded): **{counts['pass']}/{valid} = {rate:.1f}%**.")
    subset = meta.get("covering_subset") or []
    if subset:
        sub_valid = [results[n] for n in subset if n in results and results[n]["status"] in VALID]
        sub_pass = sum(1 for r in sub_valid if r["status"] == "pass")
        w("")
        w(f"Covering subset ({len(subset)} entries, every trait value at least once): {sub_pass}/{len(sub_valid)} "
          f"pass: " + ", ".join(f"`{n}`" for n in subset) + ".")
    w("")
    out.extend(render_by_library(results))
    if other is not None:
        out.extend(render_other_level(other))
    if compiled is not None:
        by_level = {d.get("meta", {}).get("opt_level"): d for d in (other, data) if d is not None}
        out.extend(render_compiled(compiled, by_level))
    if generated is not None:
        import generate

        out.extend(generate.render(generated))

    table = by_trait(results, traits_of)
    w("## Pass rate by trait value")
    w("")
    w(f"![pass rate by trait]({plot_rel})")
    w("")
    w("| trait | value | valid | pass | mismatch | error | crash | pass rate |")
    w("|---|---|---|---|---|---|---|---|")
    for (dim, v), c in sorted(table.items(), key=lambda kv: (DIMENSIONS.index(kv[0][0]), kv[0][1])):
        n = sum(c.values())
        w(f"| {dim} | {v} | {n} | {c['pass']} | {c['mismatch']} | {c['error']} | {c['crash']} | "
          f"{100.0 * c['pass'] / n:.0f}% |")
    w("")

    groups: Dict[str, List[str]] = collections.defaultdict(list)
    for name, r in sorted(results.items()):
        if r["status"] in ("mismatch", "error", "crash"):
            groups[cause_of(r)].append(name)
    w("## Failures by cause")
    w("")
    w("Most common first. The cause is the exception type and its first line with numbers and shapes "
      "normalized (errors), the size and place of the worst difference (mismatches), or how the child died "
      "(crashes).")
    w("")
    for i, (cause, names) in enumerate(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])), 1):
        why = known_reason(cause)
        w(f"### {i}. {cause} ({len(names)})")
        w("")
        w(f"Reason: {why}" if why else "Reason: no known reason yet.")
        w("")
        for n in names:
            r = results[n]
            detail = (r.get("mismatch") or (r.get("error") or {}).get("message") or
                      (r.get("crash") or {}).get("how") or "")
            where = (r.get("error") or {}).get("where", "")
            phase = (r.get("error") or {}).get("phase", "")
            extra = f" ({phase}; {where})" if where or phase else ""
            w(f"- `{n}`: {detail[:300]}{extra}")
        w("")

    w("## Per-model results")
    w("")
    w("Graphs per step: graphs compiled or loaded from the disk cache in steps 1/2/3 (a settled model builds "
      "none in step 3). Fallback ops: CPU-fallback runs over the 3 steps, most frequent first.")
    w("")
    w("| entry | status | max abs | max rel | graphs per step | fallback ops | neuron s |")
    w("|---|---|---|---|---|---|---|")
    for name, r in sorted(results.items()):
        if r["status"] == "config-broken":
            continue
        w(f"| `{name}` | {r['status']} | {_fmt(r.get('max_abs'))} | {_fmt(r.get('max_rel'))} | "
          f"{_graphs_per_step(r)} | {_fallbacks(r)} | {_fmt(r.get('neuron_s'))} |")
    w("")

    w("## Config-broken entries")
    w("")
    w("These fail on the CPU with their tiny config (or two CPU runs from the same seed differ, so there is "
      "nothing to compare); they are excluded from the pass rate. Grouped by CPU error.")
    w("")
    broken: Dict[str, List[str]] = collections.defaultdict(list)
    for name, r in sorted(results.items()):
        if r["status"] == "config-broken":
            msg = (r.get("cpu_error") or {}).get("message", "")
            broken[normalize(re.sub(r" \[[^\]]*\]$", "", msg))[:160]].append(name)
    for msg, names in sorted(broken.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        w(f"- {msg} ({len(names)}): " + ", ".join(f"`{n}`" for n in names))
    w("")
    not_run = meta.get("not_run") or []
    if not_run:
        w("## Not run")
        w("")
        w(f"{len(not_run)} entries were not reached before the sweep's time budget: "
          + ", ".join(f"`{n}`" for n in not_run) + ".")
        w("")
    return "\n".join(out)


def keep_results(data: Dict[str, Any], source_path: str, folder: str) -> None:
    """A compact copy of a results file (per-step counters dropped) in `folder`."""
    meta = data.get("meta", {})
    mode = "compile-" if meta.get("compile") else "generate-" if meta.get("generate") else ""
    path = os.path.join(folder, f"results-{mode}o{meta.get('opt_level', 'x')}.json")
    if os.path.abspath(path) == os.path.abspath(source_path):
        return
    os.makedirs(folder, exist_ok=True)
    slim = {"meta": data.get("meta", {}),
            "results": {n: {k: v for k, v in r.items() if k not in ("step_counters", "setup_counters")}
                        for n, r in sorted(data.get("results", {}).items())}}
    with open(path + ".tmp", "w") as f:
        json.dump(slim, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    os.replace(path + ".tmp", path)
    print(f"wrote {path}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="results JSON from runner.py")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "ZOO.md"))
    p.add_argument("--plot", default=None, help="bar plot path (default: docs/zoo/by_trait.png beside --out)")
    p.add_argument("--other-level", default=None,
                   help="a second results file (another opt level, whole or part of the zoo): a section of its own")
    p.add_argument("--compiled", default=None,
                   help='a results file of runner.py --compile (torch.compile(backend="neuron")): a section of its own')
    p.add_argument("--generate", default=None,
                   help="a results file of runner.py --generate (greedy generate() of the LMs): a section of its own")
    p.add_argument("--keep", default=None,
                   help="a folder to also write the results files into, without per-step counters, as "
                        "results-o<level>.json (default: zoo/ beside --out; 'none' to skip), so the report "
                        "can be regenerated from what is committed")
    args = p.parse_args(argv)
    with open(args.results) as f:
        data = json.load(f)
    plot_path = args.plot or os.path.join(os.path.dirname(os.path.abspath(args.out)), "zoo", "by_trait.png")
    cached = {}
    try:
        import traits

        if os.path.exists(traits.TRAITS_JSON):
            with open(traits.TRAITS_JSON) as f:
                cached = json.load(f).get("entries", {})
    except Exception:
        cached = {}

    def traits_of(name):
        return (cached.get(name) or {}).get("traits")

    table = by_trait(data.get("results", {}), traits_of)
    if table:
        plot(table, plot_path)
    rel = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(args.out)))
    other = None
    if args.other_level:
        with open(args.other_level) as f:
            other = json.load(f)
    compiled = None
    if args.compiled:
        with open(args.compiled) as f:
            compiled = json.load(f)
    generated = None
    if args.generate:
        with open(args.generate) as f:
            generated = json.load(f)
    text = render(data, rel, traits_of, other, compiled, generated)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    if args.keep != "none":
        keep_dir = args.keep or os.path.join(os.path.dirname(os.path.abspath(args.out)), "zoo")
        for source_path, results_data in ((args.results, data), (args.other_level, other), (args.compiled, compiled),
                                            (args.generate, generated)):
            if results_data is not None:
                keep_results(results_data, source_path, keep_dir)
    print(f"wrote {args.out} and {plot_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
