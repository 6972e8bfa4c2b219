"""torch_neuron's stand-in for the name ``torch_neuronx``, not AWS's package.

transformers, accelerate and diffusers look for the neuron device by asking
whether a module named ``torch_neuronx`` can be imported (AWS's TorchNeuron is
imported under that name) and then whether ``torch.neuron.is_available()``.
Where AWS's ``torch_neuronx`` is not installed, ``import torch_neuronx`` finds
this module instead (torch_neuron/_library_detection.py), so those checks
succeed for torch_neuron's own ``neuron`` device. Where AWS's package is
installed, it is always the one imported and this module is never used.

It provides none of AWS's API: ``torch_neuronx.trace`` and the like raise an
AttributeError that says so. ``torch_neuronx.__torch_neuron_stand_in__`` is
True here and absent from AWS's package.
"""

import torch_neuron  # noqa: F401  (the device this name stands in for)

__torch_neuron_stand_in__ = True


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        f"module 'torch_neuronx' has no attribute '{name}': this torch_neuronx is torch_neuron's "
        "stand-in, which only lets libraries detect the neuron device (AWS's torch_neuronx is not "
        "installed); use torch.neuron and torch_neuron instead")
