"""torch_neuron's configuration: the TORCH_NEURON_* environment variables, read
once at import into one config object.

    torch_neuron.config.current()          # dict of the settings in force
    with torch_neuron.config.override(TORCH_NEURON_FALLBACK="0"):
        ...                                # settings replaced inside the block

Settings consumed while the device starts (TORCH_NEURON_NUM_DEVICES,
TORCH_NEURON_MEMORY_LIMIT_MB) keep their start-up effect under an override; use
``torch.neuron.set_memory_limit`` to change a device's memory limit.
"""

from __future__ import annotations

import contextlib
from typing import Dict, Iterator, Mapping

from . import _C

VARIABLES = (
    "TORCH_NEURON_MODE",
    "TORCH_NEURON_NUM_DEVICES",
    "TORCH_NEURON_MEMORY_LIMIT_MB",
    "TORCH_NEURON_FALLBACK",
    "TORCH_NEURON_CACHE_DIR",
    "TORCH_NEURON_CACHE_MAX_MB",
    "TORCH_NEURON_CACHE",
    "TORCH_NEURON_COMPILE_SERVICE",
    "TORCH_NEURON_IR_DEBUG",
    "TORCH_NEURON_DEBUG",
    "TORCH_NEURON_DEBUG_DIR",
    "TORCH_NEURON_SHAPE_REGISTRY",
    "TORCH_NEURON_OPT_LEVEL",
    "TORCH_NEURON_KERNEL_THREADS",
    "TORCH_NEURON_AUTOGRAD_THREAD",
)


def current() -> Dict[str, object]:
    """The settings in force."""
    return dict(_C._config())


def parse(env: Mapping[str, str]) -> Dict[str, object]:
    """Validates a mapping of TORCH_NEURON_* values; ValueError names a bad one."""
    return dict(_C._parse_config(dict(env)))


@contextlib.contextmanager
def override(**variables: str) -> Iterator[Dict[str, object]]:
    """Replaces settings, named by their environment variables, inside the block."""
    unknown = sorted(set(variables) - set(VARIABLES))
    if unknown:
        raise ValueError(f"unknown torch_neuron setting(s) {unknown}; known: {list(VARIABLES)}")
    guard = _C._ConfigOverride({k: str(v) for k, v in variables.items()})
    try:
        yield current()
    finally:
        del guard
