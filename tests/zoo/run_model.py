"""Runs ONE zoo entry: trains it 3 steps on the CPU and on neuron from the same
weights and inputs, compares, and prints one JSON result line ("ZOO_RESULT {...}").

    python tests/zoo/run_model.py llama/causal_lm            # the result line
    python tests/zoo/run_model.py llama/causal_lm --pretty   # and a readable summary
    python tests/zoo/run_model.py llama/causal_lm --compile  # neuron's forward under torch.compile
    python tests/zoo/run_model.py llama/causal_lm --generate # greedy generate() instead (generate.py)
    python tests/zoo/run_model.py --cpu-check [-k PAT] [--write-broken]
        # every entry on the CPU only, in this process: finds the config-broken ones
        # (--write-broken rewrites tests/zoo/config_broken.json)

A step is: forward with labels, loss.backward(), torch.optim.SGD step, zero_grad,
and on neuron torch_neuron.mark_step() (then wait_device_ops(), so a step's wall
time is its own). Compared: the 3 losses, the step-1 logits, every parameter's
step-1 gradient by name from named_parameters() (a tied parameter is listed once;
a gradient on one side only is a failure; so is a parameter on one side only) and
every parameter after step 3.

With --compile the neuron copy's forward runs as torch.compile(model,
backend="neuron") (issue 47); the CPU reference stays eager, and the steps and
comparisons are the same, except that a gradient of zeros on neuron where the
CPU has none matches (see compare_runs). Dynamo is reset first and its recompile limits raised
(a model whose layers recompile per layer would otherwise fall back to eager
silently at 8). The result adds "dynamo": per step, the Dynamo graphs the
backend was handed and the regions traced into programs, run as programs and
run op by op (torch_neuron.metrics dynamo.*), and the graph breaks Dynamo
counted, with their most frequent reasons. A graph that cannot be one program
raises NotImplementedError unless TORCH_NEURON_COMPILE_FALLBACK=1 (the runner
leaves it off, so such graphs are errors naming the op). After an error, one
CPU step under torch.compile(backend="aot_eager") tells whether torch.compile
fails on the model without neuron too ("cpu_compile"). Settled under compile:
step 3 met no new Dynamo graph, traced no region, and built no new lazy graph,
unless step 2 still traced (then step 3 is the first to run the programs, and
the lazy graphs around them change that once).

Tolerance: |neuron - cpu| <= atol + rtol * |cpu| elementwise, with rtol 1e-4 at
opt level 0 and 1e-3 at opt level 1+, and per tensor

    atol = rtol * max(max|cpu tensor|, 1e-3 * max|cpu, all tensors of its kind|)

(kinds: losses, logits, gradients, parameters). Rounding error in an element is
proportional to the magnitudes summed into it, which its tensor's scale bounds,
not to the element's own value; so an element near zero may be off by rtol
relative to its tensor's largest element. A fixed atol (1e-5) would wave through
a tensor of small values (a deep layer's gradient of 1e-6) and fail a large one
on rounding alone (DeiT's distillation-token gradient, scale ~3e3, where the CPU's
own float32 result is 4e-3 from float64). The floor at a thousandth of the
model's largest gradient (parameter) is for tensors that are zero in exact
arithmetic (an attention key bias's gradient, which softmax cancels, is 1e-12 of
noise): they are compared against the noise of the sums that made them.

Statuses: pass, mismatch (worst tensor named), error (neuron raised: exception
type and first line), config-broken (the CPU run fails, or two CPU runs from the
same weights, inputs and global RNG seed differ, so there is nothing to compare
against). Both devices train from the same seed: a forward that draws random
numbers (dropout) draws the same ones on neuron as on the CPU, and a mismatch of
such an entry is marked "draws_random". A crash (the process dies or times out)
is recorded by runner.py.

A mismatch is measured against the model's own float32 noise: float64_check (how
far a float64 CPU run is from either float32 result) and, when that does not
explain it, perturbed_check (how far CPU float32 runs move when the initial
weights move by a rounding error: a model whose max-pool or ReLU decisions sit
on near-ties, or whose training is chaotic, moves far more than float64 shows).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import signal
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import catalog  # noqa: E402

RESULT_PREFIX = "ZOO_RESULT "
STEPS = 3
LR = 0.1


def opt_level() -> int:
    return int(os.environ.get("TORCH_NEURON_OPT_LEVEL", "1") or 1)


def tolerance(level: int) -> float:
    """rtol for an opt level (atol follows from it per tensor: see the module docstring)."""
    return 1e-4 if level == 0 else 1e-3


# ---------------------------------------------------------------------------
# Training.

def _to(obj, device):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device) for v in obj)
    return obj


def _loss_and_logits(out):
    import torch

    loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
    if loss is None and isinstance(out, (tuple, list)):
        loss = out[0]
    logits = None
    items = out.items() if hasattr(out, "items") else enumerate(out)
    for key in ("logits", "prediction_logits", "start_logits", "reconstruction", "logits_per_image"):
        if getattr(out, key, None) is not None:
            logits = getattr(out, key)
            break
    if logits is None:
        for k, v in items:
            if k != "loss" and isinstance(v, torch.Tensor) and v is not loss:
                logits = v
                break
    if loss is None:
        raise RuntimeError("the model returned no loss for a batch with labels")
    return loss, logits


class Phase:
    """Names the part of a step that raised, for the error report."""

    def __init__(self):
        self.name = "setup"


def train(model, batch, device: str, phase: Phase, steps: int = STEPS, on_neuron: bool = False, forward=None):
    """`forward` (default: the model) computes the outputs; parameters are `model`'s.
    The learning rate is LR, or the model's `zoo_lr` (an entry whose tiny model
    diverges at LR sets it: a diverging run compares only its rounding)."""
    import torch

    rec: Dict[str, Any] = {"losses": [], "step_s": [], "step_counters": []}
    if on_neuron:
        import torch_neuron

    params_named = dict(model.named_parameters())
    opt = torch.optim.SGD([p for p in params_named.values() if p.requires_grad], lr=getattr(model, "zoo_lr", LR))
    grads = logits = None
    losses = []
    for step in range(steps):
        before = torch_neuron.metrics.counters() if on_neuron else None
        t0 = time.perf_counter()
        phase.name = f"step {step + 1} forward"
        out = (model if forward is None else forward)(**batch)
        loss, step_logits = _loss_and_logits(out)
        phase.name = f"step {step + 1} backward"
        loss.backward()
        if step == 0:
            logits = None if step_logits is None else step_logits.detach().clone()
            grads = {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in params_named.items()}
        phase.name = f"step {step + 1} optimizer"
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if on_neuron:
            phase.name = f"step {step + 1} mark_step"
            torch_neuron.mark_step()
            torch_neuron.wait_device_ops()
        rec["step_s"].append(time.perf_counter() - t0)
        if on_neuron:
            after = torch_neuron.metrics.counters()
            rec["step_counters"].append({k: v - before.get(k, 0) for k, v in after.items()
                                         if v != before.get(k, 0)})
    phase.name = "reading results"
    rec["losses"] = [float(l.float().cpu()) for l in losses]
    rec["loss_tensors"] = [l.cpu() for l in losses]
    rec["logits"] = None if logits is None else logits.cpu()
    rec["grads"] = {n: (None if g is None else g.cpu()) for n, g in grads.items()}
    rec["params"] = {n: p.detach().cpu() for n, p in params_named.items()}
    return rec


# ---------------------------------------------------------------------------
# Comparison.

def compare_tensor(a, b, rtol: float, kind_scale: float = 0.0) -> Dict[str, Any]:
    """Neuron tensor `a` against CPU tensor `b`; `kind_scale` is the largest |value| of
    all CPU tensors of this kind (see the module docstring)."""
    import torch

    if a.shape != b.shape:
        return {"ok": False, "why": f"shape {tuple(a.shape)} vs cpu {tuple(b.shape)}", "score": math.inf,
                "max_abs": math.inf, "max_rel": math.inf}
    if a.dtype != b.dtype:
        return {"ok": False, "why": f"dtype {a.dtype} vs cpu {b.dtype}", "score": math.inf,
                "max_abs": math.inf, "max_rel": math.inf}
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if not a.is_floating_point():
        same = bool(torch.equal(a, b))
        return {"ok": same, "why": "" if same else "integer values differ", "score": 0.0 if same else math.inf,
                "max_abs": 0.0 if same else math.inf, "max_rel": 0.0 if same else math.inf}
    a, b = a.double(), b.double()
    if a.numel() == 0:
        return {"ok": True, "why": "", "score": 0.0, "max_abs": 0.0, "max_rel": 0.0}
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb) or not torch.equal(a[~fa].nan_to_num(0.0, 1.0, -1.0), b[~fb].nan_to_num(0.0, 1.0, -1.0)):
        return {"ok": False, "why": "non-finite values differ", "score": math.inf,
                "max_abs": math.inf, "max_rel": math.inf}
    a, b = a[fa], b[fb]
    if a.numel() == 0:
        return {"ok": True, "why": "", "score": 0.0, "max_abs": 0.0, "max_rel": 0.0}
    scale = float(b.abs().max())
    floor = max(scale, 1e-3 * kind_scale)
    atol = rtol * floor
    diff = (a - b).abs()
    allowed = atol + rtol * b.abs()
    score = float((diff / allowed.clamp_min(1e-300)).max())
    max_abs = float(diff.max())
    # relative difference over the elements that are not rounding noise
    significant = b.abs() >= 1e-3 * floor
    max_rel = float((diff[significant] / b.abs()[significant]).max()) if bool(significant.any()) else 0.0
    return {"ok": score <= 1.0, "why": "" if score <= 1.0 else "values differ", "score": score,
            "max_abs": max_abs, "max_rel": max_rel}


def compare_runs(neu, cpu, rtol: float, zero_grad_is_none: bool = False) -> Dict[str, Any]:
    """Every compared tensor; the worst one named. With `zero_grad_is_none` (under
    torch.compile), a gradient of zeros on neuron where the CPU has none matches:
    a compiled graph is one autograd node, whose backward returns zeros for the
    parameters of outputs the loss does not use (the CPU's aot_eager does the same),
    where eager autograd never reaches them."""
    checks: List[tuple] = []
    problems: List[str] = []
    zero_for_none = 0
    for i, (a, b) in enumerate(zip(neu["loss_tensors"], cpu["loss_tensors"])):
        checks.append((f"loss[step {i + 1}]", "loss", a, b))
    if cpu["logits"] is not None and neu["logits"] is not None:
        checks.append(("logits[step 1]", "logits", neu["logits"], cpu["logits"]))
    elif (cpu["logits"] is None) != (neu["logits"] is None):
        problems.append("logits on one side only")
    for kind, key in (("grad", "grads"), ("param", "params")):
        cn, nn_ = set(cpu[key]), set(neu[key])
        for name in sorted(cn - nn_):
            problems.append(f"{kind} {name}: on the CPU only")
        for name in sorted(nn_ - cn):
            problems.append(f"{kind} {name}: on neuron only")
        for name in sorted(cn & nn_):
            a, b = neu[key][name], cpu[key][name]
            if zero_grad_is_none and kind == "grad" and b is None and a is not None and not bool(a.any()):
                zero_for_none += 1
                continue
            if (a is None) != (b is None):
                problems.append(f"{kind} {name}: gradient on {'the CPU' if a is None else 'neuron'} only")
                continue
            if a is not None:
                checks.append((f"{kind} {name}" + ("[step 1]" if kind == "grad" else "[after step 3]"), kind, a, b))
    worst, worst_score = None, -1.0
    maxima = {k: {"max_abs": 0.0, "max_rel": 0.0} for k in ("loss", "logits", "grad", "param")}
    failed = []
    kind_scale: Dict[str, float] = {}
    for _, kind, _, b in checks:
        if b.is_floating_point() and b.numel():
            finite = b[b.isfinite()]
            if finite.numel():
                kind_scale[kind] = max(kind_scale.get(kind, 0.0), float(finite.abs().max()))
    for label, kind, a, b in checks:
        r = compare_tensor(a, b, rtol, kind_scale.get(kind, 0.0))
        m = maxima[kind]
        m["max_abs"] = max(m["max_abs"], r["max_abs"])
        m["max_rel"] = max(m["max_rel"], r["max_rel"])
        if r["score"] > worst_score:
            worst, worst_score = (label, r), r["score"]
        if not r["ok"]:
            failed.append(label)
    out = {"ok": not failed and not problems, "n_tensors": len(checks), "n_failed": len(failed) + len(problems),
           "maxima": maxima, "problems": problems[:20], "failed": failed[:20], "zero_grads_for_none": zero_for_none}
    if worst is not None:
        out["worst"] = {"tensor": worst[0], "why": worst[1]["why"], "score": worst[1]["score"],
                        "max_abs": worst[1]["max_abs"], "max_rel": worst[1]["max_rel"]}
    out["max_abs"] = max(m["max_abs"] for m in maxima.values())
    out["max_rel"] = max(m["max_rel"] for m in maxima.values())
    return out


# ---------------------------------------------------------------------------
# One entry.

def _error_info(e: BaseException, phase: Optional[Phase] = None) -> Dict[str, Any]:
    msg = str(e).strip()
    lines = msg.splitlines()
    first = lines[0] if msg else ""
    if first.endswith("raised:") and len(lines) > 1:  # Dynamo's BackendCompilerFailed: the cause is next
        first = f"{first} {lines[1]}"
    tb = traceback.extract_tb(e.__traceback__)
    frame = next((f for f in reversed(tb) if "site-packages/transformers" in f.filename), tb[-1] if tb else None)
    where = f"{os.path.basename(frame.filename)}:{frame.lineno} {frame.name}" if frame else ""
    info = {"type": type(e).__name__, "message": first[:500], "where": where}
    if phase is not None:
        info["phase"] = phase.name
    return info


def _json_safe(x):
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


def build_id() -> str:
    """Which torch_neuron build ran: the extension's modification time (the tree may be
    rebuilt while a sweep runs)."""
    import torch_neuron

    so = torch_neuron._C.__file__
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(os.stat(so).st_mtime))


def cpu_reference(entry, seed: int):
    """Builds the model and batch, and trains a copy on the CPU. Returns (model, batch, rec)."""
    import torch

    model = entry.build(seed)
    batch = entry.batch(model, seed)
    ref = copy.deepcopy(model)
    torch.manual_seed(seed)
    if is_inference(entry):
        return model, batch, {"outputs": entry.infer(ref, batch, "cpu")}
    rec = train(ref, batch, "cpu", Phase())
    return model, batch, rec


def is_inference(entry) -> bool:
    """An entry whose run is inference (catalog_libs "infer": a sampling loop, encode)."""
    return getattr(entry, "mode", "train") == "infer"


def infer_on_neuron(entry, model, batch, cpu, rtol: float, res: Dict[str, Any], phase: Phase) -> Dict[str, Any]:
    """An inference entry on neuron: run twice, the first run's outputs compared with
    the CPU's, the second's with the first's (bit for bit); the second must build no
    graph (a loop that settles)."""
    import torch_neuron

    nmodel = copy.deepcopy(model).to("neuron")
    runs, counters = [], []
    for i in range(2):
        phase.name = f"run {i + 1}"
        before = torch_neuron.metrics.counters()
        runs.append(entry.infer(nmodel, batch, "neuron", mark_step=torch_neuron.mark_step))
        after = torch_neuron.metrics.counters()
        counters.append({k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)})
    res["compiles_per_run"] = [c.get("graph.compile.count", 0) for c in counters]
    res["disk_hits_per_run"] = [c.get("cache.disk_hit.count", 0) for c in counters]
    res["step_counters"] = counters
    config = torch_neuron.config.current()
    tiered = config["tiered_compile"] and config["opt_level"] >= 1
    new_in_second = (counters[1].get("compile.tiered.background.count", 0) if tiered
                     else res["compiles_per_run"][1]) + res["disk_hits_per_run"][1]
    res["settled"] = new_in_second == 0
    worst, failed = None, []
    scale = max((float(o.abs().max()) for o in cpu["outputs"] if o.is_floating_point() and o.numel()), default=0.0)
    for i, (a, b) in enumerate(zip(runs[0], cpu["outputs"])):
        r = compare_tensor(a, b, rtol, scale)
        if worst is None or r["score"] > worst[1]["score"]:
            worst = (f"output[{i}]", r)
        if not r["ok"]:
            failed.append(f"output[{i}]")
    same = len(runs[0]) == len(cpu["outputs"]) and all(torch_equal(a, b) for a, b in zip(runs[0], runs[1]))
    res["max_abs"], res["max_rel"] = worst[1]["max_abs"], worst[1]["max_rel"]
    res["compare"] = {"ok": not failed and same, "n_tensors": len(cpu["outputs"]), "failed": failed,
                      "repeatable": same, "max_abs": res["max_abs"], "max_rel": res["max_rel"],
                      "worst": {"tensor": worst[0], "why": worst[1]["why"], "score": worst[1]["score"]}}
    if failed:
        res["status"] = "mismatch"
        res["mismatch"] = f"{worst[0]}: {worst[1]['why']} ({worst[1]['score']:.3g}x the tolerance)"
    elif not same:
        res["status"] = "mismatch"
        res["mismatch"] = "a second run on neuron gave other outputs than the first"
    elif not res["settled"]:
        res["status"] = "mismatch"
        res["mismatch"] = f"the second run built {new_in_second} new graph(s): compiles did not settle"
    else:
        res["status"] = "pass"
    return res


def torch_equal(a, b) -> bool:
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))


# Dynamo's recompile limits, raised: a module whose frames Dynamo recompiles per
# layer (a guard on the layer index) would otherwise run eagerly from the 9th on.
RECOMPILE_LIMIT = 256


def configure_dynamo() -> None:
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, RECOMPILE_LIMIT)
    if hasattr(cfg, "accumulated_recompile_limit"):
        cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)


DYNAMO_COUNTERS = {"graphs": ("dynamo.graph.forward.count", "dynamo.graph.backward.count",
                              "dynamo.graph.inference.count"),
                   "traces": ("dynamo.region.trace.count",), "runs": ("dynamo.region.run.count",),
                   "op_by_op": ("dynamo.region.op_by_op.count",)}


def dynamo_summary(step_counters: List[Dict[str, int]]) -> Dict[str, Any]:
    """Per step: Dynamo graphs handed to the backend, regions traced, run as programs,
    run op by op; and Dynamo's own counts (graph breaks with their top reasons)."""
    from torch._dynamo.utils import counters

    out: Dict[str, Any] = {k: [sum(c.get(n, 0) for n in names) for c in step_counters]
                           for k, names in DYNAMO_COUNTERS.items()}
    breaks = counters["graph_break"]
    out["graph_breaks"] = sum(breaks.values())
    out["graph_break_reasons"] = [[str(k)[:200], v] for k, v in breaks.most_common(5)]
    out["unique_graphs"] = counters["stats"]["unique_graphs"]
    out["frames_ok"] = counters["frames"]["ok"]
    out["aot_not_ok"] = counters["aot_autograd"]["not_ok"]
    return out


def cpu_compile_check(model, batch, seed: int) -> Dict[str, Any]:
    """For an error under compile: does one step of the CPU under torch.compile(backend=
    "aot_eager") (Dynamo and AOTAutograd, no neuron) raise too? Then torch.compile
    fails on this model anyway, and the error says nothing about neuron."""
    import torch

    configure_dynamo()
    # The CPU generator only: torch.manual_seed would seed neuron's too, which ends
    # the failed run's pending graph (and may raise its error again).
    torch.random.default_generator.manual_seed(seed)
    ref = copy.deepcopy(model)
    try:
        train(ref, batch, "cpu", Phase(), steps=1, forward=torch.compile(ref, backend="aot_eager"))
    except Exception as e:
        return {"ok": False, "error": _error_info(e)}
    finally:
        torch._dynamo.reset()
    return {"ok": True}


def run_entry(entry, seed: int = 0, steps: int = STEPS, compile: bool = False) -> Dict[str, Any]:
    import torch

    level = opt_level()
    rtol = tolerance(level)
    res: Dict[str, Any] = {"name": entry.name, "model_type": entry.model_type, "head": entry.head,
                           "class": entry.class_name, "opt_level": level, "rtol": rtol,
                           "seed": seed, "compile": compile, "mode": getattr(entry, "mode", "train")}
    t0 = time.perf_counter()
    try:
        model, batch, cpu = cpu_reference(entry, seed)
    except Exception as e:  # the tiny config does not train even on the CPU
        res.update(status="config-broken", cpu_error=_error_info(e), cpu_s=time.perf_counter() - t0)
        return res
    res["cpu_s"] = time.perf_counter() - t0
    res["n_params"] = sum(p.numel() for p in model.parameters())
    res["losses_cpu"] = cpu.get("losses")
    try:
        import traits

        res["traits"] = traits.classify(entry, model, list(batch))
    except Exception as e:
        res["traits_error"] = _error_info(e)

    import torch_neuron

    res["build"] = build_id()
    torch_neuron.metrics.reset()
    phase = Phase()
    t1 = time.perf_counter()
    if is_inference(entry):
        if compile:
            raise ValueError(f"{entry.name} is an inference entry: they run lazily only (runner.py leaves "
                             "them out of --compile sweeps)")
        try:
            infer_on_neuron(entry, model, batch, cpu, rtol, res, phase)
        except Exception as e:
            res.update(status="error", error=_error_info(e, phase),
                       fallback_ops=torch_neuron.metrics.fallback_counts())
        res["neuron_s"] = time.perf_counter() - t1
        res["fallback_ops"] = torch_neuron.metrics.fallback_counts()
        return res
    try:
        phase.name = "to(neuron)"
        nmodel = copy.deepcopy(model).to("neuron")
        nbatch = _to(batch, "neuron")
        res["setup_s"] = time.perf_counter() - t1
        setup_counters = torch_neuron.metrics.counters()
        forward = None
        if compile:
            configure_dynamo()
            forward = torch.compile(nmodel, backend="neuron")
        # The seed the CPU run had (torch.manual_seed seeds neuron's generators too, and
        # they draw what the CPU's draws): a forward that draws random numbers (a
        # classifier head's dropout) draws the same ones on both.
        torch.manual_seed(seed)
        neu = train(nmodel, nbatch, "neuron", phase, steps, on_neuron=True, forward=forward)
    except Exception as e:
        res.update(status="error", error=_error_info(e, phase), neuron_s=time.perf_counter() - t1,
                   fallback_ops=torch_neuron.metrics.fallback_counts())
        if compile:
            res["dynamo"] = dynamo_summary([torch_neuron.metrics.counters()])
            res["cpu_compile"] = cpu_compile_check(model, batch, seed)
        return res
    res["neuron_s"] = time.perf_counter() - t1
    res["losses_neuron"] = neu["losses"]
    res["step_s"] = neu["step_s"]
    res["setup_counters"] = setup_counters
    res["step_counters"] = neu["step_counters"]
    res["compiles_per_step"] = [c.get("graph.compile.count", 0) for c in neu["step_counters"]]
    res["disk_hits_per_step"] = [c.get("cache.disk_hit.count", 0) for c in neu["step_counters"]]
    res["syncs_per_step"] = [c.get("graph.sync.count", 0) for c in neu["step_counters"]]
    res["compile_s_per_step"] = [c.get("graph.compile.ns", 0) / 1e9 for c in neu["step_counters"]]
    res["fallback_ops"] = torch_neuron.metrics.fallback_counts()
    cmp = compare_runs(neu, cpu, rtol, zero_grad_is_none=compile)
    res["compare"] = cmp
    res["max_abs"], res["max_rel"] = cmp["max_abs"], cmp["max_rel"]
    # Graphs the last step met for the first time: compiled (or, with tiered
    # compilation, queued for tier 1: its compiles also land in whichever step
    # is running when they end) or read from disk.
    config = torch_neuron.config.current()
    if config["tiered_compile"] and config["opt_level"] >= 1:
        new_graphs = [c.get("compile.tiered.background.count", 0) for c in neu["step_counters"]]
    else:
        new_graphs = res["compiles_per_step"]
    last_new = new_graphs[-1] + res["disk_hits_per_step"][-1]
    if compile:
        dyn = res["dynamo"] = dynamo_summary(neu["step_counters"])
        # The lazy graphs around the regions (the optimizer step, mutations) change
        # once, at the first step that runs the programs instead of tracing them:
        # a model that recompiles at step 2 (a guard on config.problem_type, which
        # its first forward sets) first runs them at step 3. Its new lazy graphs
        # there are that one change, not a failure to settle.
        first_run = len(dyn["traces"]) >= 2 and dyn["traces"][-2] > 0 and dyn["traces"][-1] == 0
        dyn["last_step_first_run"] = first_run
        last_new = (0 if first_run and dyn["graphs"][-1] == 0 else last_new) + dyn["graphs"][-1] + dyn["traces"][-1]
    settled = last_new == 0
    res["settled"] = settled
    if cmp["ok"] and settled:
        res["status"] = "pass"
        return res
    if not cmp["ok"]:
        # Is the CPU itself reproducible? A forward that draws random numbers repeats
        # only from the same seed (and neuron had that seed); one that does not repeat
        # even then has nothing to compare against.
        try:
            torch.manual_seed(seed + 1)
            again = train(copy.deepcopy(model), batch, "cpu", Phase())
            if not compare_runs(again, cpu, rtol)["ok"]:
                res["draws_random"] = True
                torch.manual_seed(seed)
                again = train(copy.deepcopy(model), batch, "cpu", Phase())
                if not compare_runs(again, cpu, rtol)["ok"]:
                    res.update(status="config-broken", cpu_error={
                        "type": "Nondeterministic", "where": "",
                        "message": "two CPU runs from the same weights, inputs and seed differ"})
                    return res
        except Exception as e:
            res["cpu_rerun_error"] = _error_info(e)
    res["status"] = "mismatch"
    if not cmp["ok"] and cmp["failed"]:
        try:
            res["float64_check"] = float64_check(model, batch, seed, cpu, neu, cmp["failed"])
        except Exception as e:  # some models hard-code float32 somewhere
            res["float64_check"] = {"error": _error_info(e)}
        if not res["float64_check"].get("rounding_level"):
            try:
                res["perturbed_check"] = perturbed_check(model, batch, seed, cpu, neu, cmp["failed"])
            except Exception as e:  # a perturbed run that fails explains nothing
                res["perturbed_check"] = {"error": _error_info(e)}
    if not cmp["ok"]:
        w = cmp.get("worst", {})
        res["mismatch"] = (cmp["problems"][0] if cmp["problems"] else
                           f"{w.get('tensor')}: {w.get('why')} (max abs {w.get('max_abs'):.3g}, "
                           f"{w.get('score'):.3g}x the tolerance)")
    else:
        res["mismatch"] = f"step {len(res['compiles_per_step'])} built {last_new} new graph(s): compiles did not settle"
    return res


def _tensor_by_label(rec, label: str):
    if label.startswith("loss[step "):
        return rec["loss_tensors"][int(label[len("loss[step "):-1]) - 1]
    if label.startswith("logits"):
        return rec["logits"]
    kind, rest = label.split(" ", 1)
    name = rest.rsplit("[", 1)[0]
    return rec["grads" if kind == "grad" else "params"][name]


def float64_check(model, batch, seed: int, cpu, neu, failed: List[str]) -> Dict[str, Any]:
    """For a mismatch: how far are the CPU's and neuron's float32 results from a float64
    CPU run of the same steps? If neuron is no further from it than a few times the CPU
    float32 run is, the difference is float32 rounding (the tolerance is tighter than the
    model's own rounding noise), not a wrong result."""
    import torch

    def to64(obj):
        if isinstance(obj, torch.Tensor):
            return obj.double() if obj.is_floating_point() else obj
        if isinstance(obj, dict):
            return {k: to64(v) for k, v in obj.items()}
        return obj

    torch.manual_seed(seed)
    ref = train(copy.deepcopy(model).double(), to64(batch), "cpu", Phase())
    rows = []
    for label in failed:
        r64 = _tensor_by_label(ref, label).double()
        c = _tensor_by_label(cpu, label).double()
        n = _tensor_by_label(neu, label).double()
        rows.append({"tensor": label, "cpu32_vs_f64": float((c - r64).abs().max()),
                     "neuron_vs_f64": float((n - r64).abs().max())})
    rounding = all(r["neuron_vs_f64"] <= 4 * r["cpu32_vs_f64"] + 1e-30 for r in rows)
    return {"rounding_level": rounding, "tensors": rows[:8]}


# perturbed_check: CPU runs from weights moved by a rounding error each, and the factor
# by which neuron may be further from the CPU than the furthest of them (float64_check's).
PERTURBED_RUNS = 3
PERTURBED_FACTOR = 4


def perturb_weights(model, generator):
    """A copy of `model` whose floating-point parameters each stay, or move one ulp up
    or down (a third each, drawn from `generator`): the size of a rounding error."""
    import torch

    m = copy.deepcopy(model)
    with torch.no_grad():
        for p in m.parameters():
            if p.is_floating_point():
                step = torch.randint(-1, 2, p.shape, generator=generator).to(p.dtype)
                p.copy_(torch.where(step == 0, p, torch.nextafter(p, step * math.inf)))
    return m


def perturbed_check(model, batch, seed: int, cpu, neu, failed: List[str]) -> Dict[str, Any]:
    """For a mismatch float64_check does not explain: how far do CPU float32 runs move
    when the initial weights move by a rounding error? A float64 run differs from the
    CPU's float32 one by the float32 rounding of each op, which is small where the
    computation is smooth; but a max-pool window whose two largest inputs are a few ulps
    apart (or a ReLU input that is) picks another element after any rounding change,
    and a chaotic training run amplifies any change. Then the CPU's own result moves as
    far as neuron's does: if neuron is no further from the CPU than PERTURBED_FACTOR
    times the furthest perturbed run, the mismatch is that sensitivity, not a wrong result."""
    import torch

    rows = [{"tensor": label, "neuron_vs_cpu32": float((_tensor_by_label(neu, label).double()
                                                        - _tensor_by_label(cpu, label).double()).abs().max()),
             "perturbed_vs_cpu32": 0.0} for label in failed]
    for i in range(PERTURBED_RUNS):
        m = perturb_weights(model, torch.Generator().manual_seed(seed + 100 + i))
        torch.manual_seed(seed)
        rec = train(m, batch, "cpu", Phase())
        for r in rows:
            d = float((_tensor_by_label(rec, r["tensor"]).double() - _tensor_by_label(cpu, r["tensor"]).double())
                      .abs().max())
            r["perturbed_vs_cpu32"] = max(r["perturbed_vs_cpu32"], d)
    within = all(r["neuron_vs_cpu32"] <= PERTURBED_FACTOR * r["perturbed_vs_cpu32"] for r in rows)
    return {"within_spread": within, "runs": PERTURBED_RUNS, "tensors": rows[:8]}


def cpu_check(pattern: Optional[str], timeout: int) -> Dict[str, str]:
    """Trains every entry on the CPU only; returns {name: error} for those that fail."""
    import re

    broken = {}

    def on_alarm(signum, frame):
        raise TimeoutError(f"CPU run took over {timeout} s")

    signal.signal(signal.SIGALRM, on_alarm)
    for entry in catalog.entries(include_broken=True):
        if pattern and not re.search(pattern, entry.name):
            continue
        t0 = time.perf_counter()
        signal.alarm(timeout)
        try:
            cpu_reference(entry, 0)
            err = None
        except BaseException as e:  # noqa: B902 - a model may raise anything, even SystemExit
            if isinstance(e, KeyboardInterrupt):
                raise
            info = _error_info(e)
            err = f"{info['type']}: {info['message']} [{info['where']}]"
        finally:
            signal.alarm(0)
        print(f"{'BROKEN' if err else 'ok':6s} {entry.name:55s} {time.perf_counter() - t0:6.2f}s"
              f"{'  ' + err if err else ''}", flush=True)
        if err:
            broken[entry.name] = err
    return broken


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="entry name, e.g. llama/causal_lm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pretty", action="store_true", help="also print a readable summary")
    p.add_argument("--compile", action="store_true",
                   help='run the neuron forward under torch.compile(backend="neuron")')
    p.add_argument("--generate", action="store_true",
                   help="greedy generate() on neuron against the CPU, default and static cache (generate.py)")
    p.add_argument("--cpu-check", action="store_true", help="train every entry on the CPU only")
    p.add_argument("-k", dest="pattern", help="with --cpu-check: a regex on entry names")
    p.add_argument("--write-broken", action="store_true", help="with --cpu-check: rewrite config_broken.json")
    p.add_argument("--timeout", type=int, default=120, help="with --cpu-check: seconds per entry")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(int(os.environ.get("ZOO_THREADS", "1")))
    if args.cpu_check:
        broken = cpu_check(args.pattern, args.timeout)
        if args.write_broken:
            path = os.path.join(HERE, "config_broken.json")
            old = {} if args.pattern is None else catalog.load_config_broken()
            if args.pattern:
                import re

                old = {k: v for k, v in old.items() if not re.search(args.pattern, k)}
            old.update(broken)
            with open(path, "w") as f:
                json.dump(dict(sorted(old.items())), f, indent=1)
                f.write("\n")
        print(f"{len(broken)} config-broken")
        return 0
    if not args.name:
        p.error("an entry name is required")
    entry = catalog.by_name(include_broken=True).get(args.name)
    if entry is None:
        print(f"no entry {args.name!r}", file=sys.stderr)
        return 2
    if args.generate:
        import generate

        res = generate.run_generate(entry, args.seed, tolerance(opt_level()))
        res["build"], res["opt_level"] = build_id(), opt_level()
    else:
        res = run_entry(entry, args.seed, compile=args.compile)
    print(RESULT_PREFIX + json.dumps(_json_safe(res), sort_keys=True), flush=True)
    if args.pretty:
        keys = ("status", "mismatch", "caches", "error", "cpu_error", "losses_cpu", "losses_neuron", "max_abs", "max_rel",
                "compiles_per_step", "disk_hits_per_step", "fallback_ops", "step_s", "dynamo", "cpu_compile", "traits")
        for k in keys:
            if k in res:
                print(f"  {k}: {res[k]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
