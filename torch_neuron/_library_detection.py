"""How transformers, accelerate and diffusers find the neuron device, unmodified.

They detect AWS's TorchNeuron with ``importlib.util.find_spec("torch_neuronx")``
and then ``torch.neuron.is_available()``; if both hold they use device
"neuron", c10d backend "neuron" and ``torch.neuron``'s RNG and memory calls,
all of which torch_neuron provides. The second check already holds; this
module meets the first without shadowing AWS's package:

A finder appended to the end of ``sys.meta_path`` answers for the one name
``torch_neuronx``, and only when no other finder can: the finders before it
were asked first (that is why it is asked at all), and it asks the finders
after it (an editable install's finder appended later) before answering. Then
``import torch_neuronx`` runs torch_neuron's stand-in module
(_torch_neuronx_stand_in.py). So where AWS's ``torch_neuronx`` is importable,
it is what every import and every ``find_spec`` gets.

Where ``torch_xla`` is importable the finder does not answer either: the
libraries read ``torch_neuronx`` plus ``torch_xla`` as AWS's XLA-based Neuron
SDK and take torch_xla code paths (an "xla" process group under torchrun,
xla_model calls) meant for real NeuronCores. With torch_xla present they
choose the XLA device anyway.

No package metadata is faked: ``importlib.metadata.version("torch_neuronx")``
still raises, so checks that also ask for a version (diffusers'
``is_torch_neuronx_available``) stay False; diffusers finds the device through
``torch.accelerator`` first, which needs no detection.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

NAME = "torch_neuronx"
_STAND_IN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_neuronx_stand_in.py")


class StandInFinder(importlib.abc.MetaPathFinder):
    """Finds torch_neuron's stand-in for ``torch_neuronx`` when nothing else
    on ``sys.meta_path`` finds a module of that name (and torch_xla is not
    importable). Asks for no other name."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME or path is not None:
            return None
        if self._found_elsewhere(fullname, target) or self._found_elsewhere("torch_xla", None):
            return None
        return importlib.util.spec_from_file_location(NAME, _STAND_IN)

    def _found_elsewhere(self, fullname, target) -> bool:
        # Finders before this one were asked already when the import system
        # asks this one; asking every other finder also covers a direct call.
        for finder in list(sys.meta_path):
            if finder is self or isinstance(finder, StandInFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is not None and find_spec(fullname, None, target) is not None:
                return True
        return False


def install() -> None:
    """Appends the finder to ``sys.meta_path`` (once per process)."""
    if not any(isinstance(finder, StandInFinder) for finder in sys.meta_path):
        sys.meta_path.append(StandInFinder())


def is_stand_in(module) -> bool:
    """Whether ``module`` (an imported ``torch_neuronx``) is torch_neuron's stand-in."""
    return getattr(module, "__torch_neuron_stand_in__", False) is True
