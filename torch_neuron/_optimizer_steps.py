"""The optimizer's step ends a step: training loops that never call mark_step
(transformers' Trainer, accelerate, Lightning-style loops, a user's own) still
run one compiled graph per step.

A lazy device runs traced ops only at a sync. A loop without mark_step syncs
only where it reads a value (a logged loss), so each graph would carry a
different, growing slice of the steps traced since the last read, and compile
anew. PyTorch calls global optimizer step hooks after every
``Optimizer.step()``; the hook here calls ``torch_neuron.mark_step`` for the
neuron devices that hold the optimizer's parameters. So:

* gradient accumulation keeps working: only the optimizer's step ends a step,
  the micro-batches before it are one graph with it;
* an explicit ``mark_step`` after ``optimizer.step()`` still works: it finds
  nothing pending and compiles nothing;
* an optimizer of CPU parameters only is left alone;
* while ``torch_neuron.graph()`` captures a step on a device, the hook leaves
  that device alone (a captured step must stay one graph: its end runs it);
* in eager mode (``TORCH_NEURON_MODE=eager``) ops have run already, and the
  mark_step only ends eager mode's step (its grouped-share bookkeeping);
* inside a region ``torch.compile`` traces, nothing happens (the compiled
  region launches its own graphs);
* ``TORCH_NEURON_STEP_ON_OPTIMIZER=0`` (or ``torch_neuron.config.override``)
  turns it off; the setting is read at every optimizer step.
"""

from __future__ import annotations

import weakref
from typing import Dict, Tuple

import torch
from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

from . import _C, graphs

# Steps ended by an optimizer's step (one per device), beside mark_step.count,
# which counts these mark_steps too.
COUNTER = "step.ended_by_optimizer.count"

_handle = None

# optimizer -> (shape of its param_groups, neuron device indices of its
# parameters). A parameter's device never changes (a neuron tensor's data
# cannot be set to another device's), so the indices are found again only when
# the groups change (add_param_group, a replaced params list).
_devices_of: "weakref.WeakKeyDictionary[Optimizer, Tuple[tuple, Tuple[int, ...]]]" = (
    weakref.WeakKeyDictionary())


def _groups_key(optimizer: Optimizer) -> tuple:
    return tuple((id(group["params"]), len(group["params"])) for group in optimizer.param_groups)


def neuron_devices(optimizer: Optimizer) -> Tuple[int, ...]:
    """The indices of the neuron devices holding ``optimizer``'s parameters, sorted."""
    key = _groups_key(optimizer)
    cached = _devices_of.get(optimizer)
    if cached is not None and cached[0] == key:
        return cached[1]
    found: Dict[int, None] = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            if isinstance(param, torch.Tensor) and not param.is_cpu and param.device.type == "neuron":
                found[param.device.index] = None
    devices = tuple(sorted(found))
    _devices_of[optimizer] = (key, devices)
    return devices


def _end_step(optimizer, args, kwargs) -> None:
    if torch.compiler.is_compiling():
        return
    if not _C._config()["step_on_optimizer"]:
        return
    for index in neuron_devices(optimizer):
        if not graphs._is_capturing(index):
            _C._mark_step(index)
            _C._metrics_increment(COUNTER, 1)


def install() -> None:
    """Registers the global optimizer step post hook (once per process)."""
    global _handle
    if _handle is None:
        _handle = register_optimizer_step_post_hook(_end_step)
