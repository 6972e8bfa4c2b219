#!/usr/bin/env python3
"""Records the committed shape registry (tests/registry/registry.db.gz) from real
workloads, each op tagged with what ran it:

  1. the model zoo (tests/zoo/runner.py --shape-registry), opt level 0, one
     entry at a time (tag: the entry, "bert/causal_lm");
  2. the training workloads and training tests of tests/python (tag: the test);
  3. the demo training loop (tag: "torch_neuron.demo");
  4. PyTorch's device-generic test files (../shared/pytorch-tests, copied to a
     temporary folder and run there with pytest on neuron, each file stopped after
     --suite-timeout seconds; tag: "pytorch-tests/<file>"): not models, but code
     nobody here wrote that reaches operators the models do not. They record far
     more signatures than the models, so a stratified sample of
     --pytorch-tests-sample of them (every operator kept) goes into OUT;
  5. the OpInfo conformance sweep (tests/conformance/sweep.py: every op of
     PyTorch's op_db with its own sample inputs; tag: "opinfo/<op>"), which
     reaches the operators no model here calls; a stratified sample of
     --opinfo-sample of its signatures goes into OUT.

    python tests/registry/record.py [--zoo-budget SECONDS] [--zoo-resume] [--skip-zoo]
                                    [--pytorch-tests DIR | --no-pytorch-tests] [--no-opinfo]
                                    [--merge-only] [-o OUT]

The parts go to build/registry/{zoo,workloads,demo,pytorch-tests,opinfo}.db and are
merged into OUT (default tests/registry/registry.db.gz, replaced). --zoo-budget stops starting zoo
entries after that many seconds (the runner's order: the covering subset, then
each architecture's first head, then the other heads); --zoo-resume continues
an interrupted zoo recording.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, "build", "registry")
PYTORCH_SUITES = ["test_indexing", "test_shape_ops", "test_sort_and_select", "test_view_ops", "nn/test_embedding",
                  "test_tensor_creation_ops", "test_reductions", "test_unary_ufuncs", "test_binary_ufuncs"]
WORKLOAD_TESTS = ["tests/python/test_workloads.py", "tests/python/test_training.py",
                  "tests/python/test_grad_scaler.py", "tests/python/test_tied_parameters.py"]


def run(cmd, env=None):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def run_suite(py, folder, suite, db, timeout):
    """One PyTorch test file on neuron, interrupted (SIGINT: pytest ends the
    session and the recording is written at exit) after `timeout` seconds."""
    import signal
    env = dict(os.environ, TORCH_NEURON_SHAPE_REGISTRY=db, TORCH_NEURON_REGISTRY_TAG=f"pytorch-tests/{suite}.py",
               PYTORCH_TESTING_DEVICE_ONLY_FOR="privateuse1", TORCH_NEURON_OPT_LEVEL="0")
    print(f"+ pytest {suite}.py (at most {timeout:.0f} s)", flush=True)
    proc = subprocess.Popen([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{suite}.py"], cwd=folder, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for limit in (timeout, 60, 60):  # a test may swallow one interrupt
        try:
            return proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
    proc.kill()
    return proc.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--out", default=os.path.join(HERE, "registry.db.gz"),
                   help="the merged registry; compressed with gzip when the name ends in .gz")
    p.add_argument("--zoo-budget", type=float, default=None)
    p.add_argument("--zoo-resume", action="store_true")
    p.add_argument("--skip-zoo", action="store_true", help="merge the zoo recording already in build/registry")
    p.add_argument("--pytorch-tests", default=os.path.join(os.path.dirname(ROOT), "shared", "pytorch-tests"))
    p.add_argument("--no-pytorch-tests", action="store_true")
    p.add_argument("--skip-pytorch-tests", action="store_true",
                   help="merge the PyTorch-suite recording already in build/registry")
    p.add_argument("--suite-timeout", type=float, default=900)
    p.add_argument("--pytorch-tests-sample", type=int, default=6000)
    p.add_argument("--merge-only", action="store_true",
                   help="record nothing: merge the parts already in build/registry into OUT")
    p.add_argument("--no-opinfo", action="store_true", help="leave the OpInfo sweep out")
    p.add_argument("--skip-opinfo", action="store_true", help="merge the OpInfo recording already in build/registry")
    p.add_argument("--opinfo-sample", type=int, default=5000)
    args = p.parse_args(argv)
    if args.merge_only:
        args.skip_zoo = args.skip_pytorch_tests = args.skip_opinfo = True
    os.makedirs(BUILD, exist_ok=True)
    py = sys.executable
    zoo_db, work_db, demo_db = (os.path.join(BUILD, n) for n in ("zoo.db", "workloads.db", "demo.db"))

    if not args.skip_zoo:
        if not args.zoo_resume and os.path.exists(zoo_db):
            os.remove(zoo_db)
        cmd = [py, "tests/zoo/runner.py", "--out", os.path.join(BUILD, "zoo-results.json"), "--opt-level", "0",
               "--jobs", "1", "--shape-registry", zoo_db]
        if args.zoo_budget:
            cmd += ["--budget", str(args.zoo_budget)]
        if args.zoo_resume:
            cmd += ["--resume"]
        run(cmd)  # a failing entry still recorded what it ran

    if not args.merge_only:
        for path in (work_db, demo_db):
            if os.path.exists(path):
                os.remove(path)
        env = dict(os.environ, TORCH_NEURON_SHAPE_REGISTRY=work_db)
        if run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *WORKLOAD_TESTS], env) != 0:
            print("record: the workload tests failed; their recording is kept", file=sys.stderr)
        env = dict(os.environ, TORCH_NEURON_SHAPE_REGISTRY=demo_db, TORCH_NEURON_REGISTRY_TAG="torch_neuron.demo")
        if run([py, "-m", "torch_neuron.demo"], env) != 0:
            print("record: the demo failed", file=sys.stderr)
            return 1

    suites_db = os.path.join(BUILD, "pytorch-tests.db")
    sample_db = os.path.join(BUILD, "pytorch-tests-sample.db")
    if not args.no_pytorch_tests and not args.skip_pytorch_tests:
        import shutil
        import tempfile
        if os.path.exists(suites_db):
            os.remove(suites_db)
        folder = os.path.join(tempfile.mkdtemp(prefix="pytorch-tests-"), "pytorch-tests")
        shutil.copytree(args.pytorch_tests, folder)  # run from a copy, as its README says
        for suite in PYTORCH_SUITES:
            run_suite(py, folder, suite, suites_db, args.suite_timeout)  # failures expected: see issue notes
        shutil.rmtree(os.path.dirname(folder), ignore_errors=True)
    if not args.no_pytorch_tests and os.path.exists(suites_db):
        if os.path.exists(sample_db):
            os.remove(sample_db)
        run([py, "-m", "torch_neuron.registry", "sample", suites_db, "-n", str(args.pytorch_tests_sample),
             "--seed", "0", "-o", sample_db])

    opinfo_db = os.path.join(BUILD, "opinfo.db")
    opinfo_sample_db = os.path.join(BUILD, "opinfo-sample.db")
    if not args.no_opinfo and not args.skip_opinfo:
        if os.path.exists(opinfo_db):
            os.remove(opinfo_db)
        run([py, "tests/conformance/sweep.py", "--shape-registry", opinfo_db,
             "--results", os.path.join(BUILD, "opinfo-results.json")])  # failing ops still recorded
    if not args.no_opinfo and os.path.exists(opinfo_db):
        if os.path.exists(opinfo_sample_db):
            os.remove(opinfo_sample_db)
        run([py, "-m", "torch_neuron.registry", "sample", opinfo_db, "-n", str(args.opinfo_sample),
             "--seed", "0", "-o", opinfo_sample_db])

    merged = args.out[:-3] if args.out.endswith(".gz") else args.out
    for path in {merged, args.out}:
        if os.path.exists(path):
            os.remove(path)
    parts = [p for p in (zoo_db, work_db, demo_db) if os.path.exists(p)]
    if not args.no_pytorch_tests and os.path.exists(sample_db):
        parts.append(sample_db)
    if not args.no_opinfo and os.path.exists(opinfo_sample_db):
        parts.append(opinfo_sample_db)
    if run([py, "-m", "torch_neuron.registry", "merge", *parts, "-o", merged]) != 0:
        return 1
    import gzip
    import shutil
    import sqlite3
    conn = sqlite3.connect(merged)
    conn.execute("VACUUM")
    conn.close()
    if merged != args.out:
        with open(merged, "rb") as src, gzip.GzipFile(args.out, "wb", compresslevel=9, mtime=0) as dst:
            shutil.copyfileobj(src, dst)
        os.remove(merged)
    return run([py, "-m", "torch_neuron.registry", "stats", args.out, "--top", "10"])


if __name__ == "__main__":
    sys.exit(main())
