"""The zoo's measurements of a mismatch (tests/zoo/run_model.py) and its seeding.

perturbed_check explains a mismatch only where the CPU's own float32 run moves as
far when the initial weights move by one ulp: it has to accept a max-pool tie broken
the other way, and refuse a wrong value in a smooth model. run_entry trains both
devices from the same seed, so a model with dropout in its forward is compared, not
set aside as config-broken.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import sys
from typing import Any, Callable, Dict

import torch

ZOO = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "zoo")
sys.path.insert(0, ZOO)

import run_model  # noqa: E402


class _TiedMaxPool(torch.nn.Module):
    """64 windows of two weights with equal values: max-pooling picks the first of
    each on the CPU, and a one-ulp change of either decides the window anew."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 2.0, 64).repeat_interleave(2))

    def forward(self, x, target):
        pooled = torch.nn.functional.max_pool1d((self.w * x)[None, None], 2)[0, 0]
        return {"loss": ((pooled - target) ** 2).sum(), "logits": pooled}


class _Smooth(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 4)

    def forward(self, x, target):
        out = self.lin(x)
        return {"loss": torch.nn.functional.mse_loss(out, target), "logits": out}


def _train(model, batch):
    """A copy of `model` trained (as run_entry's CPU reference is): `model` keeps its weights."""
    torch.manual_seed(0)
    return run_model.train(copy.deepcopy(model), batch, "cpu", run_model.Phase())


def test_perturb_weights_moves_each_weight_at_most_one_ulp_either_way():
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    moved = run_model.perturb_weights(model, torch.Generator().manual_seed(1))
    for p, q in zip(model.parameters(), moved.parameters()):
        up, down = torch.nextafter(p, torch.tensor(math.inf)), torch.nextafter(p, torch.tensor(-math.inf))
        assert bool(((q == p) | (q == up) | (q == down)).all())
        assert bool((q == up).any()) and bool((q == down).any()) and bool((q == p).any())
    assert model.weight.data_ptr() != moved.weight.data_ptr()


def test_perturbed_check_accepts_a_max_pool_tie_broken_the_other_way():
    model = _TiedMaxPool()
    batch = {"x": torch.ones(128), "target": torch.zeros(64)}
    cpu = _train(model, batch)
    # The other device rounds differently: in window 5 the second weight ends one ulp
    # above the first, so that window's gradient goes to the second weight.
    other = _TiedMaxPool()
    with torch.no_grad():
        other.w[11] = torch.nextafter(other.w[11], torch.tensor(math.inf))
    neu = _train(other, batch)
    assert not torch.equal(neu["grads"]["w"], cpu["grads"]["w"])
    out = run_model.perturbed_check(model, batch, 0, cpu, neu, ["grad w[step 1]", "param w[after step 3]"])
    assert out["within_spread"], out
    assert all(r["perturbed_vs_cpu32"] > 0 for r in out["tensors"])


def test_perturbed_check_refuses_a_wrong_value_in_a_smooth_model():
    torch.manual_seed(0)
    model = _Smooth()
    batch = {"x": torch.randn(8, 16), "target": torch.randn(8, 4)}
    cpu = _train(model, batch)
    neu = dict(cpu, params=dict(cpu["params"]))
    neu["params"]["lin.bias"] = cpu["params"]["lin.bias"] * (1 + 1e-4)   # a 1e-4 relative error
    out = run_model.perturbed_check(model, batch, 0, cpu, neu, ["param lin.bias[after step 3]"])
    assert not out["within_spread"], out
    row = out["tensors"][0]
    assert row["neuron_vs_cpu32"] > 100 * row["perturbed_vs_cpu32"], row


class _DropoutHead(torch.nn.Module):
    """A classifier with dropout before its head, as timm's rexnet and ghostnet have."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(32, 32)
        self.drop = torch.nn.Dropout(0.3)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, pixel_values, labels):
        logits = self.head(self.drop(torch.relu(self.body(pixel_values))))
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


@dataclasses.dataclass
class _Entry:
    name: str = "test-dropout_head/classify"
    model_type: str = "dropout_head"
    head: str = "classify"
    class_name: str = "_DropoutHead"
    library: str = "test"
    mode: str = "train"
    make: Callable[[], torch.nn.Module] = _DropoutHead

    def build(self, seed: int = 0) -> torch.nn.Module:
        torch.manual_seed(seed)
        model = self.make()
        model.zoo_lr = 1e-2
        return model.train()

    def batch(self, model, seed: int = 0) -> Dict[str, Any]:
        g = torch.Generator().manual_seed(1000 + seed)
        return {"pixel_values": torch.randn(16, 32, generator=g), "labels": torch.randint(0, 5, (16,), generator=g)}


def test_entry_with_dropout_trains_from_the_cpus_seed_and_matches():
    res = run_model.run_entry(_Entry())
    assert res["status"] == "pass", (res.get("mismatch"), res.get("cpu_error"), res.get("error"))
    assert res["compare"]["n_tensors"] > 3 and res["losses_neuron"] == res["losses_cpu"]
