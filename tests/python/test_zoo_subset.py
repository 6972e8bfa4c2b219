"""The model zoo's representative subset (DESIGN.md "Model zoo", second validation stage):
every trait value's covering entries trained 3 steps on neuron and on the CPU, compared
by tests/zoo/run_model.py, each in its own process (tests/zoo/runner.py, both cores).

An entry passes when losses, logits, every gradient and every parameter match the CPU's
and step 3 meets no new graph. The subset runs with tiered compilation on, as users do. A failure whose cause has a written, measured reason
(tests/zoo/report.py KNOWN_CAUSES: e.g. a float64 run shows the difference is float32
rounding) is an xfail naming it; any other failure fails. `make zoo` runs the whole zoo.

The same entries run under torch.compile(backend="neuron") too (runner.py --compile: the
neuron forward compiled, the CPU reference eager): a slice of the subset here (COMPILE_SLICE,
about 1.5 minutes on 2 cores; the whole subset takes 6.5), the whole subset with
ZOO_COMPILE_SUBSET=all (`make zoo-subset`). A compiled entry also has to have been compiled:
Dynamo handed the backend graphs that ran as traced programs, none op by op.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO = os.path.join(ROOT, "tests", "zoo")
sys.path.insert(0, ZOO)

import traits  # noqa: E402

# tests/zoo/report.py by path, under a name of its own: tests/conformance has a
# report.py too, and whichever test module imports `report` first would give
# its module to the other (a failing entry's report then raised AttributeError).
_spec = importlib.util.spec_from_file_location("zoo_report", os.path.join(ZOO, "report.py"))
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

# The opt level users get by default. rtol 1e-3 there (run_model.tolerance).
OPT_LEVEL = 1


def _traits():
    with open(traits.TRAITS_JSON) as f:
        return json.load(f)


SUBSET = traits.select_covering(_traits()["entries"])


def test_traits_file_matches_the_catalog():
    # A stale traits.json would silently pick the subset from old traits.
    assert _traits()["fingerprint"] == traits.catalog_fingerprint(), (
        "tests/zoo/traits.json is stale: run `python tests/zoo/traits.py --write`")


def test_subset_covers_every_trait_value():
    entries = _traits()["entries"]
    every = set().union(*(set(traits.trait_values(d["traits"])) for d in entries.values() if "traits" in d))
    covered = set().union(*(set(traits.trait_values(entries[n]["traits"])) for n in SUBSET))
    assert covered == every
    assert 10 <= len(SUBSET) <= 30, SUBSET


@pytest.fixture(scope="module")
def subset_results(tmp_path_factory):
    return _run_subset(tmp_path_factory.mktemp("zoo"), ["--subset"])


# Covering-subset entries that pass under compile, chosen for speed and spread: convolutions
# (bit; resnet, whose first forward sets config.problem_type, so Dynamo recompiles at step 2),
# rotary attention with a QA head (falcon), a causal LM (mpt), a masked LM (squeezebert),
# and audio with graph breaks (hubert: 8 breaks, 12 graphs).
COMPILE_SLICE = ["bit/image_cls", "falcon/qa", "hubert/ctc", "mpt/causal_lm", "resnet/image_cls",
                 "squeezebert/masked_lm"]
COMPILE_ENTRIES = SUBSET if os.environ.get("ZOO_COMPILE_SUBSET") == "all" else COMPILE_SLICE


def _run_subset(tmp, extra):
    out = tmp / "results.json"
    cmd = [sys.executable, os.path.join(ZOO, "runner.py"), "--opt-level", str(OPT_LEVEL),
           "--out", str(out), "--cache-dir", str(tmp / "cache"), "--jobs", "2", "--timeout", "400"] + extra
    # Tiered compilation as users get it (conftest.py turns it off for the
    # rest of the suite): a graph's first runs are tier 0, later ones tier 1.
    env = dict(os.environ, TORCH_NEURON_TIERED_COMPILE="1")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(out) as f:
        return json.load(f)["results"]


@pytest.fixture(scope="module")
def compiled_results(tmp_path_factory):
    pattern = "^(" + "|".join(re.escape(n) for n in COMPILE_ENTRIES) + ")$"
    return _run_subset(tmp_path_factory.mktemp("zoo_compile"), ["--compile", "-k", pattern])


def _check(r, name):
    assert r is not None, f"{name} was not run"
    if r["status"] == "pass":
        assert r["compare"]["ok"] and r["settled"]
        if r.get("mode") == "infer":  # encode's embeddings, or every step of a sampling loop, run twice
            assert r["compare"]["n_tensors"] >= 1 and r["compare"]["repeatable"]
        else:  # losses, logits, gradients and parameters
            assert r["compare"]["n_tensors"] > 3
        return
    assert r["status"] != "config-broken", f"{name} is in the subset but broken on the CPU: {r.get('cpu_error')}"
    cause = report.cause_of(r)
    why = report.known_reason(cause)
    detail = (r.get("mismatch") or (r.get("error") or {}).get("message") or (r.get("crash") or {}).get("how")
              or "")
    if why:
        pytest.xfail(f"{cause}: {why[:200]}")
    pytest.fail(f"{name}: {r['status']}: {detail}\ncause: {cause}")


@pytest.mark.parametrize("name", SUBSET)
def test_zoo_entry_matches_cpu(subset_results, name):
    _check(subset_results.get(name), name)


@pytest.mark.parametrize("name", COMPILE_ENTRIES)
def test_zoo_entry_matches_cpu_under_torch_compile(compiled_results, name):
    r = compiled_results.get(name)
    assert r is not None and r.get("compile"), f"{name} was not run under compile"
    if r["status"] == "pass":
        d = r["dynamo"]
        # Compiled for real: graphs traced into programs at step 1 and run as
        # programs by step 3, none op by op, none left to Dynamo's eager fallback.
        assert d["graphs"][0] > 0 and d["traces"][0] > 0 and d["runs"][-1] > 0, d
        assert sum(d["op_by_op"]) == 0 and d["aot_not_ok"] == 0, d
    _check(r, name)


def test_compile_report_groups_failures_by_op_and_compares_with_eager():
    def failing(line):
        msg = (f"torch.compile(backend='neuron'): a forward graph cannot compile as one program: "
               f"aten.nonzero.default (/x/modeling_a.py:{line}) needs its operands' values")
        return {"status": "error", "error": {"type": "NotImplementedError", "message": msg, "phase": "step 1 forward"},
                "dynamo": {"graphs": [3], "traces": [2], "runs": [0], "op_by_op": [0], "graph_breaks": 1,
                           "graph_break_reasons": [["Data-dependent branching", 1]], "aot_not_ok": 0}}

    ok = {"status": "pass", "neuron_s": 2.0,
          "dynamo": {"graphs": [2, 0, 0], "traces": [2, 0, 0], "runs": [0, 2, 2], "op_by_op": [0, 0, 0],
                     "graph_breaks": 0, "graph_break_reasons": [], "aot_not_ok": 0}}
    compiled = {"meta": {"opt_level": 0, "compile": True, "jobs": 1, "wall_s": 120, "not_run": ["d/x"]},
                "results": {"a/x": failing(12), "b/x": failing(345), "c/x": ok}}
    eager = {"meta": {"opt_level": 0}, "results": {n: {"status": "pass"} for n in ("a/x", "b/x", "c/x")}}
    text = "\n".join(report.render_compiled(compiled, {0: eager}))
    assert "**3** entries run, 1 not reached" in text
    assert "Pass rate over valid entries: **1/3 = 33.3%**" in text
    assert "of 3 entries in both, 2 pass eagerly but not under compile, 0 pass only under compile" in text
    assert ("- **NotImplementedError: a forward graph cannot compile as one program: aten.nonzero.default** (2): "
            "no known reason yet") in text
    assert "| `c/x` | pass | 2/0/0 | 2/0/0 | 0/2/2 | 0 | 2 |" in text
