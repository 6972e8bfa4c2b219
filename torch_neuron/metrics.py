"""torch_neuron's counters: CPU-fallback ops by name, host<->device transfers,
mark steps (and, as the lazy core lands, compiles, cache hits and executions).

    torch_neuron.metrics.counters()    # {"fallback.aten::add.Tensor": 3, ...}
    print(torch_neuron.metrics.report())
    torch_neuron.metrics.reset()
"""

from __future__ import annotations

import os
from typing import Dict

from . import _C

_FALLBACK = "fallback."


# Steps (mark_steps) over which report() gives eager mode's share of ops that
# ran inside compiled groups.
GROUPED_SHARE_STEPS = 10


def grouped_share(steps: int = GROUPED_SHARE_STEPS) -> float:
    """In eager mode, the share (0 to 1) of ops that ran inside compiled groups
    over the last ``steps`` steps (each ended by a mark_step); 0.0 before any."""
    grouped, ops, _ = _C._eager_grouped_share(steps)
    return grouped / ops if ops else 0.0


def counters() -> Dict[str, int]:
    """Every non-zero counter, by name, sorted."""
    return dict(sorted(_C._metrics_counters().items()))


def counter(name: str) -> int:
    """One counter's value (0 if it never counted)."""
    return _C._metrics_counters().get(name, 0)


def fallback_counts() -> Dict[str, int]:
    """CPU-fallback runs per op, e.g. ``{"aten::add.Tensor": 3}``, most frequent first."""
    ops = {k[len(_FALLBACK):]: v for k, v in _C._metrics_counters().items() if k.startswith(_FALLBACK)}
    return dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))


def reset() -> None:
    """Zeroes every counter (and forgets eager mode's steps, whose grouped
    share the report shows)."""
    _C._metrics_reset()
    _C._eager_reset_history()


def _format_value(name: str, value: int) -> str:
    if name.endswith(".bytes"):
        for unit in ("bytes", "KiB", "MiB", "GiB"):
            if value < 1024 or unit == "GiB":
                return f"{value} bytes" if unit == "bytes" else f"{value:.2f} {unit}"
            value /= 1024
    if name.endswith(".ns"):
        return f"{value / 1e6:.3f} ms"
    return str(value)


def report() -> str:
    """A human-readable table of the counters, fallback ops last."""
    all_counters = counters()
    general = {k: v for k, v in all_counters.items() if not k.startswith(_FALLBACK)}
    lines = ["torch_neuron metrics"]
    if not all_counters:
        lines.append("  (no counters yet)")
    width = max((len(k) for k in general), default=0)
    for name, value in general.items():
        lines.append(f"  {name:<{width}}  {_format_value(name, value)}")
    grouped, ops, steps = _C._eager_grouped_share(GROUPED_SHARE_STEPS)
    if ops:
        lines.append(f"  eager: {100.0 * grouped / ops:.1f}% of ops in compiled groups "
                     f"over the last {steps} step{'s' if steps != 1 else ''} ({grouped} of {ops})")
    fallback = fallback_counts()
    if fallback:
        total = sum(fallback.values())
        lines.append(f"  CPU fallback: {total} op runs, {len(fallback)} distinct ops")
        op_width = max(len(k) for k in fallback)
        for op, count in fallback.items():
            lines.append(f"    {op:<{op_width}}  {count}")
    return "\n".join(lines)


def save(path: str | os.PathLike) -> None:
    """Writes the counters as a MetricsSnapshot protobuf (csrc/proto/metrics.proto)."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:
        f.write(_C._metrics_snapshot_bytes())
    os.replace(tmp, path)


def load(path: str | os.PathLike) -> Dict[str, int]:
    """Reads counters saved by :func:`save`; ValueError for a file that is not one."""
    with open(path, "rb") as f:
        return dict(sorted(_C._metrics_parse_snapshot(f.read()).items()))
