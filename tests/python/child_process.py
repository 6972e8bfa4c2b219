"""Runs Python code in a fresh interpreter, for settings read once at import
(TORCH_NEURON_* environment variables), and hands out empty compile-cache
directories so that no test meets graphs compiled by an earlier run."""

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]

_CACHE_ROOT = tempfile.mkdtemp(prefix="torch_neuron_test_caches_")
atexit.register(shutil.rmtree, _CACHE_ROOT, ignore_errors=True)


def fresh_cache_dir() -> str:
    """A new, empty TORCH_NEURON_CACHE_DIR, removed when this process exits."""
    return tempfile.mkdtemp(dir=_CACHE_ROOT)


def child_env(overrides: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment of a child interpreter: the repo importable, no inherited
    TORCH_NEURON_* settings but an empty compile cache of its own and tiered
    compilation off (compile counts exact, as in conftest.py), then
    ``overrides``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NEURON_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["TORCH_NEURON_CACHE_DIR"] = fresh_cache_dir()
    env["TORCH_NEURON_TIERED_COMPILE"] = "0"
    env.update(overrides or {})
    return env


def start_python(code: str, env: Optional[Dict[str, str]] = None, args: Sequence[str] = ()) -> subprocess.Popen:
    """Starts ``python -c code args...`` in a fresh interpreter (for import-time settings)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=child_env(env),
        cwd=str(REPO_ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: a timeout kills its children too
    )


class ChildHung(subprocess.TimeoutExpired):
    """A child that ran past its timeout, with the stacks of every thread of
    every process in its group taken before it was killed (when gdb is here):
    a hang seen once in a long suite says where it waited."""

    def __init__(self, cmd, timeout, stacks: str, stderr: str):
        super().__init__(cmd, timeout, output=stacks, stderr=stderr)
        self.stacks = stacks

    def __str__(self):
        return (f"the child ran past {self.timeout:.0f} s and was killed\n--- its stderr ---\n"
                f"{self.stderr or ''}\n--- its stacks ---\n{self.stacks}")


def _group_stacks(pgid: int) -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(gdb is not installed: no stacks)"
    try:
        pids = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        pids = [str(pgid)]
    parts = []
    for pid in pids:
        try:
            bt = subprocess.run([gdb, "-p", pid, "-batch", "-ex", "thread apply all bt 30"],
                                capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            bt = f"(gdb failed: {e})"
        frames = [line for line in bt.splitlines() if line.startswith(("#", "Thread"))]
        parts.append(f"== process {pid}\n" + "\n".join(frames))
    return "\n".join(parts)


def run_python(code: str, env: Optional[Dict[str, str]] = None, args: Sequence[str] = (),
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs ``python -c code args...``; a child still running after ``timeout``
    seconds has its stacks taken, is killed, and raises ChildHung (a
    subprocess.TimeoutExpired)."""
    proc = start_python(code, env, args)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = _group_stacks(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        raise ChildHung(proc.args, timeout, stacks, err) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
