"""Runs zoo entries, each in its own process (run_model.py) with a timeout, in
parallel, and writes the results JSON (read by report.py).

    python tests/zoo/runner.py --subset --opt-level 0 --out /tmp/zoo.json
    python tests/zoo/runner.py -k 'llama|bert' --out /tmp/zoo.json
    python tests/zoo/runner.py --out docs/zoo/results.json --resume   # continue a sweep
    python tests/zoo/runner.py --out r.json --resume --force -k cvt  # rerun some entries in place
    python tests/zoo/runner.py --compile --subset --out build/zoo/results-compile-o1.json
        # the neuron forward under torch.compile(backend="neuron") (run_model.py --compile)
    python tests/zoo/runner.py --generate --opt-level 0 --out docs/zoo/results-generate-o0.json --resume
        # greedy generate() of the causal and seq2seq LM entries, two caches (generate.py)

Each entry prints one progress line as it finishes. The results file is rewritten
after every entry, so an interrupted sweep keeps what it ran (--resume skips the
entries already in it). Entries the catalog marks config-broken are recorded from
config_broken.json without running (--rerun-broken runs them too). A child that
dies or runs past --timeout is a "crash".

Order: the covering subset first, then every architecture's first head, then
second heads, and so on, so a sweep cut short still spans the architectures.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import catalog  # noqa: E402

RESULT_PREFIX = "ZOO_RESULT "


def ordered(entries: List[Any], subset: List[str]) -> List[Any]:
    first = set(subset)
    rank: Dict[str, int] = {}
    per_type: Dict[str, int] = collections.defaultdict(int)
    precedence = {h: i for i, h in enumerate(catalog.HEAD_PRECEDENCE)}
    for e in sorted(entries, key=lambda e: (e.model_type, precedence.get(e.head, 99), e.name)):
        rank[e.name] = per_type[e.model_type]
        per_type[e.model_type] += 1
    return sorted(entries, key=lambda e: (e.name not in first, rank[e.name], e.name))


def progress(done: int, total: int, elapsed: float, width: int = 20) -> str:
    """`[#######-------] 123/707 eta 41m`: the bar that starts each progress line."""
    frac = done / total if total else 1.0
    bar = "#" * int(round(width * frac))
    eta = elapsed / done * (total - done) if done else 0.0
    eta_s = f"{eta / 60:.0f}m" if eta >= 60 else f"{eta:.0f}s"
    return f"[{bar:-<{width}}] {done:{len(str(total))}d}/{total} eta {eta_s:>4s}"


class Job:
    def __init__(self, entry, args, env):
        self.entry = entry
        self.started = time.monotonic()
        self.out = tempfile.TemporaryFile(mode="w+")
        self.err = tempfile.TemporaryFile(mode="w+")
        cmd = [sys.executable, os.path.join(HERE, "run_model.py"), entry.name, "--seed", str(args.seed)]
        if args.compile:
            cmd.append("--compile")
        if args.generate:
            cmd.append("--generate")
        # A session of its own, so a timeout can end the child and anything it started (g++).
        # Shape registry records (when --shape-registry is given) are tagged by entry.
        env = dict(env, TORCH_NEURON_REGISTRY_TAG=entry.name)
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err, env=env, cwd=ROOT,
                                     start_new_session=True)
        self.timed_out = False

    def kill(self):
        self.timed_out = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def result(self) -> Dict[str, Any]:
        wall = time.monotonic() - self.started
        self.out.seek(0)
        self.err.seek(0)
        stdout, stderr = self.out.read(), self.err.read()
        self.out.close()
        self.err.close()
        found = None
        for line in stdout.splitlines():
            if line.startswith(RESULT_PREFIX):
                found = json.loads(line[len(RESULT_PREFIX):])
        tail = [l for l in stderr.splitlines() if l.strip()][-15:]
        if found is None:
            rc = self.proc.returncode
            how = (f"timed out after {wall:.0f} s" if self.timed_out else
                   f"killed by signal {-rc} ({signal.Signals(-rc).name})" if rc < 0 else f"exited with status {rc}")
            found = {"name": self.entry.name, "model_type": self.entry.model_type, "head": self.entry.head,
                     "class": self.entry.class_name, "status": "crash",
                     "crash": {"how": how, "timed_out": self.timed_out, "returncode": rc,
                               "stderr_tail": tail}}
        found["wall_s"] = wall
        return found


def write_results(path: str, meta: Dict[str, Any], results: Dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "results": dict(sorted(results.items()))}, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="results JSON to write")
    p.add_argument("--subset", action="store_true", help="only the covering subset (traits.select_covering)")
    p.add_argument("-k", dest="pattern", help="only entries whose name matches this regex")
    p.add_argument("--opt-level", type=int, default=None, help="TORCH_NEURON_OPT_LEVEL for the children")
    p.add_argument("--timeout", type=float, default=300, help="seconds per entry (default 300)")
    p.add_argument("--jobs", type=int, default=2, help="entries run at once (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="run at most this many entries")
    p.add_argument("--budget", type=float, default=None, help="start no new entry after this many seconds")
    p.add_argument("--resume", action="store_true", help="keep the results already in --out; skip those entries")
    p.add_argument("--force", action="store_true", help="with --resume: rerun the selected entries even if recorded")
    p.add_argument("--rerun-broken", action="store_true", help="run config-broken entries too")
    p.add_argument("--shape-registry", help="TORCH_NEURON_SHAPE_REGISTRY for the children (an SQLite file)")
    p.add_argument("--cache-dir", help="TORCH_NEURON_CACHE_DIR for the children (default: the user's cache)")
    p.add_argument("--compile", action="store_true",
                   help='run each neuron forward under torch.compile(backend="neuron"); a graph that cannot be '
                        "one program is an error naming the op (TORCH_NEURON_COMPILE_FALLBACK=0)")
    p.add_argument("--generate", action="store_true",
                   help="greedy generate() of the causal and seq2seq LM entries instead of training "
                        "(generate.py: the default and the static cache, token by token against the CPU)")
    p.add_argument("--compile-fallback", action="store_true",
                   help="with --compile: TORCH_NEURON_COMPILE_FALLBACK=1 (such graphs run op by op)")
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless every selected valid entry passes or fails with a known reason "
                        "(report.KNOWN_CAUSES); also when the sweep was cut short")
    args = p.parse_args(argv)
    if args.generate and args.compile:
        p.error("--generate and --compile do not go together: generate() compiles its static-cache step itself")

    import generate
    import traits

    all_entries = catalog.entries()
    subset = traits.select_covering(traits.load_all())
    # Inference entries (catalog_libs "infer": sampling loops, encode) run lazily only:
    # --compile compiles a training step's forward.
    chosen = [e for e in all_entries if (not args.subset or e.name in subset)
              and (not args.pattern or re.search(args.pattern, e.name))
              and not (args.compile and getattr(e, "mode", "train") == "infer")
              and (not args.generate or generate.generates(e))]
    results: Dict[str, Any] = {}
    meta: Dict[str, Any] = {}
    if args.resume and os.path.exists(args.out):
        with open(args.out) as f:
            old = json.load(f)
        results, meta = old.get("results", {}), old.get("meta", {})
    import transformers
    import torch

    level = args.opt_level if args.opt_level is not None else int(os.environ.get("TORCH_NEURON_OPT_LEVEL", "1"))
    if args.resume and args.force and results:  # a rerun of some entries: the sweep's selection stays
        meta.setdefault("reruns", []).append(args.pattern)
    else:
        meta.update({"subset": args.subset, "pattern": args.pattern})
    meta.update({"opt_level": level, "transformers": transformers.__version__, "torch": torch.__version__,
                 "jobs": args.jobs, "timeout_s": args.timeout,
                 "catalog_size": len(all_entries), "covering_subset": subset,
                 "catalog_fingerprint": traits.catalog_fingerprint(), "compile": args.compile,
                 "generate": args.generate,
                 "compile_fallback": args.compile and args.compile_fallback})
    meta.setdefault("started", time.strftime("%Y-%m-%d %H:%M:%S"))
    try:
        meta["git_head"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                          text=True, timeout=10).stdout.strip()
    except Exception:
        pass
    todo = []
    for e in ordered(chosen, subset):
        if e.name in results and not args.force:
            continue
        if e.broken and not args.rerun_broken:
            results[e.name] = {"name": e.name, "model_type": e.model_type, "head": e.head, "class": e.class_name,
                               "status": "config-broken", "cpu_error": {"message": e.broken, "type": e.broken.split(":")[0],
                                                                       "where": ""},
                               "mode": "generate" if args.generate else getattr(e, "mode", "train"),
                               "from_catalog": True}
            continue
        todo.append(e)
    if args.limit is not None:
        todo = todo[:args.limit]

    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false",
               TORCH_NEURON_OPT_LEVEL=str(level), OMP_NUM_THREADS="1", ZOO_THREADS="1",
               PYTHONWARNINGS="ignore")
    env.setdefault("TORCH_NEURON_KERNEL_THREADS", "1")
    if args.shape_registry:
        env["TORCH_NEURON_SHAPE_REGISTRY"] = os.path.abspath(args.shape_registry)
    if args.cache_dir:
        env["TORCH_NEURON_CACHE_DIR"] = os.path.abspath(args.cache_dir)
    if args.compile:
        env["TORCH_NEURON_COMPILE_FALLBACK"] = "1" if args.compile_fallback else "0"

    counts = collections.Counter(r["status"] for r in results.values())
    total = len(todo)
    print(f"zoo: {total} entries to run ({len(results)} already recorded), opt level {level}, "
          f"{'torch.compile(backend=neuron), ' if args.compile else ''}{'generate, ' if args.generate else ''}"
          f"{args.jobs} jobs, timeout {args.timeout:.0f} s", flush=True)
    t0 = time.monotonic()
    wall_before = meta.get("wall_s", 0.0) if args.resume else 0.0
    running: List[Job] = []
    done = 0
    queue = list(todo)
    try:
        while queue or running:
            while queue and len(running) < args.jobs and (args.budget is None or time.monotonic() - t0 < args.budget):
                running.append(Job(queue.pop(0), args, env))
            if not running:
                break
            time.sleep(0.2)
            for job in list(running):
                if job.proc.poll() is None and time.monotonic() - job.started > args.timeout:
                    job.kill()
                if job.proc.poll() is None:
                    continue
                running.remove(job)
                res = job.result()
                if job.entry.name in results:   # a --force rerun replaces the old record
                    counts[results[job.entry.name]["status"]] -= 1
                results[job.entry.name] = res
                counts[res["status"]] += 1
                done += 1
                detail = (res.get("mismatch") or (res.get("error") or {}).get("message")
                          or (res.get("cpu_error") or {}).get("message") or (res.get("crash") or {}).get("how") or "")
                tally = " ".join(f"{k} {counts[k]}" for k in ("pass", "mismatch", "error", "crash", "config-broken")
                                 if counts[k])
                print(f"{progress(done, total, time.monotonic() - t0)} {res['status']:13s} {job.entry.name:44s} "
                      f"{res['wall_s']:6.1f}s | {tally} | {detail[:100]}", flush=True)
                meta["wall_s"] = wall_before + time.monotonic() - t0
                write_results(args.out, meta, results)
    except KeyboardInterrupt:
        for job in running:
            job.kill()
        print("zoo: interrupted", flush=True)
    meta["wall_s"] = wall_before + time.monotonic() - t0
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    # A resumed sweep keeps the entries it had not reached that are still missing
    # (a --force rerun of a few entries must not mark the rest as reached).
    earlier = [n for n in meta.get("not_run", []) if n not in results] if args.resume else []
    meta["not_run"] = earlier + [e.name for e in queue if e.name not in earlier]
    write_results(args.out, meta, results)
    tally = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"zoo: {done} run in {time.monotonic() - t0:.0f} s; all recorded: {tally}; wrote {args.out}", flush=True)
    if args.check:
        return check(chosen, results, meta["not_run"])
    return 0


def check(chosen: List[Any], results: Dict[str, Any], not_run: List[str]) -> int:
    """Exit status for --check: 1 when a selected entry is missing, or failed with no known reason."""
    import report

    unexplained, explained = [], []
    for e in chosen:
        r = results.get(e.name)
        if r is None or r["status"] in ("pass", "config-broken"):
            continue
        cause = report.cause_of(r)
        (explained if report.known_reason(cause) else unexplained).append(f"{e.name}: {cause}")
    for line in explained:
        print(f"zoo check: known failure  {line}")
    for line in unexplained:
        print(f"zoo check: FAILED         {line}")
    for name in not_run:
        print(f"zoo check: NOT RUN        {name}")
    ok = not unexplained and not not_run
    print(f"zoo check: {'ok' if ok else 'failed'} ({len(unexplained)} unexplained, {len(explained)} known, "
          f"{len(not_run)} not run, of {len(chosen)} selected)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
