"""Shared pieces of the benchmark scripts: machine facts, interleaved timing of
peers (A B A B ...), medians and spreads, and JSON + table output."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from typing import Callable, Dict, List

import torch


def machine_info() -> Dict[str, str]:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        compiler = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        compiler = "unknown"
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "torch": torch.__version__,
        "torch_threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "compiler": compiler,
    }


# With settle, the least time a turn runs its peer unrecorded (seconds).
SETTLE_SECONDS = 0.03


def interleaved(peers: Dict[str, Callable[[], float]], repeats: int, warmup: int = 1,
                settle: int = 0) -> Dict[str, List[float]]:
    """Runs each peer's measurement in turn, A B A B ..., discarding warm-ups.
    Each callable returns one measurement (seconds or a derived figure).

    With `settle`, each turn first runs the peer unrecorded, at least `settle`
    times and for at least SETTLE_SECONDS, and keeps only the measurement after
    that: the first runs after a switch pay for the previous peer's threads.
    After a parallel CPU op (ATen's or inductor's code) libgomp's idle workers
    spin before they sleep, on the cores the neuron device's threads need: on
    this 2-vCPU host a neuron kernel after a torch.compile peer took 4.4 to
    8.8 ms instead of 4.4 ms for more than one 5 ms run (4.4 ms every time with
    GOMP_SPINCOUNT=0). A CPU peer that follows the device finds its own workers
    asleep."""
    samples: Dict[str, List[float]] = {name: [] for name in peers}
    for r in range(warmup + repeats):
        for name, fn in peers.items():
            start = time.perf_counter()
            runs = 0
            while runs < settle or (settle and time.perf_counter() - start < SETTLE_SECONDS):
                fn()
                runs += 1
            value = fn()
            if r >= warmup:
                samples[name].append(value)
    return samples


def summary(values: List[float]) -> Dict[str, float]:
    values = sorted(values)
    return {
        "median": statistics.median(values),
        "min": values[0],
        "max": values[-1],
        "spread": (values[-1] - values[0]) / statistics.median(values) if statistics.median(values) else 0.0,
        "n": len(values),
    }


def write_results(name: str, results: dict, out_dir: str | None = None) -> str:
    out_dir = out_dir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.json")
    payload = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine_info(), **results}
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    return path


def print_table(title: str, header: List[str], rows: List[List[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    print(f"\n{title}")
    print("  " + "  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print("  " + "  ".join("-" * w for w in widths))
    for r in rows:
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


# ----------------------------------------------------- the suite's JSON schema
#
# Every bench_*.py accepts --quick and --out DIR and writes one JSON with, besides
# the keys above: command, title, description (markdown), tables (title, header,
# rows), plots (name, title, kind bar|line, xlabel, ylabel, logx, logy, x,
# series label -> values) and headline (short key -> sentence). benchmarks/
# report.py turns a directory of them into docs/PERFORMANCE.md.

def bench_parser(doc: str):
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer sizes and repeats")
    parser.add_argument("--out", default=None, help="results directory (default benchmarks/results)")
    return parser


def ratios(numerators: List[float], denominators: List[float]) -> Dict[str, float]:
    """Pairwise ratios of two interleaved peers' samples, summarized."""
    return summary([a / b for a, b in zip(numerators, denominators)])


def fmt(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:.0f}"


def table(title: str, header: List[str], rows: List[list]) -> dict:
    return {"title": title, "header": header, "rows": rows}


def doc_description(doc: str) -> str:
    """A bench script's docstring as one paragraph: its summary and its method
    (the first and third paragraphs; the second is the peer list)."""
    parts = doc.split("\n\n")
    return " ".join(p.replace("\n", " ") for p in (parts[0], parts[2]))


def peer_rows(summaries: Dict[str, Dict[str, float]], relative: Dict[str, Dict[str, float]]) -> List[list]:
    """Rows of peer, median, min, max and a pairwise ratio (1 for the reference)."""
    return [[k, fmt(v["median"]), fmt(v["min"]), fmt(v["max"]),
             fmt(relative[k]["median"]) if k in relative else "1"] for k, v in summaries.items()]
