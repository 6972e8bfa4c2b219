"""A trace of what the neuron device did, for Chrome's trace viewer or Perfetto.

    with torch_neuron.profiler.trace("step.json"):
        train_step()
        torch_neuron.mark_step()

The file has one track per thread: the Python thread (each traced op, with the
user's source line), the compile workers (graph and eager-group compiles, their
passes and kernel builds) and each device's queue (graph executions and the
instructions inside them, with the source lines of their ops). Open it at
https://ui.perfetto.dev or chrome://tracing.

The same events are RecordFunction scopes ("neuron::execute graph ...",
"neuron::compile ...", "neuron::trace aten::add"), so they also appear in a
``torch.profiler.profile()`` trace taken around the same code.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Iterator, List

from . import _C

__all__ = ["trace"]

_lock = threading.Lock()
_tracing = False


@contextlib.contextmanager
def trace(path: str | os.PathLike) -> Iterator[None]:
    """Records the device's events while the block runs and writes them to
    ``path`` as a Chrome trace (JSON). At the end of the block the queued
    executions and eager mode's background compiles are waited for, so the
    trace holds them whole. Traces do not nest."""
    global _tracing
    path = os.fspath(path)
    with _lock:
        if _tracing:
            raise RuntimeError("torch_neuron.profiler.trace is already recording; traces do not nest")
        _tracing = True
    try:
        _C._profiler_name_thread("python" if threading.current_thread() is threading.main_thread()
                                 else f"python ({threading.current_thread().name})")
        _C._profiler_start()
        try:
            yield
        finally:
            _wait_for_device()
            events, dropped = _C._profiler_stop()
            _write(path, events, dropped)
    finally:
        with _lock:
            _tracing = False


def _wait_for_device() -> None:
    _C._eager_wait_compiles()
    for index in range(_C._device_count()):
        try:
            _C._wait_device(index)
        except Exception:  # an execution error: the user's own sync raises it
            pass


def _write(path: str, events, dropped: int) -> None:
    pid = os.getpid()
    names = dict(_C._profiler_thread_names())
    out: List[dict] = []
    threads = sorted({e[5] for e in events} | set(names))
    for tid in threads:
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                    "args": {"name": names.get(tid, f"thread {tid}")}})
    start = min((e[3] for e in events), default=0)
    for category, name, source, start_ns, duration_ns, tid in events:
        event = {"ph": "X", "cat": category, "name": name, "pid": pid, "tid": tid,
                 "ts": (start_ns - start) / 1e3, "dur": duration_ns / 1e3}
        if source:
            event["args"] = {"source": source}
        out.append(event)
    document = {"traceEvents": out, "displayTimeUnit": "ms",
                "otherData": {"producer": "torch_neuron.profiler", "dropped_events": dropped}}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(document, f)
    os.replace(tmp, path)
