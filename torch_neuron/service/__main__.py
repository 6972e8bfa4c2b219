"""python -m torch_neuron.service start|status|stop|serve (see torch_neuron.service)."""

from __future__ import annotations

import argparse
import os
import sys

from .. import _C, config
from . import __doc__ as _DOC, paths, start, status, stop


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m torch_neuron.service", description=_DOC.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("start", "status", "stop"):
        s = sub.add_parser(name)
        s.add_argument("--socket", help="a service's socket (default: this user's service)")
    s = sub.add_parser("serve", help="run the service in this process (what `start` runs, detached)")
    s.add_argument("--dir", required=True, help="the service directory (socket, lock, log, pid)")
    s.add_argument("--cache-dir", default="", help="the disk cache it reads and writes")
    s.add_argument("--idle-s", type=float, default=None, help="exit after this long without a request")
    s.add_argument("--workers", type=int, default=0, help="compile workers (default: one per core)")
    s.add_argument("--request-timeout-s", type=float, default=60.0)
    args = p.parse_args(argv)
    try:
        if args.command == "serve":
            idle = args.idle_s if args.idle_s is not None else config.current()["service_idle_s"]
            delay = int(os.environ.get("TORCH_NEURON_TEST_SERVICE_DELAY_MS", "0") or 0)
            _C._service_serve(args.dir, args.cache_dir, idle, args.workers, args.request_timeout_s, delay)
            return 0
        if args.command == "stop":
            stopped = stop(args.socket)
            print("stopped" if stopped else "no service was running")
            return 0
        info = start(args.socket) if args.command == "start" else status(args.socket)
    except (RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    where = paths(args.socket)
    print(f"service at {where['socket']}")
    for key in ("pid", "uptime_s", "requests", "compiles", "joins", "disk_hits", "errors", "refused_peers",
                "queue_length", "in_flight", "workers", "kernel_builds", "kernel_reuses", "lookups",
                "remote_hits", "remote_stores", "remote_corrupt", "remote_untrusted"):
        value = info[key]
        print(f"  {key:14s} {value:.1f}" if isinstance(value, float) else f"  {key:14s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
