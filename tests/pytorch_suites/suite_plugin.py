"""A pytest plugin the suite runner (run.py) loads into each shard.

  --tn-select FILE        run only the node ids listed in FILE (one per line)
  --tn-results FILE       append one JSON record per test to FILE: a "start"
                          record before it runs, then its outcome
  --tn-test-timeout S     fail a test that runs longer than S seconds with
                          outcome "timeout" (SIGALRM: interrupts Python code;
                          a test stuck in native code is caught by the
                          runner's shard deadline instead, from the "start"
                          record it left)

The records survive a crash of the shard's process: the runner resumes after
the last test that finished and counts the one that was running as crashed.
"""

import json
import os
import signal
import time

import pytest


class SuiteTestTimeout(Exception):
    """A test ran past --tn-test-timeout."""


def pytest_addoption(parser):
    group = parser.getgroup("torch_neuron suites")
    group.addoption("--tn-select", default=None)
    group.addoption("--tn-results", default=None)
    group.addoption("--tn-test-timeout", type=float, default=0.0)


class _Recorder:
    def __init__(self, path, timeout):
        self.path = path
        self.timeout = timeout
        self.reports = {}
        self.started = {}

    def write(self, record):
        if self.path is None:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.started[item.nodeid] = time.monotonic()
        self.write({"nodeid": item.nodeid, "event": "start"})
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        if self.timeout <= 0:
            yield
            return

        def expire(signum, frame):
            raise SuiteTestTimeout(f"the test ran past {self.timeout:g} s")

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def pytest_runtest_logreport(self, report):
        self.reports.setdefault(report.nodeid, []).append(report)
        if report.when != "teardown":
            return
        outcome, message = _outcome(self.reports.pop(report.nodeid))
        began = self.started.pop(report.nodeid, time.monotonic())
        self.write({"nodeid": report.nodeid, "event": "end", "outcome": outcome,
                    "message": message, "seconds": round(time.monotonic() - began, 3)})


def _first_line(report):
    """The exception's type and message, from the end of the long report."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.strip().split("\n")[0][:400]
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        return str(report.longrepr[2])[:400]
    text = str(report.longrepr).strip().split("\n")
    return (text[-1] if text else "")[:400]


def _outcome(reports):
    """One outcome for a test's setup, call and teardown reports."""
    for r in reports:
        if r.failed:
            message = _first_line(r)
            if "SuiteTestTimeout" in message:
                return "timeout", message
            if r.when != "call":
                return "error", message
            if hasattr(r, "wasxfail"):
                return "xpassed", "unexpected success"
            return "failed", message
    for r in reports:
        if r.skipped:
            if hasattr(r, "wasxfail"):
                return "xfailed", str(r.wasxfail)[:400]
            return "skipped", _first_line(r)
    return "passed", ""


def pytest_configure(config):
    path = config.getoption("--tn-results")
    config.pluginmanager.register(
        _Recorder(path, config.getoption("--tn-test-timeout")), "tn_recorder")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    select = config.getoption("--tn-select")
    if select is None:
        return
    with open(select) as f:
        wanted = {line.strip() for line in f if line.strip()}
    keep = [it for it in items if it.nodeid in wanted]
    drop = [it for it in items if it.nodeid not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
    for cls in {it.cls for it in keep if it.cls is not None}:
        _break_self_class_recursion(cls)


_SELF_CLASS_SUPER = "super(self.__class__, self)"


def _break_self_class_recursion(device_class):
    """Makes `super(self.__class__, self).setUp()` in a test file's generic
    class (test_linalg's TestLinalg) call the next setUp once, as it did when
    the device classes were not subclasses of the generic one.

    The installed torch makes TestLinalgPRIVATEUSE1 (and TestLinalgCPU) a
    subclass of TestLinalg, so from TestLinalg.setUp that super() is
    TestLinalg.setUp again: every test of the file recursed until Python's
    limit, on the CPU as on neuron. The wrapper runs the generic setUp's own
    body unchanged; its inner call, seen re-entering, goes on to the class
    after the generic one. Both device runs get it, so the CPU twins still
    tell version drift apart."""
    import inspect

    for generic in device_class.__mro__[1:]:
        for name in ("setUp", "tearDown"):
            fn = generic.__dict__.get(name)
            if fn is None or getattr(fn, "_tn_reentry_guarded", False):
                continue
            try:
                source = inspect.getsource(fn)
            except (OSError, TypeError):
                continue
            if _SELF_CLASS_SUPER in source:
                setattr(generic, name, _guarded(generic, name, fn))


def _guarded(generic, name, fn):
    flag = f"_tn_in_{name}"

    def method(self):
        if getattr(self, flag, False):  # the body's super(self.__class__, self) call
            return getattr(super(generic, self), name)()
        setattr(self, flag, True)
        try:
            return fn(self)
        finally:
            setattr(self, flag, False)

    method._tn_reentry_guarded = True
    method.__name__ = name
    return method
