"""The per-machine compile service: one process per user and compiler that
compiles each graph once for all the processes that need it.

With ``TORCH_NEURON_COMPILE_SERVICE=auto`` the first process that needs a graph
compiled and finds no service starts one (detached, in its own session, its log
in the service directory); every process then sends its graphs there, and gets
the NEFF back. The service listens on a Unix socket in a 0700 directory under
the cache dir, named by the compiler's identity, serves only its own uid, and
exits after ``TORCH_NEURON_SERVICE_IDLE_S`` seconds (default 600) without a
request. A process that cannot reach it, or gets no answer in time
(``TORCH_NEURON_SERVICE_TIMEOUT_S``), compiles the graph itself (counted in
``service.fallback.count``).

With ``TORCH_NEURON_REMOTE_CACHE`` set, the service reads the remote cache
(Redis) after its disk and writes it after compiling, on one connection it
keeps for all its clients: a process whose service answers opens none of its
own (it does only when the service cannot answer).

    python -m torch_neuron.service start    # start one now (if none runs)
    python -m torch_neuron.service status   # pid, uptime, requests, compiles, joins, queue
    python -m torch_neuron.service stop
"""

from __future__ import annotations

import sys
from typing import Dict, Optional

from .. import _C

__all__ = ["status", "start", "stop", "paths", "last_fallback_reason"]


def _install_launcher() -> None:
    # How a client starts the service: this interpreter, this package. In auto
    # mode the service is started now, in the background, so that it is up when
    # the first graph needs compiling (it imports torch: seconds).
    _C._service_set_launcher([sys.executable, "-m", "torch_neuron.service", "serve"])
    argv = list(getattr(sys, "orig_argv", []))
    if "-m" in argv and argv[argv.index("-m") + 1:][:1] == ["torch_neuron.service"]:
        return  # the service's own commands: `status` or `stop` must not start one
    _C._service_start_in_background()


def paths(socket: Optional[str] = None) -> Dict[str, str]:
    """The service directory and socket of this user and compiler (or of the
    socket path given)."""
    directory, sock = _C._service_paths(socket or "")
    return {"dir": directory, "socket": sock}


def status(socket: Optional[str] = None) -> Dict[str, object]:
    """The running service's counters; RuntimeError if none answers."""
    return dict(_C._service_call("status", False, socket or ""))


def start(socket: Optional[str] = None) -> Dict[str, object]:
    """Starts this user's service if none answers; returns its status."""
    return dict(_C._service_call("status", True, socket or "", 90.0))


def stop(socket: Optional[str] = None) -> bool:
    """Asks the service to exit; False if none was running."""
    try:
        _C._service_call("shutdown", False, socket or "")
    except RuntimeError:
        return False
    return True


def last_fallback_reason() -> str:
    """Why this process last compiled a graph itself instead of the service ("" if never)."""
    return _C._service_last_fallback()
