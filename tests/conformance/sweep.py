"""The full conformance sweep: every op of OpInfo's op_db through harness.py, in
worker processes, into tests/conformance/results.json; then docs/CONFORMANCE.md.

    python tests/conformance/sweep.py                 # all ops (make conformance)
    python tests/conformance/sweep.py --ops add,sum   # some ops, merged into the results
    python tests/conformance/sweep.py --report-only   # regenerate the report
    python tests/conformance/sweep.py --shape-registry build/registry/opinfo.db \
        --results build/registry/opinfo-results.json    # record every op's signatures

A worker that crashes or runs past --timeout on one op is replaced; the op is
recorded as failed with the reason, so one bad op cannot stop the sweep.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from multiprocessing.connection import wait

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results.json")


def _worker(conn):
    # The sweep needs no disk cache: every sample graph is new, and writing them
    # would only cost time. One device is enough.
    import harness

    ops = harness.ops_by_name()
    registry = None
    if os.environ.get("TORCH_NEURON_SHAPE_REGISTRY"):
        import torch_neuron.registry as registry
    while True:
        name = conn.recv()
        if name is None:
            return
        if registry:
            registry.set_tag(f"opinfo/{name}")
        results = harness.run_op(ops[name])
        if registry:  # a worker killed on a later op keeps what this one recorded
            registry.flush()
        conn.send([r.__dict__ for r in results])


class Worker:
    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.op, self.started = None, 0.0

    def give(self, name):
        self.op, self.started = name, time.monotonic()
        self.conn.send(name)

    def kill(self):
        self.proc.kill()
        self.proc.join()


def _failed(name, reason):
    import harness  # only for the list of checks

    op = harness.ops_by_name()[name]
    return [dict(op=name, dtype=d, kind=k, status="fail", error=reason, samples=0, fallback=False)
            for d, k in harness.checks_for(op)]


def _progress(done, total, started, current):
    width = 30
    filled = int(width * done / max(total, 1))
    elapsed = time.monotonic() - started
    eta = elapsed / done * (total - done) if done else 0
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} ops "
                     f"{elapsed:5.0f}s eta {eta:4.0f}s  {current[:40]:<40}")
    sys.stderr.flush()


def sweep(names, jobs, timeout):
    ctx = mp.get_context("spawn")
    pending, results = list(names), []
    workers = [Worker(ctx) for _ in range(min(jobs, len(pending)))]
    for w in workers:
        if pending:
            w.give(pending.pop(0))
    started, done = time.monotonic(), 0
    while any(w.op for w in workers):
        ready = wait([w.conn for w in workers if w.op], timeout=1.0)
        for i, w in enumerate(workers):
            if not w.op:
                continue
            reason = None
            if w.conn in ready:
                try:
                    results.extend(w.conn.recv())
                except EOFError:
                    w.proc.join()
                    reason = f"worker crashed (exit code {w.proc.exitcode})"
            elif time.monotonic() - w.started > timeout:
                reason = f"timed out after {timeout:.0f} s"
            else:
                continue
            if reason:
                results.extend(_failed(w.op, reason))
                w.kill()
                w = workers[i] = Worker(ctx)
            done += 1
            w.op = None
            _progress(done, len(names), started, pending[0] if pending else "")
            if pending:
                w.give(pending.pop(0))
    for w in workers:
        w.conn.send(None)
        w.proc.join(timeout=10)
    sys.stderr.write("\n")
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated op names (default: all of op_db)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per op")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--results", default=RESULTS,
                        help="results file (default tests/conformance/results.json, which the report reads)")
    parser.add_argument("--shape-registry", metavar="DB",
                        help="record every op's signatures into this registry, tagged opinfo/<op>")
    args = parser.parse_args()
    results_path = os.path.abspath(args.results)
    if args.shape_registry:
        os.environ["TORCH_NEURON_SHAPE_REGISTRY"] = os.path.abspath(args.shape_registry)
    os.environ.setdefault("TORCH_NEURON_CACHE", "0")
    # The sweep runs tier 0 (tier 1 would run the system compiler for most of
    # its thousands of little graphs); the slice in the default tests checks
    # its ops at both levels against these results.
    os.environ.setdefault("TORCH_NEURON_OPT_LEVEL", "0")
    os.environ.setdefault("TORCH_NEURON_NUM_DEVICES", "1")
    sys.path.insert(0, HERE)
    import report

    if not args.report_only:
        import harness

        names = args.ops.split(",") if args.ops else sorted(harness.ops_by_name())
        unknown = [n for n in names if n not in harness.ops_by_name()]
        if unknown:
            parser.error(f"not in op_db: {', '.join(unknown)}")
        previous = {}
        if args.ops and os.path.exists(results_path):
            with open(results_path) as f:
                previous = {report.key(r): r for r in json.load(f)["results"]}
        start = time.monotonic()
        new = sweep(names, args.jobs, args.timeout)
        merged = {**previous, **{report.key(r): r for r in new}}
        payload = {"torch": __import__("torch").__version__,
                   "results": sorted(merged.values(), key=report.key)}
        with open(results_path, "w") as f:  # one result per line: diffs show what changed
            f.write('{"torch": %s, "results": [\n' % json.dumps(payload["torch"]))
            f.write(",\n".join(json.dumps(r, sort_keys=True) for r in payload["results"]))
            f.write("\n]}\n")
        print(f"{len(names)} ops in {time.monotonic() - start:.0f} s -> {results_path}")
    if results_path == RESULTS:
        print(report.write())


if __name__ == "__main__":
    main()
