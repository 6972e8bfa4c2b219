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
    TORCH_NEURON_* settings but an empty compile cache of its own, then
    ``overrides``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NEURON_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["TORCH_NEURON_CACHE_DIR"] = fresh_cache_dir()
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


def run_python(code: str, env: Optional[Dict[str, str]] = None, args: Sequence[str] = (),
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs ``python -c code args...``; a child still running after ``timeout``
    seconds is killed and raises subprocess.TimeoutExpired."""
    proc = start_python(code, env, args)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
