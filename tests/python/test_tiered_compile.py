"""Tiered compilation (TORCH_NEURON_TIERED_COMPILE, on by default): a graph
whose tier-1 program is in no cache runs at once at tier 0 while tier 1
compiles in the background; later syncs take tier 1 once it is ready, and a
tier-1 program in the disk cache is used from the first sync.

The rest of the suite runs with it off (conftest.py), so that compile counts
are exact; here it is on, and the counters say which tier ran."""

import json
import os
import subprocess
import sys

import pytest
import torch

import torch_neuron
from torch_neuron import _C, metrics

HERE = os.path.dirname(os.path.abspath(__file__))

STAND_INS = "compile.tiered.stand_in.count"
QUEUED = "compile.tiered.background.count"
FAILED = "compile.tiered.background_failed.count"


@pytest.fixture
def tiered():
    with torch_neuron.config.override(TORCH_NEURON_TIERED_COMPILE="1", TORCH_NEURON_OPT_LEVEL="1"):
        yield
    _C._wait_background_compiles()


def step(x, w):
    # A graph of this test's own shapes, so no other test compiled it.
    y = torch.tanh(x @ w).sum(1) * 0.5 + x.mean(1)
    torch_neuron.mark_step()
    return y


def test_a_new_graph_runs_at_tier_0_then_at_tier_1_with_the_same_values(tiered):
    torch.manual_seed(0)
    x, w = torch.randn(37, 23), torch.randn(23, 23)
    expected = torch.tanh(x @ w).sum(1) * 0.5 + x.mean(1)
    xn, wn = x.to("neuron"), w.to("neuron")
    metrics.reset()
    first = step(xn, wn).cpu()
    assert (metrics.counter(STAND_INS), metrics.counter(QUEUED)) == (1, 1)
    # A second sync before tier 1 is ready runs the stand-in again and queues nothing.
    second = step(xn, wn).cpu()
    assert metrics.counter(QUEUED) == 1
    _C._wait_background_compiles()
    assert metrics.counter(FAILED) == 0
    stand_ins = metrics.counter(STAND_INS)
    assert stand_ins in (1, 2)  # 2 unless tier 1 was ready for the second sync
    third = step(xn, wn).cpu()
    assert metrics.counter(STAND_INS) == stand_ins  # tier 1 from memory
    assert metrics.counter(QUEUED) == 1
    for result in (first, second, third):
        torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5)
    # Tier 0 and tier 1 agree within the tier-1 tolerance (test_tier1_*.py
    # check this op by op against the CPU).
    torch.testing.assert_close(first, third, rtol=1e-5, atol=1e-6)


def test_captured_steps_record_tier_1(tiered):
    torch.manual_seed(0)
    w = torch.randn(19, 19, device="neuron")
    x = torch.randn(19, 19, device="neuron")
    torch_neuron.mark_step()
    g = torch_neuron.NeuronGraph()
    capture = torch_neuron.graph(g)
    # Entering runs what is pending, which may include views left by earlier
    # tests (brought up to date from their mutated bases): counted from here.
    capture.__enter__()
    metrics.reset()
    y = (x @ w).relu()
    capture.__exit__(None, None, None)
    assert (metrics.counter(STAND_INS), metrics.counter(QUEUED)) == (0, 0), metrics.counters()
    g.replay()
    torch.testing.assert_close(y.cpu(), (x.cpu() @ w.cpu()).relu(), rtol=1e-5, atol=1e-5)


WORKER = r"""
import json, sys, torch
sys.path.insert(0, {here!r})
import torch_neuron
from torch_neuron import metrics
from models import MLP, loss_fn, make_batches
torch.manual_seed(0)
model = MLP().to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = make_batches("mlp", 1, batch=32)[0]
x, y = x.to("neuron"), y.to("neuron")
torch_neuron.mark_step()
losses, shares = [], []
if {eager!r}:
    torch_neuron.set_mode("eager")
for _ in range(4):
    loss = loss_fn("mlp", model, x, y)
    opt.zero_grad(); loss.backward(); opt.step()
    torch_neuron.mark_step()
    losses.append(loss.item())
    if {eager!r}:
        torch_neuron._C._eager_wait_compiles()  # this step's group compiles end before the next step
        shares.append(metrics.grouped_share(1))
if {wait!r}:
    torch_neuron._C._wait_background_compiles()
print(json.dumps(dict(losses=losses, shares=shares, stand_ins=metrics.counter("compile.tiered.stand_in.count"),
                      queued=metrics.counter("compile.tiered.background.count"),
                      compiles=metrics.counter("graph.compile.count"),
                      disk_hits=metrics.counter("cache.disk_hit.count"))))
"""


def run_worker(cache_dir, tiered, wait=False, eager=False):
    env = dict(os.environ, TORCH_NEURON_CACHE_DIR=str(cache_dir), TORCH_NEURON_COMPILE_SERVICE="off",
               TORCH_NEURON_TIERED_COMPILE=tiered, TORCH_NEURON_OPT_LEVEL="1")
    proc = subprocess.run([sys.executable, "-c", WORKER.format(here=HERE, wait=wait, eager=eager)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_training_is_the_same_and_the_next_process_starts_at_tier_1(tmp_path):
    reference = run_worker(tmp_path / "untiered", "0")
    assert reference["stand_ins"] == 0 and reference["queued"] == 0
    cold = run_worker(tmp_path / "tiered", "1", wait=True)
    # Every graph of the run was new: each ran at tier 0 first and queued its
    # tier-1 compile once (the first step's graph, and the steps' with momentum).
    assert cold["queued"] >= 2 and cold["stand_ins"] >= cold["queued"]
    torch.testing.assert_close(torch.tensor(cold["losses"]), torch.tensor(reference["losses"]),
                               rtol=1e-5, atol=1e-6)
    # The tier-1 programs reached the disk cache: a second process takes them
    # from the first sync. (At exit, a running tier-1 compile ends first and
    # queued ones are dropped; this run waited for all of them.)
    warm = run_worker(tmp_path / "tiered", "1")
    assert (warm["stand_ins"], warm["queued"], warm["compiles"]) == (0, 0, 0)
    assert warm["disk_hits"] == cold["queued"]
    assert warm["losses"] == reference["losses"]


def test_eager_groups_run_as_graphs_from_the_third_step_on_a_cold_cache(tmp_path):
    # A group's first compile is its tier-0 stand-in (milliseconds), so it runs
    # as one graph from its next occurrence; without tiering it waited for the
    # system C++ compiler, seconds on a cold cache. Step 2 is op by op either
    # way (the optimizer's new state makes new groups).
    reference = run_worker(tmp_path / "lazy", "0")
    cold = run_worker(tmp_path / "eager", "1", eager=True)
    assert cold["shares"][0] < 0.5 and cold["shares"][2] == 1.0 and cold["shares"][3] == 1.0, cold["shares"]
    assert cold["queued"] > 0 and cold["stand_ins"] > 0
    torch.testing.assert_close(torch.tensor(cold["losses"]), torch.tensor(reference["losses"]),
                               rtol=1e-5, atol=1e-6)
