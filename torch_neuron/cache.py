"""The compile cache on disk: inspect and maintain it.

    python -m torch_neuron.cache info     # where, how big, how many entries, fingerprint
    python -m torch_neuron.cache list     # every entry: key, size, age
    python -m torch_neuron.cache verify   # read and validate every entry
    python -m torch_neuron.cache clear    # remove everything
    python -m torch_neuron.cache prune [--max-mb N]   # evict least recently used entries

The directory is TORCH_NEURON_CACHE_DIR (or --dir), default ~/.cache/torch_neuron.
Corrupt entries found by verify are moved to <dir>/v1/quarantine/ (the runtime
does the same when it meets one) and rebuilt on next use. A shared cache also
holds entries made under other settings (another opt level, torch_neuron or
torch version, toolchain): verify checks their framing and checksum and keeps
them, since they are other processes' entries, not damaged ones.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import List, Optional

from . import _C



def _without_password(url: str) -> str:
    """A Redis URL as it may be printed: redis://user:secret@host -> redis://user:***@host."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user + ':' if colon else ''}***@{host}"

def cache_dir() -> str:
    """The cache directory this process uses."""
    return _C._config()["cache_dir"] or _C._cache_default_dir()


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _age(mtime: int) -> str:
    seconds = max(0, int(time.time()) - mtime)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def entries(directory: Optional[str] = None):
    """(key, path, bytes, mtime) of every entry, oldest first."""
    return _C._cache_list(directory or cache_dir())


def verify(directory: Optional[str] = None, others: Optional[List[tuple]] = None) -> List[tuple]:
    """Validates every entry; returns (key, error) for the bad ones, which are
    moved to quarantine. Intact entries of other compiler settings are kept;
    ``others``, when given, receives (key, reason) for each of them."""
    directory = directory or cache_dir()
    bad = []
    quarantine = os.path.join(directory, "v1", "quarantine")
    for key, path, _, _ in entries(directory):
        try:
            with open(path, "rb") as f:
                verdict, error = _C._neff_check(f.read())
        except OSError as e:
            verdict, error = "bad", f"unreadable: {e}"
        if verdict == "other" and others is not None:
            others.append((key, error))
        if verdict == "bad":
            bad.append((key, error))
            os.makedirs(quarantine, exist_ok=True)
            try:
                os.replace(path, os.path.join(quarantine, f"{key}-{time.time_ns()}.neff"))
            except OSError:
                pass
    return bad


def _check_dir(directory: str, must_exist: bool = True) -> Optional[str]:
    if not os.path.exists(directory):
        return f"no compile cache at {directory} (nothing has been compiled with it yet)" if must_exist else None
    if not os.path.isdir(directory):
        return f"{directory} is not a directory"
    if not os.access(directory, os.R_OK | os.X_OK):
        return f"cannot read {directory}: permission denied"
    return None


def main(argv=None) -> int:
    """``python -m torch_neuron.cache``: info, list, verify, clear or prune the
    disk cache; returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`cache list | head`): stop quietly, as ls does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_neuron.cache", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["info", "list", "verify", "clear", "prune"])
    parser.add_argument("--dir", help="cache directory (default: TORCH_NEURON_CACHE_DIR or ~/.cache/torch_neuron)")
    parser.add_argument("--max-mb", type=int, help="prune: size bound in MiB (default TORCH_NEURON_CACHE_MAX_MB)")
    args = parser.parse_args(argv)
    directory = os.path.abspath(args.dir or cache_dir())

    problem = _check_dir(directory, must_exist=args.command != "clear")
    if problem:
        print(problem, file=sys.stderr)
        return 1 if args.command != "info" else 0

    if args.command == "info":
        found = entries(directory)
        total = sum(e[2] for e in found)
        quarantine = os.path.join(directory, "v1", "quarantine")
        quarantined = len(os.listdir(quarantine)) if os.path.isdir(quarantine) else 0
        print(f"directory     {directory}")
        print(f"entries       {len(found)}")
        print(f"size          {_human(total)} (bound {_human(_C._config()['cache_max_mb'] * 2**20)})")
        if found:
            print(f"oldest        {_age(found[0][3])} ago, newest {_age(found[-1][3])} ago")
        print(f"quarantined   {quarantined}")
        print(f"fingerprint   {_C._current_fingerprint()}")
        remote = _C._config()["remote_cache"]
        if remote:
            try:
                print(f"remote        {_without_password(remote)}: {len(_C._remote_keys(remote))} entries")
            except (RuntimeError, ValueError) as e:
                print(f"remote        {_without_password(remote)}: unavailable ({e})")
    elif args.command == "list":
        for key, _, size, mtime in entries(directory):
            print(f"{key}  {_human(size):>10}  {_age(mtime):>5} ago")
    elif args.command == "verify":
        found = entries(directory)
        others: List[tuple] = []
        bad = verify(directory, others)
        for key, error in bad:
            print(f"{key}  BAD: {error}")
        valid = len(found) - len(bad) - len(others)
        kept = f" ({len(others)} of other compiler settings, kept)" if others else ""
        print(f"{valid + len(others)} of {len(found)} entries valid{kept}; "
              f"{len(bad)} moved to quarantine")
        remote = _C._config()["remote_cache"]
        remote_bad = []
        if remote:
            remote_valid, remote_others, remote_bad = _C._remote_verify(remote)
            kept = f" ({remote_others} of other compiler settings, kept)" if remote_others else ""
            for key in remote_bad:
                print(f"{key}  BAD (remote): deleted")
            print(f"remote {_without_password(remote)}: {remote_valid + remote_others} of "
                  f"{remote_valid + remote_others + len(remote_bad)} entries valid{kept}; {len(remote_bad)} deleted")
        return 1 if bad or remote_bad else 0
    elif args.command == "clear":
        count = len(entries(directory)) if os.path.isdir(directory) else 0
        _C._cache_clear(directory)
        print(f"removed {count} entries from {directory}")
    elif args.command == "prune":
        before = entries(directory)
        max_bytes = (args.max_mb if args.max_mb is not None else _C._config()["cache_max_mb"]) * 2**20
        _C._cache_prune(directory, max_bytes)
        after = entries(directory)
        print(f"removed {len(before) - len(after)} entries; {len(after)} left, "
              f"{_human(sum(e[2] for e in after))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
