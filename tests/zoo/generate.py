"""The zoo's generate mode (runner.py --generate, run_model.py --generate): greedy
`generate()` of every causal and seq2seq LM entry on neuron against the CPU.

For each entry, two caches: transformers' default (a cache that grows by one
position per token) and `cache_implementation="static"` (fixed length; on a
neuron device transformers compiles its decoding step with
torch.compile(backend="neuron") by itself). Each runs NEW_TOKENS tokens from a
PROMPT-token prompt, twice on neuron:
- the tokens of both calls must equal the CPU's, token by token;
- the second call must build no graph (compiles and disk reads counted, and
  Dynamo's traces): generation settles;
- where the tokens part, the CPU's scores at that step say whether it was a near
  tie (the CPU's two best logits closer than the tolerance, so float32 rounding
  picks either) or a real difference. The scores before the parting step are
  compared too.
A cache the CPU cannot generate with (the model does not support it) is
recorded as such, with the CPU's error, and does not count.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List

PROMPT = 8         # tokens of the prompt (inputs.text_ids' unpadded start)
NEW_TOKENS = 16
CACHES = ("dynamic", "static")
HEADS = ("causal_lm", "seq2seq_lm")


def generates(entry) -> bool:
    return entry.head in HEADS and getattr(entry, "mode", "train") == "train"


def _prompt(batch) -> Dict[str, Any]:
    import torch

    ids = batch["input_ids"][:, :PROMPT]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _kwargs(cache: str) -> Dict[str, Any]:
    # use_cache: the catalog's configs turn the cache off for training.
    kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, use_cache=True,
              return_dict_in_generate=True, output_scores=True)
    if cache == "static":
        kw["cache_implementation"] = "static"
    return kw


def _graphs(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, int]:
    d = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    return {"compiles": d.get("graph.compile.count", 0), "disk_hits": d.get("cache.disk_hit.count", 0),
            "dynamo_traces": d.get("dynamo.region.trace.count", 0),
            "dynamo_graphs": sum(d.get(f"dynamo.graph.{k}.count", 0) for k in ("forward", "inference"))}


def _parting(cpu_seq, neu_seq, start: int):
    """(row, step) of the first generated token that differs, or None."""
    if cpu_seq.shape != neu_seq.shape:
        return (0, min(cpu_seq.shape[1], neu_seq.shape[1]) - start)
    diff = (cpu_seq != neu_seq).nonzero()
    if not len(diff):
        return None
    step = int(diff[:, 1].min())
    row = int(diff[diff[:, 1] == step][0, 0])
    return row, step - start


def one_cache(model, prompt, cache: str, rtol: float) -> Dict[str, Any]:
    import torch
    import torch_neuron

    res: Dict[str, Any] = {}
    kw = _kwargs(cache)
    cpu_model = copy.deepcopy(model)
    try:
        with torch.inference_mode():
            cpu = cpu_model.generate(**prompt, **kw)
    except Exception as e:  # the model does not generate with this cache, on any device
        res["status"] = "unsupported"
        res["cpu_error"] = {"type": type(e).__name__, "message": str(e).splitlines()[0][:300] if str(e) else ""}
        return res
    # Where the generated tokens start: after the prompt, or after the decoder's start token.
    start = 1 if model.config.is_encoder_decoder else prompt["input_ids"].shape[1]
    nmodel = copy.deepcopy(model).to("neuron")
    nprompt = {k: v.to("neuron") for k, v in prompt.items()}
    calls, runs = [], []
    for _ in range(2):
        before = torch_neuron.metrics.counters()
        with torch.inference_mode():
            out = nmodel.generate(**nprompt, **kw)
        runs.append(out)
        seq = out.sequences.cpu()
        calls.append(_graphs(before, torch_neuron.metrics.counters()))
        calls[-1]["tokens"] = seq
    res["graphs_per_call"] = [{k: v for k, v in c.items() if k != "tokens"} for c in calls]
    res["tokens_cpu"] = cpu.sequences[:, start:].tolist()
    res["tokens_neuron"] = calls[0]["tokens"][:, start:].tolist()
    parted = [_parting(cpu.sequences, c["tokens"], start) for c in calls]
    second = calls[1]
    new_in_second = second["compiles"] + second["disk_hits"] + second["dynamo_traces"]
    res["settled"] = new_in_second == 0
    # Scores up to the parting step (or all of them): equal within the tolerance.
    n_same = NEW_TOKENS if parted[0] is None else parted[0][1]
    worst = 0.0
    # min_new_tokens scores the end-of-sequence token -inf: the finite scores set the scale.
    scale = max((float(s[torch.isfinite(s)].abs().max()) for s in cpu.scores if torch.isfinite(s).any()),
                default=1.0)
    for a, b in zip(runs[0].scores[:n_same], cpu.scores[:n_same]):
        a, b = a.cpu(), b
        finite = torch.isfinite(b)
        if finite.any():
            worst = max(worst, float((a[finite] - b[finite]).abs().max()))
    res["scores_max_abs"], res["scores_scale"] = worst, scale
    scores_ok = worst <= rtol * max(scale, 1.0)
    if parted[0] is None and parted[1] is None and scores_ok:
        res["status"] = "pass" if res["settled"] else "mismatch"
        if not res["settled"]:
            res["mismatch"] = f"the second call built {new_in_second} new graph(s): generation did not settle"
        return res
    res["status"] = "mismatch"
    if parted[0] is None and parted[1] is not None:
        res["mismatch"] = f"the second call's tokens differ from the first's at step {parted[1][1]}"
        return res
    if parted[0] is None:
        res["mismatch"] = f"scores differ by {worst:.3g} (scale {scale:.3g}, rtol {rtol:g}) though the tokens agree"
        return res
    row, step = parted[0]
    top2 = torch.topk(cpu.scores[step][row].float(), 2).values
    margin = float(top2[0] - top2[1])
    res["parting"] = {"row": row, "step": step, "cpu_margin": margin, "tie_bound": rtol * max(scale, 1.0)}
    res["near_tie"] = margin <= rtol * max(scale, 1.0)
    what = "a near tie" if res["near_tie"] else "not a tie"
    res["mismatch"] = (f"tokens part at step {step} (row {row}): the CPU's two best logits there are "
                       f"{margin:.3g} apart ({what}; bound {rtol * max(scale, 1.0):.3g})")
    return res


def run_generate(entry, seed: int, rtol: float) -> Dict[str, Any]:
    """The generate record of one entry (runner.py --generate)."""
    import torch
    import torch_neuron

    res: Dict[str, Any] = {"name": entry.name, "model_type": entry.model_type, "head": entry.head,
                           "class": entry.class_name, "mode": "generate", "seed": seed, "rtol": rtol}
    try:
        model = entry.build(seed).eval()
        batch = entry.batch(model, seed)
        prompt = _prompt(batch)
    except Exception as e:
        res.update(status="config-broken", cpu_error={"type": type(e).__name__, "message": str(e)[:300], "where": ""})
        return res
    torch_neuron.metrics.reset()
    caches: Dict[str, Any] = {}
    res["caches"] = caches
    for cache in CACHES:
        torch.manual_seed(seed)
        try:
            caches[cache] = one_cache(model, prompt, cache, rtol)
        except Exception as e:
            caches[cache] = {"status": "error", "error": {"type": type(e).__name__,
                                                          "message": (str(e).splitlines() or [""])[0][:300]}}
    judged = {k: v for k, v in caches.items() if v["status"] != "unsupported"}
    if not judged:
        first = caches[CACHES[0]]["cpu_error"]
        res.update(status="config-broken", cpu_error=dict(first, where="generate on the CPU"))
        return res
    order = ("error", "mismatch", "pass")
    worst = min(judged.items(), key=lambda kv: order.index(kv[1]["status"]))
    res["status"] = worst[1]["status"]
    if res["status"] == "error":
        res["error"] = dict(worst[1]["error"], where=f"{worst[0]} cache")
    elif res["status"] == "mismatch":
        res["mismatch"] = f"{worst[0]} cache: {worst[1]['mismatch']}"
        res["near_tie"] = all(v.get("near_tie", False) for v in judged.values() if v["status"] == "mismatch")
    res["fallback_ops"] = torch_neuron.metrics.fallback_counts()
    return res


def render(gen: Dict[str, Any]) -> List[str]:
    """ZOO.md's section on a generate sweep (report.py --generate): totals, each cache's
    counts and graphs per call, and every failure with its cause."""
    import collections
    import statistics

    import report

    meta, results = gen.get("meta", {}), gen.get("results", {})
    run = {n: r for n, r in results.items() if not r.get("from_catalog")}
    counts = collections.Counter(r["status"] for r in run.values())
    valid = sum(counts[s] for s in report.VALID)
    level = meta.get("opt_level")
    out = ["## generate()", "",
           f"Greedy `generate()` of the causal and seq2seq LM entries (`runner.py --generate`, `generate.py`): "
           f"a {PROMPT}-token prompt of 2 rows, {NEW_TOKENS} new tokens (`min_new_tokens` too), once with "
           f"transformers' default cache and once with `cache_implementation=\"static\"` (on neuron, transformers "
           f"compiles the static cache's decoding step with `torch.compile(backend=\"neuron\")` by itself). "
           f"Each runs twice on neuron under `torch.inference_mode()`: both calls' tokens must equal the CPU's, "
           f"the scores up to any parting step must agree within rtol x their scale, and the second call must "
           f"build no graph. A cache the CPU cannot generate with does not count; an entry the CPU cannot "
           f"generate with at all is config-broken. Opt level {level}; {meta.get('jobs')} job(s), "
           f"{meta.get('wall_s', 0) / 60:.0f} min; git HEAD {meta.get('git_head', '?')}; "
           f"**{len(run)}** entries run, {len(meta.get('not_run', []))} not reached.", "",
           "| status | entries |", "|---|---|"]
    out += [f"| {s} | {counts[s]} |" for s in report.STATUSES]
    rate = 100.0 * counts["pass"] / valid if valid else 0.0
    out += ["", f"Pass rate over valid entries: **{counts['pass']}/{valid} = {rate:.1f}%**.", "",
            "| cache | pass | mismatch | error | unsupported on the CPU | graphs, first call (median) | "
            "graphs, second call (max) |", "|---|---|---|---|---|---|---|"]
    for cache in CACHES:
        subs = [r["caches"][cache] for r in run.values() if cache in (r.get("caches") or {})]
        c = collections.Counter(s["status"] for s in subs)
        firsts = [sum(s["graphs_per_call"][0][k] for k in ("compiles", "disk_hits")) for s in subs
                  if s["status"] == "pass"]
        seconds = [sum(s["graphs_per_call"][1][k] for k in ("compiles", "disk_hits", "dynamo_traces"))
                   for s in subs if s.get("graphs_per_call")]
        out.append(f"| {cache} | {c['pass']} | {c['mismatch']} | {c['error']} | {c['unsupported']} | "
                   f"{statistics.median(firsts) if firsts else ''} | {max(seconds) if seconds else ''} |")
    groups: Dict[str, List[str]] = collections.defaultdict(list)
    for n, r in sorted(run.items()):
        if r["status"] in ("mismatch", "error", "crash"):
            groups[report.cause_of(r)].append(n)
    if groups:
        out += ["", "### generate(): failures by cause", ""]
    for cause, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        why = report.known_reason(cause)
        out += [f"- **{cause}** ({len(names)}): " + (f"known: {why}" if why else "no known reason yet."), ""]
        for n in names:
            r = run[n]
            detail = r.get("mismatch") or (r.get("error") or {}).get("message") or (r.get("crash") or {}).get("how")
            out.append(f"  - `{n}`: {str(detail)[:300]}")
        out.append("")
    out.append("")
    return out
