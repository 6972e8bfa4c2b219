"""The demo: train a small MLP on the neuron device and print what happened.

    python -m torch_neuron.demo [--steps 30] [--batch 64] [--no-compare]

The task is built in (no download): tell points of an inner disc from points of
an outer ring.
Each step prints the loss; the end prints the device's counters and memory and,
unless --no-compare, the largest difference from the same run on the CPU.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import List

import torch
from torch import nn

import torch_neuron


def rings(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Points in 2-D: label 0 inside a disc of radius 0.45, label 1 on a ring 0.6-1.0."""
    u = torch.rand(n, generator=generator)
    angle = torch.rand(n, generator=generator) * 2 * math.pi
    label = (u > 0.5).long()
    radius = torch.where(label.bool(), 0.6 + 0.4 * u, 0.45 * u)
    return torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1), label


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))


def train(device: str, steps: int, batch: int, seed: int, verbose: bool) -> List[float]:
    torch.manual_seed(seed)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
    data = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        x, y = rings(batch, data)
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if device.startswith("neuron"):
            torch_neuron.mark_step()
        losses.append(loss.item())
        if verbose:
            print(f"step {step + 1:3d}/{steps}  loss {losses[-1]:.5f}  lr {scheduler.get_last_lr()[0]:.4f}")
    return losses


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-compare", action="store_true", help="skip the CPU reference run")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1:
        parser.error("--steps and --batch must be positive")

    print(f"torch_neuron {torch_neuron.__version__} on torch {torch.__version__}: "
          f"{torch.neuron.device_count()} neuron device(s), mode {torch_neuron.config.current()['mode']}")
    print(f"training a 2-64-64-2 MLP (disc vs ring) for {args.steps} steps (batch {args.batch}) on neuron:0")
    torch_neuron.metrics.reset()
    torch.neuron.reset_peak_memory_stats()
    start = time.perf_counter()
    losses = train("neuron", args.steps, args.batch, args.seed, verbose=True)
    elapsed = time.perf_counter() - start

    counters = torch_neuron.metrics.counters()
    print(f"\ndone in {elapsed:.2f} s; loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
          f"{counters.get('graph.compile.count', 0)} graphs compiled, "
          f"{counters.get('graph.cache_hit.count', 0)} steps ran from the cache")
    print(torch_neuron.metrics.report())
    print(f"device memory: {torch.neuron.memory_allocated()} bytes allocated now, "
          f"peak {torch.neuron.max_memory_allocated()} bytes, "
          f"{torch.neuron.memory_reserved()} bytes reserved")
    if not args.no_compare:
        reference = train("cpu", args.steps, args.batch, args.seed, verbose=False)
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference))
        print(f"CPU reference: largest relative loss difference {worst:.2e} over {args.steps} steps")
        if worst > 1e-4:
            print("MISMATCH: neuron and CPU losses differ by more than 1e-4")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
