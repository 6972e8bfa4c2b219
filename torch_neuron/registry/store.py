"""The shape registry's file format: an SQLite database.

Tables (format version 1):

    registry_meta(key, value)        format = "torch_neuron.shape_registry", version = "1"
    signatures(id, op, args, fallback)
        op: "aten::add.Tensor"; args: the recorder's JSON (registry/recorder.h);
        fallback: "" when the op was traced, else why it ran on the CPU fallback.
        (op, args, fallback) is unique.
    counts(signature, tag, count)    how many times `tag` (a model or script) ran it

Every write is one transaction that adds counts (an UPSERT), under SQLite's own
locking with a long busy timeout, so processes writing into one file at once lose
nothing. A file that is not a registry is refused with RegistryError, which names
the file and what it is. A registry compressed with gzip (FILE.db.gz, how the
committed one is kept) is read through a decompressed copy in the temporary
directory, and cannot be written.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import zlib
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Tuple

FORMAT = "torch_neuron.shape_registry"
VERSION = 1
# Writers wait this long for another writer's transaction (seconds).
BUSY_TIMEOUT_S = 120.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS registry_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS signatures (
    id INTEGER PRIMARY KEY,
    op TEXT NOT NULL,
    args TEXT NOT NULL,
    fallback TEXT NOT NULL DEFAULT '',
    UNIQUE (op, args, fallback));
CREATE TABLE IF NOT EXISTS counts (
    signature INTEGER NOT NULL REFERENCES signatures(id),
    tag TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (signature, tag));
"""


class RegistryError(ValueError):
    """A registry file that cannot be read or written: names the file and why."""


@dataclass
class Signature:
    op: str
    args: str  # JSON text, as recorded
    fallback: str = ""
    counts: Dict[str, int] = field(default_factory=dict)  # tag -> count

    @property
    def key(self) -> str:
        """A stable short name of the signature (replay commands use it)."""
        h = hashlib.sha1(f"{self.op}\0{self.args}\0{self.fallback}".encode()).hexdigest()
        return h[:16]

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    def decoded_args(self) -> list:
        return json.loads(self.args)


def _check_format(conn: sqlite3.Connection, path: str) -> None:
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as e:
        raise RegistryError(f"{path}: not a torch_neuron shape registry ({e})") from None
    if not tables:
        return  # a new, empty database
    if "registry_meta" not in tables:
        raise RegistryError(f"{path}: an SQLite database, but not a torch_neuron shape registry "
                            f"(its tables: {', '.join(sorted(tables))})")
    meta = dict(conn.execute("SELECT key, value FROM registry_meta"))
    if meta.get("format") != FORMAT:
        raise RegistryError(f"{path}: an SQLite database, but not a torch_neuron shape registry "
                            f"(format {meta.get('format')!r})")
    try:
        version = int(meta.get("version", ""))
    except ValueError:
        raise RegistryError(f"{path}: shape registry with a malformed version {meta.get('version')!r}") from None
    if version > VERSION:
        raise RegistryError(f"{path}: shape registry format version {version} is newer than this "
                            f"build reads ({VERSION}); upgrade torch_neuron")
    missing = {"signatures", "counts"} - tables
    if missing:
        raise RegistryError(f"{path}: shape registry is missing its tables {sorted(missing)}")


def _decompressed(path: str) -> str:
    """A decompressed copy of the gzip registry `path`, made once per content."""
    st = os.stat(path)
    tag = hashlib.sha1(f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), f"torch_neuron_registry_{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    copy = os.path.join(folder, f"{os.path.basename(path)[:-3]}.{tag}")
    if not os.path.exists(copy):
        fd, partial = tempfile.mkstemp(dir=folder)
        try:
            with gzip.open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (OSError, EOFError, zlib.error) as e:
            os.unlink(partial)
            raise RegistryError(f"{path}: not a readable gzip file ({e})") from None
        os.replace(partial, copy)  # atomic: readers never see a partial copy
    return copy


@contextlib.contextmanager
def _connect(path: str, create: bool) -> Iterator[sqlite3.Connection]:
    if not create and not os.path.exists(path):
        raise RegistryError(f"{path}: no such shape registry file")
    if os.path.isdir(path):
        raise RegistryError(f"{path}: is a directory, not a shape registry file")
    target = path
    if path.endswith(".gz"):
        if create:
            raise RegistryError(f"{path}: a compressed registry is read-only (gunzip it to add to it)")
        target = _decompressed(path)
    try:
        conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as e:
        raise RegistryError(f"{path}: cannot open the shape registry ({e})") from None
    try:
        _check_format(conn, path)
        yield conn
    except sqlite3.DatabaseError as e:
        raise RegistryError(f"{path}: the shape registry is unreadable or corrupt ({e})") from None
    finally:
        conn.close()


def _init(conn: sqlite3.Connection) -> None:
    # Statement by statement: executescript() would commit the open transaction.
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("INSERT OR IGNORE INTO registry_meta VALUES ('format', ?)", (FORMAT,))
    conn.execute("INSERT OR IGNORE INTO registry_meta VALUES ('version', ?)", (str(VERSION),))


def add(path: str, records: Iterable[Tuple[str, str, str, str, int]]) -> int:
    """Adds (tag, op, args, fallback, count) records to the file (created if
    missing), summing counts; returns how many records were written."""
    records = list(records)
    with _connect(path, create=True) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            _init(conn)
            for tag, op, args, fallback, count in records:
                conn.execute("INSERT OR IGNORE INTO signatures (op, args, fallback) VALUES (?, ?, ?)",
                             (op, args, fallback))
                (sid,) = conn.execute("SELECT id FROM signatures WHERE op = ? AND args = ? AND fallback = ?",
                                      (op, args, fallback)).fetchone()
                conn.execute("INSERT INTO counts (signature, tag, count) VALUES (?, ?, ?) "
                             "ON CONFLICT (signature, tag) DO UPDATE SET count = count + excluded.count",
                             (sid, tag, int(count)))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return len(records)


def load(path: str) -> List[Signature]:
    """Every signature of the file with its per-tag counts, in id order."""
    with _connect(path, create=False) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'signatures'").fetchone():
            raise RegistryError(f"{path}: an empty file, not a shape registry")
        sigs: Dict[int, Signature] = {}
        for sid, op, args, fallback in conn.execute("SELECT id, op, args, fallback FROM signatures ORDER BY id"):
            sigs[sid] = Signature(op, args, fallback)
        for sid, tag, count in conn.execute("SELECT signature, tag, count FROM counts"):
            if sid not in sigs:
                raise RegistryError(f"{path}: the shape registry is corrupt (a count of signature {sid}, "
                                    "which it does not hold)")
            sigs[sid].counts[tag] = sigs[sid].counts.get(tag, 0) + count
        return list(sigs.values())


def write(path: str, signatures: Iterable[Signature]) -> int:
    """Writes `signatures` (with their counts) into `path`, adding to what it holds."""
    records = []
    for s in signatures:
        for tag, count in sorted(s.counts.items()):
            records.append((tag, s.op, s.args, s.fallback, count))
    return add(path, records)
