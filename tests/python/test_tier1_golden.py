"""Golden text of tier 1: for a fixed corpus of small graphs (an MLP training
step, an AdamW update, layer norm forward and backward, softmax with
cross-entropy, casts between dtypes), the IR after the compiler's passes and the generated kernels'
C++ source, compared with tests/python/golden/*.txt. Any change in fusion or
code generation shows in review as a diff of these files.

    TORCH_NEURON_UPDATE_GOLDEN=1 pytest tests/python/test_tier1_golden.py

rewrites them. The shared object's name (a hash of the machine code) is
replaced by <library>: it depends on the host compiler.
"""

import difflib
import os
import re

import pytest
import torch
import torch.nn.functional as F

import torch_neuron

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def settled(*tensors):
    """Device data: the corpus graphs start from materialized tensors."""
    torch_neuron.mark_step()
    torch_neuron.wait_device_ops()
    return tensors


def mlp_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).neuron()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = settled(torch.randn(8, 16).neuron(), torch.randint(0, 4, (8,)).neuron())
    F.cross_entropy(model(x), y).backward()
    with torch_neuron.config.override(TORCH_NEURON_STEP_ON_OPTIMIZER="0"):  # left pending
        opt.step()
    return list(model.parameters())


def adamw_update():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(64).neuron())
    p.grad = torch.randn(64).neuron()
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, foreach=False)
    settled()
    with torch_neuron.config.override(TORCH_NEURON_STEP_ON_OPTIMIZER="0"):  # left pending
        opt.step()
    return [p] + [v for v in opt.state[p].values() if v.device.type == "neuron"]


def layer_norm_forward_backward():
    torch.manual_seed(0)
    x = torch.randn(4, 32).neuron().requires_grad_()
    w, b = torch.ones(32).neuron().requires_grad_(), torch.zeros(32).neuron().requires_grad_()
    settled()
    out = F.layer_norm(x, (32,), w, b)
    gx, gw, gb = torch.autograd.grad(out, (x, w, b), torch.ones(4, 32).neuron())
    return [out, gx, gw, gb]


def softmax_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(8, 10).neuron().requires_grad_()
    target = torch.randint(0, 10, (8,)).neuron()
    settled()
    probs = torch.softmax(logits, dim=-1)
    loss = F.cross_entropy(logits, target)
    (grad,) = torch.autograd.grad(loss, logits)
    return [probs, loss, grad]


def mixed_dtypes():
    """Casts and type promotion: a bfloat16 activation and int64 positions
    promoted into float32 math, results cast to bfloat16 and int64."""
    torch.manual_seed(0)
    h = torch.randn(4, 8).to(torch.bfloat16).neuron()
    pos = torch.arange(32).reshape(4, 8).neuron()
    w = torch.randn(4, 8).neuron()
    settled()
    y = torch.sigmoid(h.float() * w + pos)
    return [y.to(torch.bfloat16), (y * 10).long()]


CORPUS = {"mlp_step": mlp_step, "adamw_update": adamw_update,
          "layer_norm_forward_backward": layer_norm_forward_backward,
          "softmax_cross_entropy": softmax_cross_entropy, "mixed_dtypes": mixed_dtypes}


def golden_text(build) -> str:
    with torch_neuron.config.override(TORCH_NEURON_OPT_LEVEL="1"):
        ir, sources = torch_neuron.debug.compiled_text(build())
    text = f"{ir}\n// ---- generated kernels ----\n{sources}"
    return re.sub(r"tn_[0-9a-f]{32}", "<library>", text)


@pytest.mark.parametrize("name", CORPUS)
def test_tier1_ir_and_kernels_match_golden_text(name):
    text = golden_text(CORPUS[name])
    path = os.path.join(GOLDEN, f"tier1_{name}.txt")
    if os.environ.get("TORCH_NEURON_UPDATE_GOLDEN") == "1":
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    with open(path) as f:
        expected = f.read()
    diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                        f"golden/tier1_{name}.txt", "now"))
    assert text == expected, "tier-1 output changed (TORCH_NEURON_UPDATE_GOLDEN=1 rewrites):\n" + diff


def test_adamw_update_is_one_kernel_reading_four_tensors_and_writing_three():
    # Weight decay, both moments and the parameter update: one pass over
    # memory, reading param, grad, exp_avg, exp_avg_sq and writing the new
    # exp_avg, exp_avg_sq and param.
    text = golden_text(adamw_update)
    assert text.count("= neuron::fused_kernel(") == 1
    assert "tn_k0: 8 ops, 4 inputs, 3 outputs" in text
    assert not re.search(r"%\d+ = aten::", text)  # no ATen call left in the graph


FALLBACK = r"""
import torch, torch_neuron
x = torch.randn(1000)
y = torch.sigmoid(torch.relu(x.neuron() * 2 + 1) * x.neuron())
torch_neuron.mark_step()
z = torch.tanh(x.neuron() * 3 - 1) * 2
torch_neuron.mark_step()
print("equal", torch.allclose(y.cpu(), torch.sigmoid(torch.relu(x * 2 + 1) * x)),
      torch.allclose(z.cpu(), torch.tanh(x * 3 - 1) * 2))
print("fallbacks", torch_neuron.metrics.counter("compile.tier1_fallback.count"))
"""


def test_missing_compiler_falls_back_to_tier_0_warns_once_and_counts():
    from child_process import run_python

    result = run_python(FALLBACK, {"CXX": "/nonexistent/c++"})
    assert result.returncode == 0, result.stderr
    assert "equal True True" in result.stdout
    assert "fallbacks 2" in result.stdout  # two graphs, each compiled at tier 0 instead
    warnings = [l for l in result.stderr.splitlines() if "tier-1 kernels did not build" in l]
    assert len(warnings) == 1, result.stderr
    assert "'/nonexistent/c++' does not run" in warnings[0]


DISK_ROUND_TRIP = r"""
import torch, torch_neuron
x = torch.arange(3000, dtype=torch.float32).neuron() / 1000
torch_neuron.mark_step()  # x's graph first: y's read would materialize x with y
y = torch.tanh(torch.sigmoid(x * 2 - 1) * x)
print("equal", torch.allclose(y.cpu(), torch.tanh(torch.sigmoid(x.cpu() * 2 - 1) * x.cpu())))
m = torch_neuron.metrics
print("counts", m.counter("graph.compile.count"), m.counter("cache.disk_hit.count"),
      m.counter("cache.corrupt.count"))
"""


def test_kernel_graph_round_trips_through_the_disk_cache():
    # Two graphs (x's at the mark_step, then y's). The second process loads
    # the first one's NEFFs, shared object included, and compiles nothing; no
    # entry may be found corrupt.
    from child_process import child_env, run_python

    env = child_env()
    first = run_python(DISK_ROUND_TRIP, {"TORCH_NEURON_CACHE_DIR": env["TORCH_NEURON_CACHE_DIR"]})
    second = run_python(DISK_ROUND_TRIP, {"TORCH_NEURON_CACHE_DIR": env["TORCH_NEURON_CACHE_DIR"]})
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "equal True" in first.stdout and "equal True" in second.stdout
    assert "counts 2 0 0" in first.stdout, first.stdout
    assert "counts 0 2 0" in second.stdout, second.stdout


def test_tier0_fallback_is_not_stored_in_the_disk_cache(tmp_path):
    # The same compiler (same fingerprint, same cache key) fails once, as a
    # killed or out-of-space compile would: that process runs the graph at tier
    # 0 but does not store it, so the next process compiles tier 1 instead of
    # loading the fallback from disk.
    from child_process import child_env, run_python

    cxx = tmp_path / "c++"
    cxx.write_text('#!/bin/sh\n'
                   'if [ "$1" = "--version" ] || [ -z "$FAIL_COMPILES" ]; then exec c++ "$@"; fi\n'
                   'echo "simulated failure" >&2; exit 1\n')
    cxx.chmod(0o755)
    env = {"TORCH_NEURON_CACHE_DIR": child_env()["TORCH_NEURON_CACHE_DIR"], "CXX": str(cxx)}
    broken = run_python(DISK_ROUND_TRIP, {**env, "FAIL_COMPILES": "1"})
    fixed = run_python(DISK_ROUND_TRIP, env)
    assert broken.returncode == 0 and fixed.returncode == 0, broken.stderr + fixed.stderr
    assert "tier-1 kernels did not build" in broken.stderr and "simulated failure" in broken.stderr
    assert "counts 2 0 0" in broken.stdout, broken.stdout
    # y's graph (a kernel: the fallback) compiles again, now at tier 1; x's
    # graph (one division, no kernel) was stored by the broken run and loads.
    assert "counts 1 1 0" in fixed.stdout, fixed.stdout
    assert "tier-1 kernels did not build" not in fixed.stderr
