"""The shape registry: records the signature of every op the device is asked to
run (operator and overload, each argument's dtype and shape or value), counts
them per model or script, and replays them as unit tests.

Recording: set ``TORCH_NEURON_SHAPE_REGISTRY=path.db`` (the tag is
``TORCH_NEURON_REGISTRY_TAG``, default the script's name), or call
``start(path)``. Records are kept in memory, de-duplicated, and added to the
SQLite file at exit and on ``flush()``; processes may write into one file at once.

Tools: ``python -m torch_neuron.registry stats|merge|sample|run`` (see --help).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Optional

from .. import _C, config
from .store import RegistryError, add, load  # noqa: F401

__all__ = ["start", "stop", "flush", "recording", "set_tag", "tag", "RegistryError", "load"]

_lock = threading.Lock()
_path: Optional[str] = None
# Records taken from the recorder whose write failed, kept for the next flush.
_pending: list = []


def _default_tag() -> str:
    env = config.current().get("registry_tag", "")
    if env:
        return env
    script = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if script in ("", "-c"):
        return "python -c" if script == "-c" else "python"
    return os.path.basename(script)


def start(path: Optional[str] = None, tag: Optional[str] = None) -> None:
    """Starts recording into ``path`` (default: TORCH_NEURON_SHAPE_REGISTRY),
    tagged ``tag`` (default: TORCH_NEURON_REGISTRY_TAG or the script's name)."""
    global _path
    path = path or config.current().get("shape_registry", "")
    if not path:
        raise ValueError("torch_neuron.registry.start: no file given and TORCH_NEURON_SHAPE_REGISTRY is not set")
    with _lock:
        if _path is not None and os.path.abspath(path) != os.path.abspath(_path):
            raise RuntimeError(f"already recording into {_path}; flush() and stop() first")
        _path = path
    if tag is not None:
        set_tag(tag)
    else:
        _C._registry_set_tag(_default_tag())
    _C._registry_start()


def stop() -> None:
    """Stops recording and writes what was recorded."""
    global _path
    _C._registry_stop()
    flush()
    with _lock:
        _path = None


def recording() -> bool:
    return _C._registry_recording()


def set_tag(tag: str) -> None:
    """Tags the signatures recorded from now on (a model's name, say)."""
    if not isinstance(tag, str) or not tag or "\0" in tag:
        raise ValueError(f"a registry tag is a non-empty string without NUL characters, got {tag!r}")
    _C._registry_set_tag(tag)


def tag() -> str:
    return _C._registry_tag()


def flush(path: Optional[str] = None) -> int:
    """Adds the signatures recorded so far to the file (default: the one being
    recorded into) and forgets them; returns how many records were written. If
    the write fails, the records are kept for the next flush."""
    global _pending
    target = path or _path
    if target is None:
        raise RuntimeError("torch_neuron.registry.flush: not recording and no file given")
    with _lock:
        records = _pending + _C._registry_take()
        _pending = []
        if not records:
            return 0
        try:
            return add(target, records)
        except BaseException:
            _pending = records
            raise


def _flush_at_exit() -> None:
    if _path is None:
        return
    try:
        _C._registry_stop()
        flush()
    except Exception as e:  # never a traceback at interpreter exit
        print(f"torch_neuron: could not write the shape registry {_path}: {e}", file=sys.stderr)


def _start_from_config() -> None:
    if config.current().get("shape_registry", ""):
        start()


def _forget_inherited_records() -> None:
    # A forked child holds a copy of the parent's unwritten records: writing them
    # too (at the child's exit) would count them twice. The child keeps only its own.
    # A process that is not recording has nothing to drop, and does nothing here.
    global _pending
    if _path is None:
        return
    _pending = []
    _C._registry_take()


atexit.register(_flush_at_exit)
os.register_at_fork(after_in_child=_forget_inherited_records)
