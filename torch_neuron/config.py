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
import difflib
import os
import warnings
from typing import Dict, Iterator, List, Mapping, Optional

from . import _C

VARIABLES = (
    "TORCH_NEURON_MODE",
    "TORCH_NEURON_NUM_DEVICES",
    "TORCH_NEURON_MEMORY_LIMIT_MB",
    "TORCH_NEURON_FALLBACK",
    "TORCH_NEURON_CACHE_DIR",
    "TORCH_NEURON_CACHE_MAX_MB",
    "TORCH_NEURON_CACHE_MEMORY_ENTRIES",
    "TORCH_NEURON_CACHE_MEMORY_MB",
    "TORCH_NEURON_CACHE",
    "TORCH_NEURON_COMPILE_SERVICE",
    "TORCH_NEURON_SERVICE_IDLE_S",
    "TORCH_NEURON_SERVICE_TIMEOUT_S",
    "TORCH_NEURON_REMOTE_CACHE",
    "TORCH_NEURON_REMOTE_CACHE_KEY",
    "TORCH_NEURON_REMOTE_CACHE_KEY_FILE",
    "TORCH_NEURON_IR_DEBUG",
    "TORCH_NEURON_DEBUG",
    "TORCH_NEURON_DEBUG_DIR",
    "TORCH_NEURON_SHAPE_REGISTRY",
    "TORCH_NEURON_REGISTRY_TAG",
    "TORCH_NEURON_TEST_FAULT_OP",
    "TORCH_NEURON_OPT_LEVEL",
    "TORCH_NEURON_KERNEL_THREADS",
    "TORCH_NEURON_AUTOGRAD_THREAD",
    "TORCH_NEURON_STEP_ON_OPTIMIZER",
    "TORCH_NEURON_COMPILE_FALLBACK",
    "TORCH_NEURON_DYNAMIC_SHAPES",
    "TORCH_NEURON_EAGER_GROUPS",
    "TORCH_NEURON_TIERED_COMPILE",
    "TORCH_NEURON_LAUNCH_BLOCKING",
)


# Read by the build and the tests, not by the runtime: known, so not misspelled.
TOOL_VARIABLES = (
    "TORCH_NEURON_BUILD_DIR",
    "TORCH_NEURON_BUILD_TESTS",
    "TORCH_NEURON_BUILD_TYPE",
    "TORCH_NEURON_TEST_ALL",
    "TORCH_NEURON_REGISTRY_SAMPLE",
    "TORCH_NEURON_REGISTRY_OPT_LEVEL",
    "TORCH_NEURON_UPDATE_GOLDEN",
    "TORCH_NEURON_TEST_SERVICE_DELAY_MS",
)


def unknown_variables(env: Optional[Mapping[str, str]] = None) -> List[str]:
    """Warnings for TORCH_NEURON_* names in ``env`` (default: the environment)
    that no setting has, each naming the closest known one; a misspelled
    setting would otherwise be ignored without a word."""
    env = os.environ if env is None else env
    known = VARIABLES + TOOL_VARIABLES
    found = []
    for name in sorted(n for n in env if n.startswith("TORCH_NEURON_") and n not in known):
        # Compared without the shared prefix, which would make anything look close.
        prefix = len("TORCH_NEURON_")
        close = difflib.get_close_matches(name[prefix:], [k[prefix:] for k in known], n=1, cutoff=0.6)
        hint = (f"; did you mean TORCH_NEURON_{close[0]}?" if close
                else f"; the settings are {', '.join(VARIABLES)}")
        found.append(f"torch_neuron: {name} is not a torch_neuron setting and is ignored{hint}")
    return found


def _warn_unknown_variables() -> None:
    for message in unknown_variables():
        warnings.warn(message, UserWarning, stacklevel=3)


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
