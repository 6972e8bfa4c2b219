"""Sharing of parameters and buffers across ``Module.to("neuron")`` and back.

On the CPU and CUDA, ``Module._apply`` (behind ``.to()``, ``.cuda()``,
``.half()``, ``to_empty()``...) converts a parameter in place with
``param.data = converted``, so a Parameter shared by two modules (a language
model's tied embedding and output head) stays one Parameter. PyTorch cannot
do that across tensor types: a neuron tensor is a FunctionalTensorWrapper, a
CPU tensor a plain TensorImpl, so for every parameter that moves to or from
neuron ``_apply`` makes a new Parameter per module that holds it. A tied head
and embedding would then train as two parameters, and gradients and losses
part from the CPU's silently.

``install()`` wraps ``Module._apply``. For a call that moves tensors to or from
neuron, the conversion runs once per tensor object (the same object gives the
same converted tensor, so shared buffers stay shared), and every module slot
that held one Parameter ends up holding the one new Parameter made for it,
whatever the nesting (``register_parameter`` of an existing Parameter,
parametrizations' ``original``, modules shared by two parents).

That one Parameter is then the Parameter the module held before: its contents
are exchanged with the new one (``torch.utils.swap_tensors``), as PyTorch does
when ``torch.__future__.set_swap_module_params_on_conversion(True)``. An
optimizer built before ``model.to("neuron")`` (the usual order on CUDA, where
``param.data =`` keeps identities) therefore updates the parameters the model
uses; without the exchange it would step stale CPU tensors while the model
trained nothing, silently. A Parameter that cannot be exchanged (an autograd
graph still holds it, or a weak reference exists) keeps PyTorch's new object
and a warning names it. Conversions that do not touch neuron keep PyTorch's
behaviour exactly.
"""

from __future__ import annotations

import functools
import threading
import warnings
from typing import Callable, Dict, List, Tuple

import torch

_DEVICE = "neuron"
_state = threading.local()
_original_apply = torch.nn.Module._apply


def _crosses_neuron(before: torch.Tensor, after: torch.Tensor) -> bool:
    """True when a conversion moved a tensor onto or off the neuron device."""
    return (before.device.type == _DEVICE) != (after.device.type == _DEVICE)


def _slots(module: torch.nn.Module) -> List[Tuple[Dict[str, torch.Tensor], str, torch.Tensor]]:
    """Every (dict, key, tensor) of the module tree's parameters and buffers,
    a module reached twice (shared by two parents) once per path."""
    found = []
    for _, m in module.named_modules(remove_duplicate=False):
        for table in (m._parameters, m._buffers):
            for key, value in table.items():
                if value is not None:
                    found.append((table, key, value))
    return found


def _apply(self: torch.nn.Module, fn: Callable, recurse: bool = True):
    if getattr(_state, "active", False):  # a nested call of the same conversion
        return _original_apply(self, fn, recurse)
    slots = _slots(self) if recurse else [
        (table, key, value) for table in (self._parameters, self._buffers)
        for key, value in table.items() if value is not None]
    # id -> (tensor, converted): the tensor is kept so its id is not reused.
    converted: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}

    def convert_once(t):
        hit = converted.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        result = fn(t)
        if isinstance(t, torch.Tensor) and isinstance(result, torch.Tensor) and _crosses_neuron(t, result):
            converted[id(t)] = (t, result)
        return result

    _state.active = True
    try:
        result = _original_apply(self, convert_once, recurse)
    finally:
        _state.active = False
    if converted:
        _retie(slots)
        _keep_identities(self, slots)
    return result


def _retie(slots) -> None:
    """Points every slot that held one tensor before the conversion at the one
    tensor the first such slot holds now, where that tensor moved to or from
    neuron (PyTorch made a new Parameter per slot for those)."""
    first: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}
    for table, key, before in slots:
        now = table.get(key)
        if now is None:
            continue
        seen = first.get(id(before))
        if seen is None:
            first[id(before)] = (before, now)
        elif seen[1] is not now and _crosses_neuron(before, seen[1]):
            table[key] = seen[1]


def _keep_identities(root: torch.nn.Module, slots) -> None:
    """Puts each Parameter object that held a slot before the conversion back
    in it, holding the converted contents, where the conversion crossed neuron
    and PyTorch made a new Parameter."""
    names = {id(p): name for name, p in root.named_parameters(remove_duplicate=False)} if slots else {}
    done: Dict[int, Tuple[torch.nn.Parameter, torch.Tensor]] = {}
    for table, key, before in slots:
        now = table.get(key)
        if now is None or now is before or not isinstance(before, torch.nn.Parameter):
            continue
        if not _crosses_neuron(before, now):
            continue
        hit = done.get(id(before))
        if hit is None:
            keep = _swap(before, now, names.get(id(now), key))
            done[id(before)] = (before, before if keep else now)
            hit = done[id(before)]
        table[key] = hit[1]


def _swap(before: torch.nn.Parameter, now: torch.Tensor, name: str) -> bool:
    """Exchanges the contents of ``before`` and ``now``; False (with a warning)
    when PyTorch refuses the exchange.

    ``before`` keeps its Python class and attributes, as ``param.data =``
    keeps them on CUDA: PyTorch's new Parameter is a plain one, and the
    exchange would give ``before`` its class and (empty) ``__dict__``. A lazy
    module's UninitializedParameter would become an initialized Parameter of
    no elements (LazyConv1d().to("neuron") then failed in its first forward),
    and a Parameter subclass or a tag set on a parameter would be lost."""
    if type(now) is not type(before):
        now.__class__ = type(before)
    now.__dict__ = dict(before.__dict__)
    try:
        torch.utils.swap_tensors(before, now)
        return True
    except RuntimeError as error:
        warnings.warn(
            f"Module.to(): parameter '{name}' moved to {now.device} as a new Parameter object "
            f"because the old one could not be exchanged in place ({error}). Anything that "
            f"holds the old object, such as an optimizer built before .to(), still sees the "
            f"tensor on {before.device}: build the optimizer after moving the model, or free "
            f"the autograd graph that holds the parameter first.",
            stacklevel=4)
        return False


def _wrap_apply(original):
    """The replacement of torch.nn.Module._apply (_patches.py): it calls the
    original, and only a conversion that moves a tensor to or from neuron gets
    more (``__wrapped__`` is the original)."""
    functools.update_wrapper(_apply, original)
    _apply.__module__, _apply.__qualname__ = __name__, "_apply"
    return _apply
