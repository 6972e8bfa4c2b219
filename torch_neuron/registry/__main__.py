"""python -m torch_neuron.registry: inspect, merge, sample and replay shape registries.

    stats FILE                          signatures, operators, per-op and per-tag counts, fallback share
    merge A B ... -o OUT                the union, counts summed, every tag kept
    sample FILE -n N [--seed S] -o OUT  a stratified sample: every operator kept, big ones thinned
    run FILE [-k PATTERN] [--opt-level N] [--jobs J] [--signature KEY] [--report OUT.json]
                                        replays each signature on neuron and on the CPU and compares

`run` exits 1 when a signature mismatches, errors, crashes or times out; each such
signature is printed with the command that replays it alone.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import select
import shlex
import subprocess
import sys
import time
from typing import Dict, List, Optional

from .store import RegistryError, Signature, load, write

STATUSES = ("pass", "mismatch", "error", "crash", "timeout", "unreplayable")
FAILING = ("mismatch", "error", "crash", "timeout")


def _shape_key(sig: Signature) -> str:
    """The signature without scalar values (dtypes and shapes only)."""
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in ("value",)}
        if isinstance(v, list):
            return [strip(x) for x in v]
        if isinstance(v, float):
            return "float"
        return v
    return sig.op + json.dumps(strip(sig.decoded_args()), sort_keys=True)


def cmd_stats(args) -> int:
    sigs = load(args.file)
    ops = collections.Counter()
    calls = collections.Counter()
    tags = collections.Counter()
    tag_sigs = collections.Counter()
    fallback_sigs = fallback_calls = 0
    for s in sigs:
        ops[s.op] += 1
        calls[s.op] += s.count
        for t, c in s.counts.items():
            tags[t] += c
            tag_sigs[t] += 1
        if s.fallback:
            fallback_sigs += 1
            fallback_calls += s.count
    total = sum(calls.values())
    shapes = len({_shape_key(s) for s in sigs})
    print(f"{args.file}: {len(sigs)} signatures ({shapes} without scalar values) over {len(ops)} operators, "
          f"{total} calls, {len(tags)} tags")
    share = (fallback_calls / total) if total else 0.0
    print(f"CPU fallback: {fallback_sigs} signatures ({fallback_sigs / max(len(sigs), 1):.1%}), "
          f"{fallback_calls} calls ({share:.1%})")
    top = ops.most_common(None if args.all else args.top)
    print(f"\n{'operator':48s} {'signatures':>10s} {'calls':>10s}")
    for op, n in top:
        print(f"{op:48s} {n:10d} {calls[op]:10d}")
    if not args.all and len(ops) > args.top:
        print(f"... {len(ops) - args.top} more operators (--all lists them)")
    print(f"\n{'tag':48s} {'signatures':>10s} {'calls':>10s}")
    shown = tags.most_common(None if args.all else args.top)
    for t, n in shown:
        print(f"{t:48s} {tag_sigs[t]:10d} {n:10d}")
    if not args.all and len(tags) > args.top:
        print(f"... {len(tags) - args.top} more tags (--all lists them)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"signatures": len(sigs), "shape_signatures": shapes, "operators": len(ops),
                       "calls": total, "tags": len(tags), "fallback_signatures": fallback_sigs,
                       "fallback_calls": fallback_calls, "per_op": dict(ops), "per_tag": dict(tags)}, f, indent=1)
    return 0


def _refuse_overwrite(path: str, inputs: List[str]) -> None:
    if os.path.abspath(path) in {os.path.abspath(p) for p in inputs}:
        raise RegistryError(f"{path}: the output must not be one of the inputs")
    if os.path.exists(path):
        raise RegistryError(f"{path}: exists; choose a new output file (merging adds to it otherwise)")


def cmd_merge(args) -> int:
    _refuse_overwrite(args.out, args.files)
    merged: Dict[tuple, Signature] = {}
    for path in args.files:
        for s in load(path):
            key = (s.op, s.args, s.fallback)
            into = merged.setdefault(key, Signature(s.op, s.args, s.fallback))
            for t, c in s.counts.items():
                into.counts[t] = into.counts.get(t, 0) + c
    write(args.out, merged.values())
    ops = len({k[0] for k in merged})
    print(f"{args.out}: {len(merged)} signatures over {ops} operators from {len(args.files)} files")
    return 0


def stratified_sample(sigs: List[Signature], n: int, seed: int) -> List[Signature]:
    """At least one signature of every operator; the rest of `n` shared out so
    that no operator gets more than the others' share (small ones whole)."""
    by_op: Dict[str, List[Signature]] = collections.defaultdict(list)
    for s in sigs:
        by_op[s.op].append(s)
    if n >= len(sigs):
        return list(sigs)
    sizes = {op: len(v) for op, v in by_op.items()}
    # The largest per-operator cap q with sum(min(size, q)) <= n (at least 1).
    lo, hi = 1, max(sizes.values())
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(k, mid) for k in sizes.values()) <= n:
            lo = mid
        else:
            hi = mid - 1
    quota = {op: min(k, lo) for op, k in sizes.items()}
    # What the cap leaves unspent goes, one each, to the largest operators.
    spare = n - sum(quota.values())
    for op in sorted(sizes, key=lambda o: (-sizes[o], o)):
        if spare <= 0:
            break
        if quota[op] < sizes[op]:
            quota[op] += 1
            spare -= 1
    rng = random.Random(seed)
    out = []
    for op in sorted(by_op):
        members = sorted(by_op[op], key=lambda s: s.key)
        out.extend(members if quota[op] >= len(members) else rng.sample(members, quota[op]))
    return out


def cmd_sample(args) -> int:
    _refuse_overwrite(args.out, [args.file])
    if args.n < 1:
        raise ValueError(f"-n must be at least 1, got {args.n}")
    sigs = load(args.file)
    chosen = stratified_sample(sigs, args.n, args.seed)
    write(args.out, chosen)
    ops = len({s.op for s in chosen})
    note = "" if len(chosen) <= args.n else f" (more than -n {args.n}: one per operator at least)"
    print(f"{args.out}: {len(chosen)} of {len(sigs)} signatures, all {ops} operators{note}")
    return 0


# ---------------------------------------------------------------------------
# run

def _bar(done: int, total: int, elapsed: float, width: int = 24) -> str:
    frac = done / total if total else 1.0
    eta = elapsed / done * (total - done) if done else 0.0
    eta_s = f"{eta / 60:.0f}m" if eta >= 60 else f"{eta:.0f}s"
    return f"[{'#' * int(round(width * frac)):-<{width}}] {done}/{total} eta {eta_s}"


class _Worker:
    """A child process replaying signatures given on its stdin, one result line each."""

    def __init__(self, file: str, opt_level: int, seed: int, env: Optional[Dict[str, str]] = None):
        env = dict(os.environ if env is None else env, TORCH_NEURON_OPT_LEVEL=str(opt_level))
        env.pop("TORCH_NEURON_SHAPE_REGISTRY", None)  # replays are not recorded
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch_neuron.registry", "_worker", file, "--opt-level", str(opt_level),
             "--seed", str(seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
            bufsize=1, start_new_session=True)
        self.key: Optional[str] = None
        self.started = 0.0
        self.pending = b""  # read from stdout, not yet a whole line

    def lines(self) -> Optional[List[str]]:
        """The whole lines available now (after select said readable); None at EOF.
        Read unbuffered: a buffered readline could hold a second line that select
        no longer reports."""
        data = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not data:
            return None
        self.pending += data
        *whole, self.pending = self.pending.split(b"\n")
        return [line.decode() for line in whole]

    def send(self, key: str) -> None:
        self.key = key
        self.phase = "cpu"
        self.started = time.monotonic()
        self.proc.stdin.write(key + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait()


def cmd_worker(args) -> int:
    import torch_neuron  # noqa: F401  (the device)
    from .replay import replay_safely

    by_key = {s.key: s for s in load(args.file)}
    for line in sys.stdin:
        key = line.strip()
        def cpu_done(key=key):
            sys.stdout.write(json.dumps({"key": key, "phase": "neuron"}) + "\n")
            sys.stdout.flush()

        outcome = replay_safely(by_key[key], args.opt_level, args.seed, cpu_done)
        sys.stdout.write(json.dumps({"key": key, "status": outcome.status, "cause": outcome.cause,
                                     "detail": outcome.detail}) + "\n")
        sys.stdout.flush()
    return 0


def replay_all(file: str, sigs: List[Signature], opt_level: int, jobs: int, seed: int, timeout: float,
               progress=sys.stderr, env: Optional[Dict[str, str]] = None) -> Dict[str, dict]:
    """Replays `sigs` (of `file`) on `jobs` worker processes (environment `env`,
    default this process's); a worker that dies or passes `timeout` seconds on
    one signature marks it crash or timeout and is replaced. Returns
    key -> {status, cause, detail}."""
    todo = collections.deque(s.key for s in sigs)
    results: Dict[str, dict] = {}
    workers: List[_Worker] = []
    t0 = time.monotonic()
    total = len(todo)
    last_draw = 0.0
    tty = progress is not None and progress.isatty()
    last_tenth = [-1]

    def draw(force=False):
        nonlocal last_draw
        now = time.monotonic()
        if progress is None or (not force and now - last_draw < 0.5):
            return
        counts = collections.Counter(r["status"] for r in results.values())
        tail = " ".join(f"{k} {counts[k]}" for k in STATUSES if counts[k])
        if tty:
            end = "\n" if force else ""
            progress.write(f"\r{_bar(len(results), total, now - t0)} {tail}\033[K{end}")
        else:  # a log: one line per tenth of the work
            tenth = len(results) * 10 // max(total, 1)
            if tenth <= last_tenth[0] and not force:
                return
            last_tenth[0] = tenth
            progress.write(f"{_bar(len(results), total, now - t0)} {tail}\n")
        last_draw = now
        progress.flush()

    def feed(w: _Worker) -> bool:
        if todo:
            w.send(todo.popleft())
            return True
        w.key = None
        return False

    try:
        for _ in range(max(1, min(jobs, total))):
            w = _Worker(file, opt_level, seed, env)
            workers.append(w)
            feed(w)
        while any(w.key is not None for w in workers):
            busy = [w for w in workers if w.key is not None]
            ready, _, _ = select.select([w.proc.stdout for w in busy], [], [], 1.0)
            for w in busy:
                if w.proc.stdout in ready:
                    lines = w.lines()
                    if lines is not None:
                        for line in lines:
                            r = json.loads(line)
                            if "phase" in r:
                                w.phase = r["phase"]
                            else:
                                results[r.pop("key")] = r
                                feed(w)
                        continue
                    # The worker died on w.key: on the CPU reference or on neuron.
                    code = w.proc.wait()
                    if w.phase == "cpu":
                        results[w.key] = {"status": "unreplayable", "cause": "the CPU reference crashed on the "
                                          "generated inputs", "detail": f"exit status {code}"}
                    else:
                        results[w.key] = {"status": "crash", "cause": "the replay process died on neuron",
                                          "detail": f"exit status {code}"}
                elif time.monotonic() - w.started > timeout:
                    w.kill()
                    results[w.key] = {"status": "timeout", "cause": f"no result in {timeout:.0f} s", "detail": ""}
                else:
                    continue
                # Replace the dead or killed worker.
                w.kill()
                workers.remove(w)
                if todo:
                    nw = _Worker(file, opt_level, seed, env)
                    workers.append(nw)
                    feed(nw)
            draw()
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.stdin.close()
                try:
                    w.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    w.kill()
    draw(force=True)
    return results


def replay_command(file: str, key: str, opt_level: int) -> str:
    return (f"python -m torch_neuron.registry run {shlex.quote(file)} --signature {key} "
            f"--opt-level {opt_level}")


def cmd_run(args) -> int:
    from .replay import matches

    sigs = [s for s in load(args.file) if matches(s.op, args.pattern)]
    if args.signature:
        sigs = [s for s in sigs if s.key in set(args.signature)]
        missing = set(args.signature) - {s.key for s in sigs}
        if missing:
            raise RegistryError(f"{args.file}: no signature {', '.join(sorted(missing))}")
    if not sigs:
        print(f"{args.file}: no signature matches", file=sys.stderr)
        return 2
    level = args.opt_level
    print(f"replaying {len(sigs)} signatures over {len({s.op for s in sigs})} operators at opt level {level}, "
          f"{args.jobs} jobs", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    results = replay_all(args.file, sigs, level, args.jobs, args.seed, args.timeout,
                         progress=None if args.quiet else sys.stderr)
    wall = time.monotonic() - t0
    by_key = {s.key: s for s in sigs}
    counts = collections.Counter(r["status"] for r in results.values())
    replayable = len(results) - counts["unreplayable"]
    rate = counts["pass"] / replayable if replayable else 1.0
    print(f"\nregistry replay: {len(results)} signatures, " + ", ".join(
        f"{counts[k]} {k}" for k in STATUSES) + f"; pass rate {counts['pass']}/{replayable} = {rate:.1%} "
        f"of replayable ({wall:.0f} s)")
    groups: Dict[tuple, List[str]] = collections.defaultdict(list)
    for key, r in results.items():
        if r["status"] != "pass":
            groups[(r["status"], by_key[key].op, r["cause"])].append(key)
    for status in STATUSES[1:]:
        rows = sorted((k, v) for k, v in groups.items() if k[0] == status)
        if not rows:
            continue
        print(f"\n{status}:")
        for (_, op, cause), keys in rows:
            print(f"  {op}: {cause} ({len(keys)} signature{'s' if len(keys) != 1 else ''})")
            shown = keys if status in FAILING else keys[:1]
            for key in shown[: args.show]:
                s = by_key[key]
                print(f"    {s.args[:160]}{'...' if len(s.args) > 160 else ''}")
                detail = results[key]["detail"].splitlines()[0] if results[key]["detail"] else ""
                if detail:
                    print(f"      {detail[:200]}")
                if status in FAILING:
                    print(f"      replay: {replay_command(args.file, key, level)}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"file": args.file, "opt_level": level, "wall_s": wall, "counts": dict(counts),
                       "results": {k: dict(r, op=by_key[k].op, args=by_key[k].args) for k, r in results.items()}},
                      f, indent=1)
    return 1 if any(counts[k] for k in FAILING) else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m torch_neuron.registry", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stats", help="what a registry holds")
    s.add_argument("file")
    s.add_argument("--top", type=int, default=30, help="operators and tags listed (default 30)")
    s.add_argument("--all", action="store_true", help="list every operator and tag")
    s.add_argument("--json", help="also write the figures to this JSON file")
    s = sub.add_parser("merge", help="the union of registries, counts summed")
    s.add_argument("files", nargs="+")
    s.add_argument("-o", "--out", required=True)
    s = sub.add_parser("sample", help="a stratified sample")
    s.add_argument("file")
    s.add_argument("-n", type=int, required=True, help="signatures wanted (every operator is kept)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("-o", "--out", required=True)
    s = sub.add_parser("run", help="replay on neuron and the CPU, compare")
    s.add_argument("file")
    s.add_argument("-k", dest="pattern", help="only operators whose name matches this regular expression")
    s.add_argument("--signature", action="append", help="only this signature (its key; repeatable)")
    s.add_argument("--opt-level", type=int, default=0, choices=(0, 1))
    s.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--timeout", type=float, default=120.0, help="seconds per signature (default 120)")
    s.add_argument("--show", type=int, default=5, help="signatures shown per failing group (default 5)")
    s.add_argument("--report", help="write every result to this JSON file")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s = sub.add_parser("_worker")  # internal: run's replay process
    s.add_argument("file")
    s.add_argument("--opt-level", type=int, default=0)
    s.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    commands = {"stats": cmd_stats, "merge": cmd_merge, "sample": cmd_sample, "run": cmd_run,
                "_worker": cmd_worker}
    try:
        return commands[args.command](args)
    except (RegistryError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the output went to `head` or a closed pager
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
