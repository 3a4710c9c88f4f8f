"""Members of tar and zip archives, and single compressed files, read as byte streams.

Nothing is unpacked to disk: a tar member is read from the archive in stream mode (``r|*``,
which also reads ``.tar.gz``/``.tgz``, ``.tar.bz2`` and ``.tar.xz``), decompressing as it goes;
a zip member through :meth:`zipfile.ZipFile.open`. Two members of one tar (one per language)
are two independent streams over the archive. A member whose own name ends in ``.gz`` or
``.xz`` is decompressed too.

A member is chosen by its exact path in the archive (a leading ``./`` does not matter) or by a
glob (:func:`fnmatch.fnmatchcase`, where ``*`` also crosses ``/``) that must match exactly one
regular file. Listing a tar's
members takes one pass over it; the list is remembered by the archive's content hash in
``<cache>/archives/`` so that a changed ``member`` setting does not pay that pass again.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mtcore.contracts.errors import DataError
from mtcore.exec.streams import CORRUPT, capped, decompressing
from mtcore.recipe.hashing import cache_home, content_hash

MAX_MEMBERS_ENV, MAX_HEADER_ENV = "MTCORE_ARCHIVE_MAX_MEMBERS", "MTCORE_ARCHIVE_MAX_HEADER"
MAX_MEMBERS = 1_000_000  # entries of one archive listed (a corpus release has thousands)
MAX_HEADER = 1 << 20  # bytes of one tar member's long name or pax header (POSIX: 256 a name)


def limit(env: str, default: int) -> int:
    """A bound, from ``env`` where set (a positive integer), else ``default``."""
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise DataError(f"{env}={text!r}: give a positive whole number (default {default})")
    return int(text)


class BoundedTarInfo(tarfile.TarInfo):
    """A tar header whose long name (GNU) or extended header (pax) is read only up to
    ``MTCORE_ARCHIVE_MAX_HEADER`` bytes: tarfile reads either whole into memory first."""

    def _proc_gnulong(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:  # type: ignore[override]
        self._bounded()
        return super()._proc_gnulong(tarfile)  # type: ignore[misc]

    def _proc_pax(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:  # type: ignore[override]
        self._bounded()
        return super()._proc_pax(tarfile)  # type: ignore[misc]

    def _bounded(self) -> None:
        most = limit(MAX_HEADER_ENV, MAX_HEADER)
        if self.size > most:
            raise DataError(
                f"a tar header of {self.size} bytes (a member's long name or pax header) is over "
                f"{most}; a corpus archive's are a few hundred (raise {MAX_HEADER_ENV} if this "
                "one is meant)"
            )


SHOWN = 20  # member names listed in an error


def _compressed(name: str) -> bool:
    """Whether a file's name says its bytes are compressed as a whole (tar's own compressions
    included)."""
    return name.lower().endswith((".gz", ".tgz", ".xz", ".txz", ".bz2", ".tbz2"))


@dataclass(frozen=True)
class Member:
    """One regular file inside an archive; shown as ``archive!member`` in messages."""

    archive: Path
    name: str

    def __str__(self) -> str:
        return f"{self.archive}!{self.name}"

    @contextlib.contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        if zipfile.is_zipfile(self.archive):
            with zipfile.ZipFile(self.archive) as archive:
                entry = archive.getinfo(self.name)
                stream = archive.open(entry)
                if entry.compress_type != zipfile.ZIP_STORED and not _compressed(self.name):
                    stream = capped(stream, str(self), entry.compress_size)
                with decompressing(stream, self.name, entry.file_size) as handle:
                    yield handle
            return
        with open_tar(self.archive) as tar:
            for info in entries(tar, self.archive):
                if info.name == self.name and info.isfile():
                    raw = tar.extractfile(info)
                    assert raw is not None  # a regular file always has a stream
                    if _compressed(self.archive.name) and not _compressed(self.name):
                        raw = capped(raw, str(self), self.archive.stat().st_size)
                    with decompressing(raw, self.name, info.size) as handle:
                        yield handle
                    return
        raise DataError(f"{self}: no such member (did the archive change after it was listed?)")


@contextlib.contextmanager
def open_tar(archive: Path) -> Iterator[tarfile.TarFile]:
    try:
        tar = tarfile.open(archive, mode="r|*", tarinfo=BoundedTarInfo)  # noqa: SIM115
    except tarfile.TarError as exc:
        raise DataError(
            f"{archive}: not a tar or zip archive ({exc}); a single plain, .gz or .xz file "
            "is read with files: or tsv:, not archive:"
        ) from exc
    with tar:
        yield tar


def entries(tar: tarfile.TarFile, archive: Path) -> Iterator[tarfile.TarInfo]:
    """The members of a tar opened in stream mode, one at a time, at most
    ``MTCORE_ARCHIVE_MAX_MEMBERS`` of them; tarfile's own list of what it read is emptied as
    it goes (it would hold every header of the archive)."""
    most, seen = limit(MAX_MEMBERS_ENV, MAX_MEMBERS), 0
    while (info := tar.next()) is not None:
        seen += 1
        if seen > most:
            raise DataError(too_many(archive, most))
        tar.members.clear()  # type: ignore[attr-defined]
        yield info


def too_many(archive: Path, most: int) -> str:
    return (
        f"{archive}: more than {most} members; a corpus archive has far fewer (raise "
        f"{MAX_MEMBERS_ENV} if this one is meant)"
    )


def scan(archive: Path) -> list[str]:
    """Names of the regular files in ``archive``, in archive order (one pass over a tar)."""
    if zipfile.is_zipfile(archive):
        most = limit(MAX_MEMBERS_ENV, MAX_MEMBERS)
        with open(archive, "rb") as raw:  # its end record, before zipfile reads every entry
            end = zipfile._EndRecData(raw)  # type: ignore[attr-defined]
        if end and end[zipfile._ECD_ENTRIES_TOTAL] > most:  # type: ignore[attr-defined]
            raise DataError(too_many(archive, most))
        directory = end[zipfile._ECD_SIZE] if end else 0  # type: ignore[attr-defined]
        if directory > max(most * 64, 1 << 24):
            raise DataError(
                f"{archive}: a central directory of {directory} bytes, over 64 a member for "
                f"{most} members (raise {MAX_MEMBERS_ENV} if it is meant)"
            )
        with zipfile.ZipFile(archive) as handle:
            return [info.filename for info in handle.infolist() if not info.is_dir()]
    try:
        with open_tar(archive) as tar:
            return [info.name for info in entries(tar, archive) if info.isfile()]
    except DataError:
        raise
    except CORRUPT as exc:
        raise DataError(f"{archive}: cannot be listed, truncated or corrupt: {exc}") from exc


def members(archive: Path) -> list[str]:
    """:func:`scan`, remembered by the archive's content hash."""
    memo = cache_home() / "archives" / f"{content_hash(archive)}.json"
    with contextlib.suppress(OSError, ValueError):
        names = json.loads(memo.read_text(encoding="utf-8"))
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return names
    names = scan(archive)
    with contextlib.suppress(OSError):  # a read-only cache only costs the next run a pass
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=memo.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(names, out, ensure_ascii=False)
        os.replace(temp, memo)
    return names


def listed(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:SHOWN])
    return shown + (f", ... ({len(names) - SHOWN} more)" if len(names) > SHOWN else "")


def find_member(archive: Path, pattern: str, what: str) -> Member:
    """The one member named ``pattern`` or matching it as a glob; ``what`` says which setting
    asked for it, for the error."""
    names = members(archive)
    exact = [name for name in names if name.removeprefix("./") == pattern.removeprefix("./")]
    if len(exact) == 1:  # tar files made with `tar -C dir .` name members ./path
        return Member(archive, exact[0])
    hits = [name for name in names if fnmatch.fnmatchcase(name.removeprefix("./"), pattern)]
    if len(hits) == 1:
        return Member(archive, hits[0])
    if not hits:
        raise DataError(
            f"{archive}: no member matches {pattern!r} ({what}); the archive holds "
            f"{len(names)} files: {listed(names)}"
        )
    raise DataError(
        f"{archive}: {len(hits)} members match {pattern!r} ({what}): {listed(hits)}; give a "
        "path or pattern that matches exactly one"
    )
