"""Stable hashes of configs and files."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mtcore.contracts.errors import MtcoreError

CHUNK = 1 << 20


def hash_json(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


LOG_SUFFIX = ".log"  # tool logs: kept with a step's outputs, never part of their hashes


def hash_tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative POSIX path -> hex); hidden entries and
    logs (``*.log``: timestamps, absolute paths, a resumed tool's second start) skipped, so a
    step resumed after a kill has the output hashes of one that ran through."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or rel.as_posix() in skip:
            continue
        if path.suffix == LOG_SUFFIX:
            continue
        if path.is_file():
            out[rel.as_posix()] = linked_hash(path) or hash_file(path)
    return out


def linked_files(root: Path) -> dict[str, list[int]]:
    """``[size, mtime_ns]`` of every file under ``root`` that has other hard links (an input
    the fetch step linked instead of copying, :mod:`mtcore.data.ingest`): the runner records them
    and runs the step again if one changed, since a change to the linked file changes the
    output too."""
    out: dict[str, list[int]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_file() and st.st_nlink > 1:
            out[path.relative_to(root).as_posix()] = [st.st_size, st.st_mtime_ns]
    return out


def linked_hash(path: Path) -> str | None:
    """The remembered sha256 (:func:`content_hash`) of a file ``path`` is a hard link of: the
    same inode, size and mtime, checked on the remembered path; None if there is none."""
    st = path.stat()
    if st.st_nlink < 2:
        return None
    try:
        db = _open_memory()
    except (OSError, sqlite3.Error):
        return None
    try:
        with db:
            rows = db.execute(
                "SELECT path, sha256 FROM files WHERE inode = ? AND size = ? AND mtime_ns = ?",
                (st.st_ino, st.st_size, st.st_mtime_ns),
            ).fetchall()
    except sqlite3.Error:
        return None
    finally:
        db.close()
    for other, digest in rows:
        try:
            if os.path.samefile(other, path):
                return str(digest)
        except OSError:
            continue
    return None


def cache_home() -> Path:
    """``$MTCORE_CACHE``, else ``$XDG_CACHE_HOME`` (or ``~/.cache``)/mtcore; refused when it
    exists and another user owns it or others may write it (:func:`owner_only`)."""
    if os.environ.get("MTCORE_CACHE"):
        home = Path(os.environ["MTCORE_CACHE"]).expanduser()
    else:
        home = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "mtcore"
    owner_only(home, "the cache (MTCORE_CACHE)")
    return home


CONVERSIONS_ENV = "MTCORE_CONVERSIONS"


def conversions_home() -> Path:
    """Where converted models are cached: ``$MTCORE_CONVERSIONS`` where set (a system from
    someone else converts there, see :func:`private_conversions`), else the cache's
    ``ctranslate2`` folder."""
    where = os.environ.get(CONVERSIONS_ENV)
    if where:
        folder = Path(where)
        owner_only(folder, f"the conversions folder ({CONVERSIONS_ENV})")
        return folder
    return cache_home() / "ctranslate2"


@contextlib.contextmanager
def private_conversions() -> Iterator[Path]:
    """A fresh folder, this user's only, for the conversions made inside the ``with`` (worker
    processes started there inherit it), removed at its end: a system from someone else never
    writes into the user's cache (issue 70), at the cost of converting its models again on
    each load."""
    folder = Path(tempfile.mkdtemp(prefix="mtcore-conversions-"))
    before = os.environ.get(CONVERSIONS_ENV)
    os.environ[CONVERSIONS_ENV] = str(folder)
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(CONVERSIONS_ENV, None)
        else:
            os.environ[CONVERSIONS_ENV] = before
        shutil.rmtree(folder, ignore_errors=True)


def owner_only(folder: Path, what: str) -> None:
    """The trust boundary: a folder whose files mtcore reads back as its own (a workdir, its
    job folders, the cache) is writable by its owner only, and that owner is this user. A
    folder that does not exist yet passes (it is created with this process's umask)."""
    try:
        st = folder.stat()
    except OSError:
        return
    problem = ""
    if st.st_uid != os.getuid():
        problem = f"belongs to user {st.st_uid}, not to this one ({os.getuid()})"
    elif st.st_mode & 0o022:
        problem = f"may be written by {'others' if st.st_mode & 0o002 else 'its group'}"
    if problem:
        raise MtcoreError(
            f"{what} {folder} {problem}: whoever can write there can change what mtcore reads "
            f"back as its own (chmod go-w {folder}, or use a folder of your own)"
        )


def content_hash(path: Path) -> str:
    """sha256 of ``path``'s bytes, remembered by (path, size, mtime_ns, inode) as DVC does, so
    an unchanged file is read once. A copy, a checkout or a ``touch`` re-reads the file but
    keeps its hash (and so every cached step that read it); only new bytes change it. The
    memory is an SQLite file in :func:`cache_home` shared by processes; if it cannot be
    opened, every call reads the file."""
    path = Path(path).absolute()
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    try:
        db = _open_memory()
    except (OSError, sqlite3.Error):
        return hash_file(path)
    try:
        with db:
            row = db.execute(
                "SELECT sha256 FROM files WHERE path = ? AND size = ? AND mtime_ns = ? "
                "AND inode = ?",
                key,
            ).fetchone()
        if row:
            return row[0]
        digest = hash_file(path)
        with db:
            db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)", (*key, digest))
        return digest
    except sqlite3.Error:
        return hash_file(path)
    finally:
        db.close()


def _open_memory() -> sqlite3.Connection:
    home = cache_home()
    home.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(home / "file-hashes.sqlite", timeout=60)
    with db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, "
            "mtime_ns INTEGER, inode INTEGER, sha256 TEXT)"
        )
    return db
