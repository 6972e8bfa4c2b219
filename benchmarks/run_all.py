"""The benchmark suite's entry point (`make bench`, `make bench-quick`).

    python benchmarks/run_all.py [--quick] [--only NAME,NAME] [--out DIR] [--report PATH]

Runs every benchmarks/bench_<name>.py, sorted by name, each in its own process
(`python bench_<name>.py [--quick] --out DIR`), so that no benchmark inherits
another's caches, threads or allocator state. Each one writes DIR/<name>.json.
A progress bar on stderr shows which benchmark runs and for how long; each
benchmark's own output (its tables) follows on stdout.

A failing benchmark does not stop the others: the failures are reported at the
end, each with its last stderr lines, and the exit status is 1. A full run (no
--quick) then regenerates docs/PERFORMANCE.md and its plots with report.py; a
--quick run leaves docs/ alone unless --report PATH asks for a document. No
document is written when a benchmark failed: it would mix new and stale figures.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import report  # noqa: E402
from common import machine_info  # noqa: E402

STDERR_TAIL_LINES = 20


def discover(bench_dir: str) -> List[str]:
    """Benchmark names (bench_<name>.py -> <name>), sorted."""
    paths = sorted(glob.glob(os.path.join(bench_dir, "bench_*.py")))
    return [os.path.basename(p)[len("bench_"):-len(".py")] for p in paths]


class Progress:
    """A one-line progress bar on stderr, redrawn while a benchmark runs. Where
    stderr is not a terminal (a log, CI) it prints one line per start and end."""

    WIDTH = 24

    def __init__(self, total: int, stream=sys.stderr):
        self.total = total
        self.stream = stream
        self.tty = stream.isatty()
        self.index = 0
        self.name = ""

    def _bar(self, done: int) -> str:
        filled = self.WIDTH * done // max(self.total, 1)
        return "[" + "#" * filled + "." * (self.WIDTH - filled) + "]"

    def start(self, index: int, name: str) -> None:
        self.index, self.name = index, name
        if self.tty:
            self.tick(0.0)
        else:
            print(f"[{index}/{self.total}] {name} ...", file=self.stream, flush=True)

    def tick(self, elapsed: float) -> None:
        if self.tty:
            line = f"{self._bar(self.index - 1)} {self.index}/{self.total} {self.name}  {elapsed:6.1f} s"
            self.stream.write("\r\033[K" + line)
            self.stream.flush()

    def clear(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def finish(self, ok: bool, elapsed: float) -> None:
        self.clear()
        status = "ok" if ok else "FAILED"
        print(f"{self._bar(self.index)} {self.index}/{self.total} {self.name}  {status} in {elapsed:.1f} s",
              file=self.stream, flush=True)


class Failure:
    def __init__(self, name: str, script: str, reason: str, stderr: str):
        self.name, self.script, self.reason, self.stderr = name, script, reason, stderr

    def describe(self) -> str:
        lines = self.stderr.rstrip("\n").splitlines()[-STDERR_TAIL_LINES:]
        text = f"FAILED: {self.name} ({os.path.relpath(self.script, REPO_ROOT)}): {self.reason}"
        if lines:
            text += "\n  last stderr lines:\n" + "\n".join("    " + line for line in lines)
        return text


def run_one(name: str, script: str, quick: bool, out_dir: str, progress: Progress,
            timeout: Optional[float]) -> Optional[Failure]:
    """Runs one benchmark in a fresh interpreter; its stdout is echoed when it
    ends, its stderr kept for the failure report."""
    cmd = [sys.executable, script] + (["--quick"] if quick else []) + ["--out", out_dir]
    result_path = os.path.join(out_dir, f"{name}.json")
    before = os.path.getmtime(result_path) if os.path.exists(result_path) else None
    start = time.monotonic()
    killed = False
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=out, stderr=err, text=True)
        try:
            while True:
                try:
                    proc.wait(timeout=0.25)
                    break
                except subprocess.TimeoutExpired:
                    progress.tick(time.monotonic() - start)
                    if timeout and time.monotonic() - start > timeout:
                        proc.kill()
                        proc.wait()
                        killed = True
                        break
        except BaseException:  # Ctrl-C: take the child down with us
            proc.kill()
            proc.wait()
            progress.clear()
            raise
        elapsed = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()

    failure = None
    if killed:
        failure = Failure(name, script, f"killed after the {timeout:.0f} s timeout", stderr or stdout)
    elif proc.returncode != 0:
        failure = Failure(name, script, f"exit status {proc.returncode} after {elapsed:.1f} s", stderr or stdout)
    elif not os.path.exists(result_path) or os.path.getmtime(result_path) == before:
        failure = Failure(name, script, f"exited 0 but wrote no {result_path}", stderr)
    progress.finish(failure is None, elapsed)
    if stdout.strip():
        sys.stdout.write(stdout if stdout.endswith("\n") else stdout + "\n")
        sys.stdout.flush()
    return failure


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: passes --quick to every benchmark")
    parser.add_argument("--only", default="", help="comma-separated benchmark names (tracing,cache,...)")
    parser.add_argument("--out", default=report.DEFAULT_RESULTS, help="results directory (default benchmarks/results)")
    parser.add_argument("--report", default=None,
                        help="write the document here (default: docs/PERFORMANCE.md on a full run, none with --quick)")
    parser.add_argument("--timeout", type=float, default=0, help="seconds before a benchmark is killed (0: never)")
    parser.add_argument("--bench-dir", default=HERE, help=argparse.SUPPRESS)  # tests run fake benchmarks
    args = parser.parse_args(argv)

    available = discover(args.bench_dir)
    names = available
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        wanted = [n[len("bench_"):] if n.startswith("bench_") else n for n in wanted]
        wanted = [n[:-len(".py")] if n.endswith(".py") else n for n in wanted]
        unknown = [n for n in wanted if n not in available]
        if unknown:
            print(f"run_all: no benchmark named {', '.join(unknown)}; available: {', '.join(available)}",
                  file=sys.stderr)
            return 2
        names = [n for n in available if n in wanted]
    if not names:
        print(f"run_all: no bench_*.py in {args.bench_dir}", file=sys.stderr)
        return 2

    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    info = machine_info()
    width = max(len(k) for k in info)
    print(f"Benchmarks: {', '.join(names)} ({'quick' if args.quick else 'full'} run) -> {out_dir}")
    for key, value in info.items():
        print(f"  {key.ljust(width)}  {value}")
    sys.stdout.flush()

    progress = Progress(len(names))
    failures = []
    suite_start = time.monotonic()
    for i, name in enumerate(names, 1):
        progress.start(i, name)
        failure = run_one(name, os.path.join(args.bench_dir, f"bench_{name}.py"), args.quick, out_dir, progress,
                          args.timeout or None)
        if failure:
            failures.append(failure)
    total = time.monotonic() - suite_start
    print(f"\n{len(names) - len(failures)} of {len(names)} benchmarks passed in {total:.1f} s; results in {out_dir}",
          file=sys.stderr)

    doc = args.report or (None if args.quick else report.DEFAULT_DOC)
    if failures:
        for f in failures:
            print("\n" + f.describe(), file=sys.stderr)
        if doc:
            print(f"\nrun_all: {doc} not regenerated: {len(failures)} benchmark(s) failed", file=sys.stderr)
        return 1
    if doc:
        return report.main(["--results", out_dir, "--doc", doc])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
