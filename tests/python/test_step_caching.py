"""The lazy core's promise for training loops: a model trains on neuron exactly
as on the CPU (same seeds, float32), and once the step's graph is compiled every
later step runs from the cache, with a learning-rate schedule and dropout on."""

import os
import subprocess
import sys

import pytest
import torch

import torch_neuron
from child_process import fresh_cache_dir
from models import MLP, TinyDecoder, loss_fn, make_batches

STEPS = 20


def train(kind, device, steps=STEPS, batches=None):
    torch.manual_seed(0)
    model = (MLP() if kind == "mlp" else TinyDecoder()).to(device)
    # Seed again after building the model: its initialisation drew from the CPU
    # generator only, so both runs now draw dropout masks from the same state.
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    losses, compiles, hits = [], [], []
    for x, y in batches or make_batches(kind, steps, batch=8):
        x, y = x.to(device), y.to(device)
        loss = loss_fn(kind, model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if device == "neuron":
            torch_neuron.mark_step()
            counters = torch_neuron.metrics.counters()
            compiles.append(counters.get("graph.compile.count", 0))
            hits.append(counters.get("graph.cache_hit.count", 0))
        losses.append(loss.item())
    return losses, compiles, hits


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_training_matches_cpu_and_steady_steps_only_hit_the_cache(kind, metrics):
    neuron_losses, compiles, hits = train(kind, "neuron")
    cpu_losses, _, _ = train(kind, "cpu")
    for step, (n, c) in enumerate(zip(neuron_losses, cpu_losses)):
        assert abs(n - c) <= 1e-4 * abs(c), f"step {step}: neuron {n} vs cpu {c}"
    # Step 1 compiles the step; step 2 compiles once more because SGD creates its
    # momentum buffers in step 1 (clone) and updates them from step 2 on. After
    # that nothing compiles and each mark_step is one cache hit; loss.item()
    # after mark_step reads materialized data and adds no graph.
    assert compiles == [1, 2] + [2] * (STEPS - 2)
    assert hits == [0, 0] + list(range(1, STEPS - 1))
    assert torch_neuron.metrics.fallback_counts() == {}


def test_learning_rate_and_scalar_changes_reuse_the_graph(metrics):
    x = torch.randn(4, 4).neuron()
    for lr in (0.1, 0.05, 0.025, 0.0125):
        y = x * lr + lr / 2
        torch_neuron.mark_step()
        assert torch.allclose(y.cpu(), x.cpu() * lr + lr / 2)
    assert metrics.counter("graph.compile.count") == 1
    assert metrics.counter("graph.cache_hit.count") == 3


CHANGED_BATCH = r"""
import sys, torch, torch_neuron
sys.path.insert(0, {tests!r})
from models import MLP, loss_fn, make_batches
torch.manual_seed(0)
model = MLP(p=0.0).to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = make_batches("mlp", 3, batch=8) + make_batches("mlp", 1, batch=4)
for x, y in batches:
    loss = loss_fn("mlp", model, x.to("neuron"), y.to("neuron"))
    opt.zero_grad(); loss.backward(); opt.step()
    torch_neuron.mark_step()
print("compiles", torch_neuron.metrics.counter("graph.compile.count"))
print("reason", torch_neuron.debug.last_recompile_reason())
"""


def test_changed_batch_size_compiles_once_more_and_debug_output_names_the_input():
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NEURON_")}
    env["TORCH_NEURON_DEBUG"] = "1"
    env["TORCH_NEURON_CACHE_DIR"] = fresh_cache_dir()  # compiles, not disk hits of earlier runs
    env["TORCH_NEURON_TIERED_COMPILE"] = "0"  # one compile per new graph
    result = subprocess.run([sys.executable, "-c", CHANGED_BATCH.format(tests=tests)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    # Plain SGD: steps 1-3 share one graph; the batch of 4 compiles one more.
    assert "compiles 2" in result.stdout
    reason = [l for l in result.stdout.splitlines() if l.startswith("reason ")][0]
    assert "changed from device_data f32[8,16] to device_data f32[4,16]" in reason
    assert "changed from device_data i64[8] to device_data i64[4]" in reason
    # The same reason went to stderr, naming the line of the sync: the
    # optimizer's step, which ends the step (TORCH_NEURON_STEP_ON_OPTIMIZER).
    lines = [l for l in result.stderr.splitlines() if l.startswith("torch_neuron: compiling")]
    assert len(lines) == 1, result.stderr
    assert "<string>:11:" in lines[0] and "f32[8,16] to device_data f32[4,16]" in lines[0]


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "for_loop"])
@pytest.mark.parametrize("optimizer", [torch.optim.Adam, torch.optim.AdamW], ids=["adam", "adamw"])
def test_adam_steps_match_cpu_and_reuse_one_graph(optimizer, foreach, metrics):
    # Adam's bias corrections change every step; they reach the graph as scalar
    # parameters (lists of them for foreach), so the step graph is reused.
    torch.manual_seed(0)
    model = MLP(p=0.0).neuron()
    opt = optimizer(model.parameters(), lr=1e-3, foreach=foreach)
    torch.manual_seed(0)
    reference = MLP(p=0.0)
    ref_opt = optimizer(reference.parameters(), lr=1e-3, foreach=foreach)
    compiles = []
    for x, y in make_batches("mlp", 6, batch=8):
        loss = loss_fn("mlp", model, x.neuron(), y.neuron())
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch_neuron.mark_step()
        compiles.append(metrics.counter("graph.compile.count"))
        ref_loss = loss_fn("mlp", reference, x, y)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        assert abs(loss.item() - ref_loss.item()) <= 1e-5 * abs(ref_loss.item())
    # Step 1 creates the moment buffers with zeros_like: factories are device
    # buffers, not graph nodes, so step 1 traces the same graph as every later
    # step and one compile serves all.
    assert compiles == [1, 1, 1, 1, 1, 1]
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-5, atol=1e-6)
