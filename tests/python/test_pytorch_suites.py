"""The PyTorch-suites runner (tests/pytorch_suites/run.py) and a fixed slice of
PyTorch's own device tests.

The runner is checked on a made-up suite whose tests pass, fail, time out and
crash their process: every outcome must be recorded, the crash must not lose
the tests after it, a rerun must resume instead of starting over, and each
neuron failure must be run again as its CPU twin. The slice runs real tests of
PyTorch's test files (../shared/pytorch-tests) that pass on neuron today: a
failure there is a regression in torch_neuron (or an expected failure with a
written reason in reasons.py). Where the files are absent (a user's clone) the
slice is skipped, as the runner itself skips.
"""

import json
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "tests" / "pytorch_suites" / "run.py"
sys.path.insert(0, str(RUNNER.parent))

import run as suites  # noqa: E402

# A made-up "test_view_ops.py": the runner knows its suites by name.
FAKE_CONFTEST = textwrap.dedent("""
    import re
    _DEVICE_CLASS = re.compile(r"::[A-Za-z0-9_]*(NEURON|PRIVATEUSE1)::")

    def pytest_collection_modifyitems(session, config, items):
        items[:] = [it for it in items if _DEVICE_CLASS.search(it.nodeid)]
""")
FAKE_SUITE = textwrap.dedent("""
    import os
    import time

    class TestFakeNEURON:
        def test_passes_neuron(self):
            assert 1 + 1 == 2

        def test_fails_neuron(self):
            assert [1, 2] == [1, 3], "neuron gives another value"

        def test_drifted_neuron(self):
            raise AttributeError("module 'numpy' has no attribute 'msort'")

        def test_hangs_neuron(self):
            time.sleep(30)

        def test_crashes_neuron(self):
            os._exit(3)

        def test_after_the_crash_neuron(self):
            pass

    class TestFakeCPU:
        def test_fails_cpu(self):
            pass

        def test_drifted_cpu(self):
            raise AttributeError("module 'numpy' has no attribute 'msort'")

        def test_hangs_cpu(self):
            pass

        def test_crashes_cpu(self):
            pass
""")


def _run(args, env_tests, state, report):
    env = dict(os.environ, TORCH_NEURON_PYTORCH_TESTS=str(env_tests))
    return subprocess.run([sys.executable, str(RUNNER), *args, "--state", str(state),
                           "--report", str(report)], env=env, capture_output=True, text=True,
                          timeout=600)


def _records(path):
    done, _ = suites.read_results(path)
    return {nodeid.split("::")[-1]: r for nodeid, r in done.items()}


def _fake_suite(tmp_path):
    """A test folder holding FAKE_SUITE as test_view_ops.py; the state folder and report paths."""
    source = tmp_path / "tests"
    source.mkdir()
    (source / "conftest.py").write_text(FAKE_CONFTEST)
    (source / "test_view_ops.py").write_text(FAKE_SUITE)
    return source, tmp_path / "state", tmp_path / "REPORT.md"


def test_runner_records_every_outcome_resumes_and_checks_cpu_twins(tmp_path):
    source, state, report = _fake_suite(tmp_path)
    done = _run(["--suite", "test_view_ops.py", "--test-timeout", "2", "--jobs", "1"],
                source, state, report)
    assert done.returncode == 0, done.stdout + done.stderr
    neuron = _records(state / "test_view_ops.py.neuron.jsonl")
    assert {name: r["outcome"] for name, r in neuron.items()} == {
        "test_passes_neuron": "passed",
        "test_fails_neuron": "failed",
        "test_drifted_neuron": "failed",
        "test_hangs_neuron": "timeout",
        "test_crashes_neuron": "crashed",
        "test_after_the_crash_neuron": "passed",  # the crash lost nothing after it
    }
    assert "neuron gives another value" in neuron["test_fails_neuron"]["message"]
    assert "exit status 3" in neuron["test_crashes_neuron"]["message"]
    cpu = _records(state / "test_view_ops.py.cpu.jsonl")
    assert {name: r["outcome"] for name, r in cpu.items()} == {
        "test_fails_cpu": "passed", "test_drifted_cpu": "failed",
        "test_hangs_cpu": "passed", "test_crashes_cpu": "passed"}
    text = report.read_text()
    # 6 ran, the drifted one fails on the CPU too: 2 passed of 5 judged.
    assert "| test_view_ops.py | 6 | 6 | 2 | 2 | 1 | 0 | 1 | 1 | 40.0% |" in text
    assert "test_drifted_neuron (test_view_ops.py): CPU failed" in text
    # A rerun resumes: nothing is run again.
    again = _run(["--suite", "test_view_ops.py", "--test-timeout", "2"], source, state, report)
    assert again.returncode == 0
    assert "to run" not in again.stdout
    assert _records(state / "test_view_ops.py.neuron.jsonl") == neuron


def test_runner_samples_a_fixed_subset_and_says_so(tmp_path):
    source, state, report = _fake_suite(tmp_path)
    done = _run(["--suite", "test_view_ops.py", "--test-timeout", "2", "--jobs", "1", "--sample", "2",
                 "-k", "passes or fails or drifted"], source, state, report)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = set(_records(state / "test_view_ops.py.neuron.jsonl"))
    # The hash picks the same tests whatever else the suite holds.
    assert ran == {n for n in ("test_passes_neuron", "test_fails_neuron", "test_drifted_neuron")
                   if zlib.crc32(f"test_view_ops.py::TestFakeNEURON::{n}".encode()) % 2 == 0}
    assert f"| test_view_ops.py | 3 | {len(ran)} (1 in 2) |" in report.read_text()


# A generic class whose setUp reaches its base through super(self.__class__,
# self), as test_linalg's does: the device classes subclass it, so unguarded
# the call recursed until Python's limit, on the CPU too.
SELF_CLASS_SUITE = textwrap.dedent("""
    import unittest

    class TestGeneric(unittest.TestCase):
        def setUp(self):
            super(self.__class__, self).setUp()
            self.steps = getattr(self, "steps", []) + ["generic"]

        def tearDown(self):
            super(self.__class__, self).tearDown()

        def test_set_up_ran_once_neuron(self):
            self.assertEqual(self.steps, ["generic"])

    class TestGenericNEURON(TestGeneric):
        pass
""")


def test_runner_breaks_the_self_class_super_recursion_of_old_setups(tmp_path):
    source, state, report = _fake_suite(tmp_path)
    (source / "test_view_ops.py").write_text(SELF_CLASS_SUITE)
    done = _run(["--suite", "test_view_ops.py", "--jobs", "1"], source, state, report)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {n: r["outcome"] for n, r in _records(state / "test_view_ops.py.neuron.jsonl").items()} == {
        "test_set_up_ran_once_neuron": "passed"}


def test_report_keeps_the_rows_of_suites_without_results_from_the_report_it_replaces(tmp_path):
    source, state, report = _fake_suite(tmp_path)
    earlier = textwrap.dedent("""
        | suite | collected | run | passed | failed | crashed | skipped | timed out | fail on CPU too | pass rate |
        |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
        | test_indexing.py | 84 | 42 (1 in 2) | 40 | 2 | 0 | 0 | 0 | 0 | 95.2% |
        | **all** | 84 | 42 | 40 | 2 | 0 | 0 | 0 | 0 | **95.2%** |

        ## Failures without a written reason, by cause

        - **2** failed: `AssertionError: an earlier failure`
    """).lstrip()
    report.write_text(earlier)
    done = _run(["--suite", "test_view_ops.py", "--test-timeout", "2", "--jobs", "1", "-k", "passes or fails"],
                source, state, report)
    assert done.returncode == 0, done.stdout + done.stderr
    text = report.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| test_")]
    # The table keeps the runner's suite order: test_view_ops.py, then test_indexing.py.
    assert rows == ["| test_view_ops.py | 2 | 2 | 1 | 1 | 0 | 0 | 0 | 0 | 50.0% |",
                    "| test_indexing.py (earlier run) | 84 | 42 (1 in 2) | 40 | 2 | 0 | 0 | 0 | 0 | 95.2% |"]
    assert "| **all** | 86 | 44 | 41 | 3 | 0 | 0 | 0 | 0 | **93.2%** |" in text
    carried = text.split(suites.CARRIED_HEADING + "test_indexing.py")[1]
    assert "### Failures without a written reason" in carried and "an earlier failure" in carried
    # Written again, the report carries the same rows and lists.
    again = _run(["--report-only"], source, state, report)
    assert again.returncode == 0
    assert report.read_text().split("\n", 4)[4] == text.split("\n", 4)[4]  # all but the command


def test_runner_says_so_and_skips_without_the_test_files(tmp_path):
    done = _run([], tmp_path / "absent", tmp_path / "state", tmp_path / "REPORT.md")
    assert done.returncode == 0
    assert "PyTorch's test files are not here" in done.stdout
    assert not (tmp_path / "REPORT.md").exists()


# Real tests of PyTorch's files that pass on neuron: strides of views, reshape
# semantics, indexing and its errors; modules' forward, gradients and
# non-contiguous inputs (a lazy one among them). Each suite costs its imports
# twice (collection and run), about 20 s each, hence few suites.
SLICE = {
    "test_modules.py": "(test_forward or test_grad_nn or non_contiguous) and "
                       "(nn_Linear_ or LazyConv1d or nn_Conv1d_ or LayerNorm or nn_Embedding_)",
    "test_view_ops.py": "transpose or diagonal or narrow or unfold or reshape_view or view_as or expand",
    "test_indexing.py": "(test_int_indices or test_step or byte_mask or index_put_accumulate or "
                        "test_bool_indices or test_index_copy) and not large_tensor",
}


@pytest.mark.skipif(suites.tests_dir() is None, reason="../shared/pytorch-tests is absent")
@pytest.mark.parametrize("suite", sorted(SLICE))
def test_a_slice_of_pytorchs_device_tests_passes(suite, tmp_path):
    state, report = tmp_path / "state", tmp_path / "REPORT.md"
    done = _run(["--suite", suite, "-k", SLICE[suite], "--sample", "1"], suites.tests_dir(), state, report)
    assert done.returncode == 0, done.stdout + done.stderr
    results = _records(state / (suite.replace("/", "__") + ".neuron.jsonl"))
    assert len(results) >= 10
    bad = {name: r["message"] for name, r in results.items()
           if r["outcome"] in suites.FAILING
           and suites.reason_for(suite, dict(r, nodeid=name)) is None}
    assert not bad, json.dumps(bad, indent=1)
