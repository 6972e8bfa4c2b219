"""Writes docs/PERFORMANCE.md and its plots from the benchmark results.

    python benchmarks/report.py [--results DIR] [--doc PATH] [--plots DIR]

Reads every JSON in the results directory (default benchmarks/results/, what
the bench_*.py scripts write) and renders: the machine the figures come from,
a Headline section with every benchmark's "headline" entries, then one section
per benchmark (title, method, how to reproduce, tables, plots) in a fixed order,
and last the hand-written benchmarks/READING.md, verbatim. Plots are PNGs
(matplotlib, Agg) in --plots (default: performance/ beside the document),
referenced by relative path.

The output depends only on the JSON files: no timestamp but each result's own
"time", keys in a fixed order, PNGs without a software-version tag. So a rerun
on the same results changes nothing, and a diff of the document is a diff of
the figures. Needs no torch: it runs anywhere the JSONs and matplotlib are.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Dict, List, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
DEFAULT_RESULTS = os.path.join(HERE, "results")
DEFAULT_DOC = os.path.join(REPO_ROOT, "docs", "PERFORMANCE.md")
DEFAULT_READING = os.path.join(HERE, "READING.md")

# Sections in this order; benchmarks not listed follow alphabetically.
PREFERRED_ORDER = ["tracing", "cache", "training", "first_step", "memory", "elementwise", "rowwise"]
# Machine facts in this order (the keys of common.machine_info()); others follow sorted.
MACHINE_KEYS = ["cpu", "cores", "torch_threads", "torch", "python", "compiler"]
MACHINE_LABELS = {"cpu": "CPU", "cores": "cores", "torch_threads": "torch threads",
                  "torch": "torch", "python": "Python", "compiler": "compiler"}


# --- loading --------------------------------------------------------------------------

def load_results(results_dir: str) -> List[dict]:
    """Every JSON object in results_dir, each with "benchmark" set (the file's
    stem where the JSON has none), in report order."""
    results = []
    for name in sorted(os.listdir(results_dir)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(results_dir, name)
        with open(path) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise SystemExit(f"report: {path} is not valid JSON: {e}")
        if not isinstance(data, dict):
            raise SystemExit(f"report: {path} holds a {type(data).__name__}, not a JSON object")
        data.setdefault("benchmark", name[:-len(".json")])
        results.append(data)
    return sorted(results, key=lambda r: order_key(r["benchmark"]))


def order_key(benchmark: str):
    if benchmark in PREFERRED_ORDER:
        return (0, PREFERRED_ORDER.index(benchmark), "")
    return (1, 0, benchmark)


# --- markdown pieces ------------------------------------------------------------------

def format_cell(value) -> str:
    """A table cell: floats to 3 significant digits (whole numbers from 1000 up,
    with thousands separators), everything else as written."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value == 0:
            return "0"
        if 1000 <= abs(value) < 1e15:
            digits = int(math.floor(math.log10(abs(value))))
            rounded = round(value, 2 - digits)
            return f"{rounded:,.0f}" if abs(rounded) >= 10000 else f"{rounded:.0f}"
        return f"{value:.3g}"
    return str(value)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_NUMBER_TEXT = re.compile(r"^[-+]?(\d[\d,]*)?\.?\d+([eE][-+]?\d+)?$")


def _looks_numeric(value) -> bool:
    return _is_number(value) or (isinstance(value, str) and bool(_NUMBER_TEXT.match(value.strip())))


def markdown_table(header: Sequence, rows: Sequence[Sequence]) -> str:
    """A GitHub markdown table; columns holding only numbers (or numbers already
    formatted as text) are right-aligned."""
    width = max([len(header)] + [len(r) for r in rows])
    header = list(header) + [""] * (width - len(header))
    rows = [list(r) + [None] * (width - len(r)) for r in rows]
    align = []
    for i in range(width):
        cells = [r[i] for r in rows if r[i] is not None]
        align.append("---:" if cells and all(_looks_numeric(c) for c in cells) else "---")
    lines = ["| " + " | ".join(_escape(str(h)) for h in header) + " |",
             "|" + "|".join(align) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_escape(format_cell(c)) for c in r) + " |")
    return "\n".join(lines)


def machine_section(results: List[dict]) -> str:
    """One table of machine facts; one column per benchmark if they differ."""
    machines = [(r["benchmark"], r.get("machine") or {}) for r in results]
    keys = [k for k in MACHINE_KEYS if any(k in m for _, m in machines)]
    keys += sorted({k for _, m in machines for k in m} - set(MACHINE_KEYS))
    if not keys:
        return "No machine information in the results."
    distinct = {json.dumps(m, sort_keys=True) for _, m in machines}
    if len(distinct) == 1:
        machine = machines[0][1]
        return markdown_table(["", ""], [[MACHINE_LABELS.get(k, k), str(machine.get(k, ""))] for k in keys])
    note = "The results come from different machines (or software versions): one column per benchmark.\n\n"
    return note + markdown_table([""] + [b for b, _ in machines],
                                 [[MACHINE_LABELS.get(k, k)] + [str(m.get(k, "")) for _, m in machines]
                                  for k in keys])


def headline_section(results: List[dict]) -> str:
    """Every benchmark's headline entries, in the benchmark's own order."""
    rows = []
    for r in results:
        for key, text in (r.get("headline") or {}).items():
            rows.append([r.get("title") or r["benchmark"], key, str(text)])
    if not rows:
        return "No benchmark reported headline figures."
    return markdown_table(["benchmark", "figure", "value"], rows)


# --- plots ----------------------------------------------------------------------------

def _plot_file_names(results: List[dict]) -> Dict[tuple, str]:
    """(benchmark, plot name) -> PNG file name: the plot's name, prefixed with
    its benchmark only where two benchmarks use the same name."""
    names = [(r["benchmark"], p.get("name") or f"plot{i}") for r in results for i, p in enumerate(r.get("plots") or [])]
    counts: Dict[str, int] = {}
    for _, name in names:
        counts[name] = counts.get(name, 0) + 1
    files = {}
    for bench, name in names:
        stem = name if counts[name] == 1 else f"{bench}_{name}"
        files[(bench, name)] = re.sub(r"[^A-Za-z0-9_.-]", "_", stem) + ".png"
    return files


def _as_float(value) -> float:
    return float(value) if _is_number(value) else float("nan")


def render_plot(plot: dict, path: str) -> None:
    """Draws one plot of the results schema ("bar": grouped bars over x labels;
    "line": one line per series) into a PNG."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("report: the plots need matplotlib (requirements-dev.txt); run make setup")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = list(plot.get("x") or [])
    series = plot.get("series") or {}
    fig, ax = plt.subplots(figsize=(7.0, 4.0), dpi=100)
    try:
        if plot.get("kind", "bar") == "line":
            numeric_x = all(_is_number(v) for v in x)
            positions = [float(v) for v in x] if numeric_x else list(range(len(x)))
            for label, ys in series.items():
                ax.plot(positions, [_as_float(y) for y in ys], marker="o", label=str(label))
            if not numeric_x:
                ax.set_xticks(positions)
                ax.set_xticklabels([str(v) for v in x])
        else:
            n = max(len(series), 1)
            width = 0.8 / n
            for i, (label, ys) in enumerate(series.items()):
                offsets = [j - 0.4 + width * (i + 0.5) for j in range(len(x))]
                ax.bar(offsets, [_as_float(y) for y in ys], width=width, label=str(label))
            ax.set_xticks(list(range(len(x))))
            ax.set_xticklabels([str(v) for v in x], rotation=20 if len(x) > 4 else 0,
                               ha="right" if len(x) > 4 else "center")
        if plot.get("logx"):
            ax.set_xscale("log")
        if plot.get("logy"):
            ax.set_yscale("log")
        ax.set_title(plot.get("title", ""))
        ax.set_xlabel(plot.get("xlabel", ""))
        ax.set_ylabel(plot.get("ylabel", ""))
        ax.grid(True, axis="both" if plot.get("kind") == "line" else "y", alpha=0.3)
        if series:
            ax.legend()
        fig.tight_layout()
        fig.savefig(path, format="png", metadata={"Software": None})
    finally:
        plt.close(fig)


# --- the document ---------------------------------------------------------------------

def benchmark_section(result: dict, plot_files: Dict[tuple, str], plots_rel: str) -> str:
    bench = result["benchmark"]
    parts = [f"## {result.get('title') or bench}"]
    meta = f"Benchmark `{bench}`"
    if result.get("time"):
        meta += f", run {result['time']}"
    if result.get("quick"):
        meta += " (a --quick smoke run: too few repeats to compare figures)"
    parts.append(f"*{meta}.*")
    if result.get("description"):
        parts.append(str(result["description"]).strip())
    if result.get("command"):
        parts.append(f"Reproduce: `{result['command']}`")
    tables = result.get("tables") or []
    plots = result.get("plots") or []
    if not tables and not plots:
        parts.append("This result file has no tables or plots (an older format).")
    for table in tables:
        if table.get("title"):
            parts.append(f"**{table['title']}**")
        parts.append(markdown_table(table.get("header") or [], table.get("rows") or []))
    for i, plot in enumerate(plots):
        file_name = plot_files[(bench, plot.get("name") or f"plot{i}")]
        parts.append(f"![{plot.get('title') or plot.get('name', '')}]({plots_rel}/{file_name})")
    return "\n\n".join(parts)


def render(results: List[dict], doc_path: str, plots_dir: str, reading_path: str) -> str:
    """Writes the PNGs and returns the markdown text."""
    plot_files = _plot_file_names(results)
    if plot_files:
        os.makedirs(plots_dir, exist_ok=True)
    for r in results:
        for i, plot in enumerate(r.get("plots") or []):
            render_plot(plot, os.path.join(plots_dir, plot_files[(r["benchmark"], plot.get("name") or f"plot{i}")]))
    plots_rel = os.path.relpath(plots_dir, os.path.dirname(os.path.abspath(doc_path))).replace(os.sep, "/")

    parts = [
        "# Performance",
        "Generated by `make bench` (`python benchmarks/run_all.py`, which runs every\n"
        "`benchmarks/bench_*.py` and then `benchmarks/report.py`) from the JSON results;\n"
        "do not edit by hand. The last section is `benchmarks/READING.md`, written by hand.",
        "## Machine",
        machine_section(results),
        "## Headline",
        headline_section(results),
    ]
    parts += [benchmark_section(r, plot_files, plots_rel) for r in results]
    text = "\n\n".join(parts) + "\n"
    if os.path.exists(reading_path):
        with open(reading_path) as f:
            text += "\n" + f.read()
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=DEFAULT_RESULTS, help="directory of benchmark JSON files")
    parser.add_argument("--doc", default=DEFAULT_DOC, help="the markdown file to write")
    parser.add_argument("--plots", default=None, help="directory for the PNGs (default: performance/ beside --doc)")
    parser.add_argument("--reading", default=DEFAULT_READING,
                        help="hand-written markdown appended verbatim, if it exists")
    args = parser.parse_args(argv)
    plots_dir = args.plots or os.path.join(os.path.dirname(os.path.abspath(args.doc)), "performance")

    if not os.path.isdir(args.results):
        print(f"report: no results directory {args.results}; run python benchmarks/run_all.py first",
              file=sys.stderr)
        return 1
    results = load_results(args.results)
    if not results:
        print(f"report: no JSON results in {args.results}", file=sys.stderr)
        return 1
    text = render(results, args.doc, plots_dir, args.reading)
    os.makedirs(os.path.dirname(os.path.abspath(args.doc)), exist_ok=True)
    with open(args.doc, "w") as f:
        f.write(text)
    print(f"report: wrote {args.doc} ({len(results)} benchmarks) and its plots in {plots_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
