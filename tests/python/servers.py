"""Servers the tests start for themselves, on loopback only: a free port, and a
real redis-server (what the remote compile cache talks to), stopped after use."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
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
def redis_server(directory, *args: str, tls: tuple[str, str] | None = None,
                 password: str | None = None) -> Iterator[int]:
    """A redis-server on 127.0.0.1 with no persistence, its files in
    `directory`, given `args` besides; yields its port once it answers PING.
    With `tls` (certificate file, key file) it speaks TLS only on that port;
    with `password` it is the one its PING authenticates with."""
    assert REDIS is not None, "redis-server is not installed (scripts/setup.sh installs it)"
    port = free_port()
    listen = ["--port", str(port)]
    if tls is not None:
        listen = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", tls[0], "--tls-key-file", tls[1],
                  "--tls-auth-clients", "no"]
    proc = subprocess.Popen([REDIS, *listen, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(directory), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ping = (b"AUTH %s\r\n" % password.encode() if password else b"") + b"PING\r\n"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                    s = raw
                    if tls is not None:
                        s = ssl.create_default_context(cafile=tls[0]).wrap_socket(raw, server_hostname="127.0.0.1")
                    s.sendall(ping)
                    time.sleep(0.05)
                    if s.recv(64).endswith(b"+PONG\r\n"):
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not start"
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
