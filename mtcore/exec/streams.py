"""Compressed files read as byte streams: plain, ``.gz`` or ``.xz`` by the name, and what a
truncated or corrupt stream raises while it is read.

What a compressed stream expands to is bounded: past ``EXPANSION_FLOOR`` bytes, at most
``MTCORE_MAX_EXPANSION`` (default ``MAX_EXPANSION``) times the compressed bytes (issue 70: a
``.gz`` expanded 460x onto disk with no cap). Text compresses 3-10x with gzip or xz; a larger
ratio is a file made to fill a disk."""

from __future__ import annotations

import contextlib
import gzip
import io
import lzma
import os
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from mtcore.contracts.errors import DataError

# What a truncated or corrupt compressed stream raises while it is being read.
CORRUPT = (EOFError, OSError, lzma.LZMAError, zlib.error, tarfile.TarError, zipfile.BadZipFile)


MAX_EXPANSION_ENV = "MTCORE_MAX_EXPANSION"
MAX_EXPANSION = 100
EXPANSION_FLOOR = 256 << 20
"""Bytes any compressed stream may expand to whatever its ratio (a small file of repeated
lines may well pass 100x)."""


def max_expansion() -> int:
    """``MTCORE_MAX_EXPANSION`` where set (a positive whole number), else ``MAX_EXPANSION``."""
    text = os.environ.get(MAX_EXPANSION_ENV, "").strip()
    if not text:
        return MAX_EXPANSION
    if not text.isdigit() or int(text) < 1:
        raise DataError(
            f"{MAX_EXPANSION_ENV}={text!r}: give a positive whole number (default {MAX_EXPANSION})"
        )
    return int(text)


class _Capped(io.RawIOBase):
    """``inner``'s bytes, an error once more than ``most`` of them were read."""

    def __init__(self, inner: IO[bytes], name: str, packed: int, most: int) -> None:
        self.inner, self.name, self.packed, self.most, self.seen = inner, name, packed, most, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count: int = self.inner.readinto(buffer)  # type: ignore[attr-defined]
        self.seen += count
        if self.seen > self.most:
            raise DataError(
                f"{self.name}: expands to more than {self.most} bytes from {self.packed} "
                f"compressed (over {max_expansion()}x); a text corpus compresses 3-10x. Raise "
                f"{MAX_EXPANSION_ENV} if this file is meant"
            )
        return count

    def close(self) -> None:
        self.inner.close()
        super().close()


def capped(handle: IO[bytes], name: str, packed: int) -> IO[bytes]:
    """``handle``, the decompressed text of ``packed`` compressed bytes, bounded in what it
    may expand to (see the module's docstring)."""
    most = max(EXPANSION_FLOOR, packed * max_expansion())
    return io.BufferedReader(_Capped(handle, name, packed, most))


def _packed_size(handle: IO[bytes], size: int | None) -> int:
    if size is not None:
        return size
    try:
        return os.fstat(handle.fileno()).st_size
    except (OSError, AttributeError, io.UnsupportedOperation):
        return 0


@contextlib.contextmanager
def decompressing(handle: IO[bytes], name: str, size: int | None = None) -> Iterator[IO[bytes]]:
    """``handle`` decompressed as its ``name`` says (``.gz``, ``.xz``), else as it is; closes
    ``handle`` on exit. ``size``: the compressed bytes (default: the size of ``handle``'s
    file), which bound what the stream may expand to."""
    with handle:
        lower = name.lower()
        if lower.endswith(".gz"):
            packed = _packed_size(handle, size)
            with gzip.GzipFile(fileobj=handle, mode="rb") as unzipped:
                yield capped(unzipped, name, packed)  # type: ignore[arg-type]
        elif lower.endswith(".xz"):
            packed = _packed_size(handle, size)
            with lzma.LZMAFile(handle, "rb") as unxz:
                yield capped(unxz, name, packed)  # type: ignore[arg-type]
        else:
            yield handle


def open_compressed(path: Path) -> contextlib.AbstractContextManager[IO[bytes]]:
    """A plain, ``.gz`` or ``.xz`` file (by its name) as a stream of its text bytes."""
    return decompressing(open(path, "rb"), str(path))
