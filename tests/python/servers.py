"""Servers the tests start for themselves, on loopback only: a free port, and a
real redis-server (what the remote compile cache talks to), stopped after use."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from typing import Iterator

REDIS = shutil.which("redis-server")


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def redis_server(directory) -> Iterator[int]:
    """A redis-server on 127.0.0.1 with no persistence, its files in
    `directory`; yields its port once it answers PING."""
    assert REDIS is not None, "redis-server is not installed (scripts/setup.sh installs it)"
    port = free_port()
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not start"
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
