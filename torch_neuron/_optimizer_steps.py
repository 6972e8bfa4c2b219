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

from typing import Tuple

import torch
from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

from . import _C, graphs

# Steps ended by an optimizer's step (one per device), beside mark_step.count,
# which counts these mark_steps too.
COUNTER = "step.ended_by_optimizer.count"

_handle = None

def neuron_devices(optimizer: Optimizer) -> Tuple[int, ...]:
    """The indices of the neuron devices holding ``optimizer``'s parameters,
    sorted. Looked up at every step, cheaply: ``is_cpu`` and ``get_device()``
    are fast, a parameter's device type is read only until its index is
    found, and with one device the first neuron parameter answers."""
    one_device = _C._device_count() == 1
    found = set()
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.is_cpu:
                continue
            index = param.get_device()
            if index < 0 or index in found or param.device.type != "neuron":
                continue
            if one_device:
                return (index,)
            found.add(index)
    return tuple(sorted(found))


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
