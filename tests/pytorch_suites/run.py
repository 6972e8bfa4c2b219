"""Runs PyTorch's device-generic test files against neuron, and reports.

The files live outside the project, in ../shared/pytorch-tests (or where
TORCH_NEURON_PYTORCH_TESTS points): unmodified test files from PyTorch's
repository, older than the installed torch. Each suite runs in processes of
its own (shards of --shard-size tests, --jobs at a time), every test under a
timeout; results are appended per test to a state directory as they come, so a
crash or a kill loses one test at most and a rerun resumes where it stopped.
Every neuron failure is then run again as its CPU twin (the same test of the
CPU device class): a test that fails on the CPU too is version drift of the
old files, left out of the pass rate and listed. The report
(docs/PYTORCH_SUITES.md) gives per suite collected / passed / failed / skipped
/ timed out, the failures clustered by cause, and the written reasons of the
expected ones (reasons.py).

    python tests/pytorch_suites/run.py                     # every suite
    python tests/pytorch_suites/run.py --suite test_view_ops.py --suite test_indexing.py
    python tests/pytorch_suites/run.py --report-only       # rewrite the report
    python tests/pytorch_suites/run.py --suite test_indexing.py -k index_put

Exit status 0 when it ran (failures are the report's business) and when the
test files are absent (a user's clone): then it says so and runs nothing.
"""

import argparse
import collections
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from reasons import EXPECTED_FAILURES  # noqa: E402

SUITES = [
    "test_view_ops.py",
    "test_indexing.py",
    "test_shape_ops.py",
    "test_sort_and_select.py",
    "test_tensor_creation_ops.py",
    "test_type_promotion.py",
    "nn/test_embedding.py",
    "test_reductions.py",
    "test_binary_ufuncs.py",
    "test_unary_ufuncs.py",
    "test_modules.py",
    "test_linalg.py",
    "test_foreach.py",
    "test_spectral_ops.py",
    "test_scatter_gather_ops.py",
    "test_segment_reductions.py",
    "test_complex.py",
    "test_masked.py",
    "nn/test_dropout.py",
    "nn/test_multihead_attention.py",
]
# The big suites' fixed 1-in-N samples (--sample N overrides them for the suites
# named), so that every suite of `make pytorch-suites` fits 2 hours on 2 cores.
SAMPLES = {
    "test_binary_ufuncs.py": 4,
    "test_unary_ufuncs.py": 8,
    "test_modules.py": 4,
    "test_linalg.py": 2,
    "test_foreach.py": 4,
}
DEFAULT_STATE = REPO / "build" / "pytorch_suites"
DEFAULT_REPORT = REPO / "docs" / "PYTORCH_SUITES.md"
FAILING = ("failed", "error", "timeout", "crashed")


def tests_dir():
    """The folder of PyTorch's test files, or None where it is absent."""
    env = os.environ.get("TORCH_NEURON_PYTORCH_TESTS")
    path = Path(env) if env else REPO.parent / "shared" / "pytorch-tests"
    return path if (path / "conftest.py").is_file() else None


def log(message):
    print(f"[pytorch-suites] {message}", flush=True)


# ------------------------------------------------------------------ work trees

def work_tree(source, state, device):
    """A copy of the test files to run from (pytest writes nothing into the
    shared folder). For the CPU twins, conftest.py's class filter keeps the CPU
    classes instead of the neuron ones, as the files' README says to do."""
    tree = state / f"tree-{device}"
    if not tree.exists():
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns("__pycache__"))
        if device == "cpu":
            conftest = tree / "conftest.py"
            text = conftest.read_text()
            filtered = text.replace("(NEURON|PRIVATEUSE1)", "(CPU)")
            if filtered == text:
                raise SystemExit(f"{conftest}: its class filter has changed; cannot keep the CPU classes")
            conftest.write_text(filtered)
        # The tree is pytest's rootdir: node ids read "test_view_ops.py::...",
        # whatever folder the tree sits in.
        (tree / "pytest.ini").write_text("[pytest]\n")
    return tree


def environment(device):
    env = dict(os.environ)
    env["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1" if device == "neuron" else "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("TORCH_NEURON_NUM_DEVICES", "2")  # the multi-device tests
    return env


def collect(tree, suite, device, keyword):
    """The node ids of `suite`'s tests of `device`'s classes."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
           f"--rootdir={tree}", suite]
    if keyword:
        cmd += ["-k", keyword]
    out = subprocess.run(cmd, cwd=tree, env=environment(device), capture_output=True, text=True,
                         timeout=900)
    ids = [line.strip() for line in out.stdout.splitlines() if "::" in line and " " not in line.strip()]
    if not ids and out.returncode not in (0, 5):
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"collecting {suite} failed:\n{tail}")
    return ids


def sample(ids, every):
    """A fixed 1-in-`every` subset of `ids`, chosen by a hash of each node id:
    the same tests in every run and on every machine, whatever else the suite
    holds, and spread over all of its classes, ops and dtypes."""
    if every <= 1:
        return ids
    return [i for i in ids if zlib.crc32(i.encode()) % every == 0]


# ---------------------------------------------------------------- results file

def read_results(path):
    """nodeid -> record of each finished test, and the tests started but not
    finished (a crash or a kill)."""
    done, started = {}, []
    if not path.exists():
        return done, started
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        if record["event"] == "start":
            started.append(record["nodeid"])
        else:
            done[record["nodeid"]] = record
    return done, [n for n in started if n not in done]


def append(path, record):
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


# ---------------------------------------------------------------------- shards

def run_tests(tree, suite, device, ids, results, args):
    """Runs `ids` until each has a record in `results`, resuming after crashes."""
    total = len(ids)
    while True:
        done, _ = read_results(results)
        remaining = [i for i in ids if i not in done]
        if not remaining:
            return
        log(f"{suite} on {device}: {total - len(remaining)}/{total} done, {len(remaining)} to run")
        chunks = [remaining[k:k + args.shard_size] for k in range(0, len(remaining), args.shard_size)]
        running = []
        while chunks or running:
            while chunks and len(running) < args.jobs:
                # Each running shard has a slot of its own (its files are named by it).
                slot = min(set(range(args.jobs)) - {r["slot"] for r in running})
                running.append(start_shard(tree, suite, device, chunks.pop(0), results, args, slot))
            time.sleep(0.5)
            for shard in list(running):
                if shard_finished(shard, results, args):
                    running.remove(shard)


def start_shard(tree, suite, device, ids, results, args, slot):
    shard_results = results.with_suffix(f".shard{slot}.jsonl")
    shard_results.unlink(missing_ok=True)
    select = results.with_suffix(f".shard{slot}.select")
    select.write_text("\n".join(ids) + "\n")
    # --rootdir and the --opt=value forms: pytest would otherwise take the
    # option values (paths in the state folder) for test paths when it picks
    # its rootdir, and the node ids would no longer match the selection.
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suite_plugin",
           f"--rootdir={tree}", f"--tn-select={select}", f"--tn-results={shard_results}",
           f"--tn-test-timeout={args.test_timeout}", suite]
    out = open(results.with_suffix(f".shard{slot}.log"), "w")
    proc = subprocess.Popen(cmd, cwd=tree, env=environment(device), stdout=out, stderr=subprocess.STDOUT)
    return {"proc": proc, "ids": ids, "results": shard_results, "out": out, "slot": slot}


def shard_finished(shard, results, args):
    """Whether the shard's process is gone (its records then merged into
    `results`); kills it when one test has run past the deadline in native code."""
    proc = shard["proc"]
    if proc.poll() is None:
        done, running = read_results(shard["results"])
        if running and shard["results"].exists():
            age = time.time() - shard["results"].stat().st_mtime
            if age > args.test_timeout + 60:
                proc.kill()
                proc.wait()
                merge(shard, results, killed=True)
                return True
        return False
    merge(shard, results, killed=False)
    return True


def merge(shard, results, killed):
    shard["out"].close()
    done, running = read_results(shard["results"])
    for record in done.values():
        append(results, record)
    for nodeid in running:
        outcome = "timeout" if killed else "crashed"
        why = ("killed: the test ran past the deadline in native code" if killed
               else f"the test process died (exit status {shard['proc'].returncode})")
        append(results, {"nodeid": nodeid, "event": "end", "outcome": outcome, "message": why,
                         "seconds": None})
    if not done and not running:
        # The process ended before running anything (an import error): every
        # test of the shard is recorded, so the run does not loop.
        text = Path(shard["out"].name).read_text().strip().splitlines()
        why = "the shard's process ran no test: " + (text[-1] if text else "no output")
        for nodeid in shard["ids"]:
            append(results, {"nodeid": nodeid, "event": "end", "outcome": "crashed",
                             "message": why[:400], "seconds": None})
    shard["results"].unlink(missing_ok=True)


# ------------------------------------------------------------------ CPU twins

def cpu_twin(nodeid):
    """The CPU device class's variant of a neuron test's node id."""
    path, cls, name = nodeid.split("::", 2)
    cls = re.sub(r"(NEURON|PRIVATEUSE1)$", "CPU", cls)
    name = re.sub(r"_(neuron|privateuse1)(?=_|$)", "_cpu", name, count=1)
    return f"{path}::{cls}::{name}"


# --------------------------------------------------------------------- report

def reason_for(suite, record):
    for suite_glob, test_glob, message_glob, reason in EXPECTED_FAILURES:
        name = record["nodeid"].split("::")[-1]
        if (fnmatch.fnmatch(suite, suite_glob) and fnmatch.fnmatch(name, test_glob)
                and fnmatch.fnmatch(record.get("message") or "", message_glob)):
            return reason
    return None


def cause(message):
    """A failure's message with its particulars (numbers, shapes, names in
    quotes) blanked, so failures of one cause cluster together."""
    text = (message or "").split("\n")[0]
    text = re.sub(r"\[[^\]]*\]", "[…]", text)
    text = re.sub(r"\([^)]*\)", "(…)", text)
    text = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    return text[:140]


def summarize(state, suites):
    rows, clusters, expected, cpu_too = [], collections.defaultdict(list), [], []
    for suite in suites:
        key = suite.replace("/", "__")
        neuron, _ = read_results(state / f"{key}.neuron.jsonl")
        if not neuron:
            continue
        cpu, _ = read_results(state / f"{key}.cpu.jsonl")
        counts = collections.Counter(r["outcome"] for r in neuron.values())
        sampled = state / f"{key}.sample.json"
        plan = json.loads(sampled.read_text()) if sampled.exists() else {"collected": len(neuron), "every": 1}
        drift = 0
        for nodeid, record in sorted(neuron.items()):
            if record["outcome"] not in FAILING:
                continue
            twin = cpu.get(cpu_twin(nodeid))
            if twin is not None and twin["outcome"] in FAILING + ("skipped",):
                drift += 1
                cpu_too.append((suite, nodeid, twin["outcome"], twin.get("message", "")))
                continue
            reason = reason_for(suite, record)
            if reason:
                expected.append((suite, nodeid, record["outcome"], reason))
            else:
                clusters[(record["outcome"], cause(record.get("message")))].append((suite, nodeid))
        passed = counts["passed"] + counts["xfailed"]
        failed = sum(counts[o] for o in FAILING) + counts["xpassed"]
        judged = passed + failed - drift
        rows.append({"suite": suite, "collected": plan["collected"], "ran_of": plan["every"],
                     "run": len(neuron), "passed": passed,
                     "failed": counts["failed"] + counts["error"] + counts["xpassed"],
                     "crashed": counts["crashed"], "skipped": counts["skipped"],
                     "timeout": counts["timeout"], "cpu_too": drift,
                     "rate": passed / judged if judged else 1.0})
    return rows, clusters, expected, cpu_too


def _examples(tests, most):
    """Report lines naming the first `most` of (suite, nodeid) `tests`."""
    lines = [f"  - {nodeid.split('::')[-1]} ({suite})" for suite, nodeid in tests[:most]]
    if len(tests) > most:
        lines.append(f"  - … and {len(tests) - most} more")
    return lines


CARRIED_HEADING = "## Suites from an earlier run: "
EARLIER = " (earlier run)"
_COLUMNS = ("collected", "run", "passed", "failed", "crashed", "skipped", "timeout", "cpu_too")


def carried_over(path, suites):
    """What the report at `path` says of the suites of `suites` that have no
    results in this state folder (a run of only some suites, or a fresh
    build folder): their table rows, verbatim, and their failure lists when
    the report holds them apart from the others' (its "from an earlier run"
    section, or all of its lists when none of its suites has results now)."""
    if not suites or not path.exists():
        return {}, None
    text = path.read_text()
    rows = {}
    for line in text.splitlines():
        name = line.split("|")[1].strip().removesuffix(EARLIER).strip() if line.startswith("| ") else None
        if name in suites:
            rows[name] = "| " + " | ".join([name + EARLIER] + [c.strip() for c in line.split("|")[2:-1]]) + " |"
    if not rows:
        return {}, None
    lists = None
    if CARRIED_HEADING in text:
        head, _, body = text.partition(CARRIED_HEADING)
        names, _, body = body.partition("\n")
        if set(names.split(", ")) == set(rows):
            lists = body.strip("\n")
    elif "## Failures without a written reason" in text:
        reported = {line.split("|")[1].strip().removesuffix(EARLIER).strip() for line in text.splitlines()
                    if line.startswith("| ") and not line.startswith("| suite") and "**all**" not in line}
        if reported == set(rows):  # every suite of that report is carried
            body = text[text.index("## Failures without a written reason"):]
            lists = "\n".join("#" + l if l.startswith("## ") else l for l in body.strip("\n").splitlines())
    return rows, lists


def _row_counts(line):
    """The integer columns of a report table row."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    return {k: int(cells[i + 1].split()[0]) for i, k in enumerate(_COLUMNS)}


def write_report(state, suites, path, command):
    rows, clusters, expected, cpu_too = summarize(state, suites)
    absent = [s for s in suites if s not in {r["suite"] for r in rows}]
    carried, carried_lists = carried_over(path, absent)
    total = collections.Counter()
    for r in rows:
        total.update({k: v for k, v in r.items() if isinstance(v, int) and k != "ran_of"})
    for line in carried.values():
        total.update(_row_counts(line))
    judged = total["passed"] + total["failed"] + total["crashed"] + total["timeout"] - total["cpu_too"]
    lines = [
        "# PyTorch's device-generic suites on neuron",
        "",
        "Generated by `tests/pytorch_suites/run.py` (`make pytorch-suites`); do not edit by hand.",
        f"Command: `{command}`.",
        "",
        "The test files are PyTorch's own (`../shared/pytorch-tests`, older than torch 2.13.0), run",
        "unmodified against the neuron device, each suite in processes of its own with a per-test",
        "timeout. A neuron failure whose CPU twin (the same test of the CPU class) fails too is",
        "version drift of the old files: it is left out of the pass rate and listed at the end.",
        "",
        "The big suites run a fixed sample (`--sample N`: the tests whose node id hashes to 0",
        "modulo N, the same ones in every run); their rows say so.",
        "",
        "| suite | collected | run | passed | failed | crashed | skipped | timed out | fail on CPU too | pass rate |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_suite = {r["suite"]: r for r in rows}
    for suite in suites:
        if suite in carried:
            lines.append(carried[suite])
        if suite not in by_suite:
            continue
        r = by_suite[suite]
        run = f"{r['run']}" + (f" (1 in {r['ran_of']})" if r["ran_of"] > 1 else "")
        lines.append(f"| {r['suite']} | {r['collected']} | {run} | {r['passed']} | {r['failed']} | {r['crashed']} | "
                     f"{r['skipped']} | {r['timeout']} | {r['cpu_too']} | {100 * r['rate']:.1f}% |")
    rate = total["passed"] / judged if judged else 1.0
    lines.append(f"| **all** | {total['collected']} | {total['run']} | {total['passed']} | {total['failed']} | "
                 f"{total['crashed']} | {total['skipped']} | {total['timeout']} | {total['cpu_too']} | "
                 f"**{100 * rate:.1f}%** |")
    lines += ["", "The pass rate is passed / (tests that ran − tests that fail on the CPU too); skipped",
              "tests did not run."]
    if carried:
        lines += ["", "Rows marked (earlier run) have no results in this run's state folder: they and their",
                  "failure lists (the last section) are kept from the report this one replaced; the",
                  "sections before it are of this run's suites only."]
    lines += [""]
    lines += ["## Failures without a written reason, by cause", ""]
    if not clusters:
        lines.append("None.")
    for (outcome, text), tests in sorted(clusters.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- **{len(tests)}** {outcome}: `{text}`")
        lines += _examples(tests, 4)
    lines += ["", "## Expected failures, with their reasons", ""]
    if not expected:
        lines.append("None.")
    by_reason = collections.defaultdict(list)
    for suite, nodeid, outcome, reason in expected:
        by_reason[reason].append((suite, nodeid))
    for reason, tests in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- **{len(tests)}**: {reason}")
        lines += _examples(tests, 3)
    lines += ["", "## Failing on the CPU too (left out of the rate)", ""]
    if not cpu_too:
        lines.append("None.")
    for suite, nodeid, outcome, message in cpu_too:
        lines.append(f"- {nodeid.split('::')[-1]} ({suite}): CPU {outcome}: `{cause(message)[:100]}`")
    if carried:
        lines += ["", CARRIED_HEADING + ", ".join(carried), ""]
        lines.append(carried_lists if carried_lists is not None else
                     "Their failure lists are not in the report this one replaced: run them again.")
    path.write_text("\n".join(lines) + "\n")
    log(f"wrote {path}: {total['passed']} passed of {judged} judged ({100 * rate:.1f}%)")
    return rows


# ------------------------------------------------------------------------ main

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", action="append", help="a suite file (default: all)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression within the suites")
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE, help="results directory")
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    parser.add_argument("--fresh", action="store_true", help="forget earlier results of these suites")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--no-cpu-twins", action="store_true")
    parser.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument("--shard-size", type=int, default=300)
    parser.add_argument("--test-timeout", type=float, default=60.0)
    parser.add_argument("--sample", type=int, default=None, metavar="N",
                        help="run a fixed 1-in-N sample of each suite's tests (default: the "
                             "big suites' own, SAMPLES; 1 for the others)")
    args = parser.parse_args(argv)

    suites = args.suite or SUITES
    for suite in suites:
        if suite not in SUITES:
            parser.error(f"unknown suite {suite!r}; the suites are: {', '.join(SUITES)}")
    source = tests_dir()
    if source is None:
        log("PyTorch's test files are not here (../shared/pytorch-tests, or set "
            "TORCH_NEURON_PYTORCH_TESTS): nothing to run")
        return 0
    args.state.mkdir(parents=True, exist_ok=True)
    command = "python tests/pytorch_suites/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if not args.report_only:
        for suite in suites:
            key = suite.replace("/", "__")
            neuron_results = args.state / f"{key}.neuron.jsonl"
            cpu_results = args.state / f"{key}.cpu.jsonl"
            if args.fresh:
                neuron_results.unlink(missing_ok=True)
                cpu_results.unlink(missing_ok=True)
            tree = work_tree(source, args.state, "neuron")
            ids = collect(tree, suite, "neuron", args.keyword)
            every = args.sample if args.sample is not None else SAMPLES.get(suite, 1)
            chosen = sample(ids, every)
            plan = args.state / f"{key}.sample.json"
            if args.keyword is None or not plan.exists():  # a -k rerun keeps the suite's own count
                plan.write_text(json.dumps({"collected": len(ids), "every": every}))
            log(f"{suite}: {len(ids)} neuron tests" + (f", running {len(chosen)} (1 in {every})"
                                                         if every > 1 else ""))
            ids = chosen
            run_tests(tree, suite, "neuron", ids, neuron_results, args)
            if args.no_cpu_twins:
                continue
            done, _ = read_results(neuron_results)
            twins = [cpu_twin(n) for n, r in done.items() if n in ids and r["outcome"] in FAILING]
            if twins:
                cpu_tree = work_tree(source, args.state, "cpu")
                known = set(collect(cpu_tree, suite, "cpu", None))
                missing = [t for t in twins if t not in known]
                for t in missing:
                    append(cpu_results, {"nodeid": t, "event": "end", "outcome": "absent",
                                         "message": "no CPU twin", "seconds": None})
                run_tests(cpu_tree, suite, "cpu", [t for t in twins if t in known], cpu_results, args)
    write_report(args.state, SUITES, args.report, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
