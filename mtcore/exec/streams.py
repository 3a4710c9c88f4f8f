"""Compressed files read as byte streams: plain, ``.gz`` or ``.xz`` by the name, and what a
truncated or corrupt stream raises while it is read."""

from __future__ import annotations

import contextlib
import gzip
import lzma
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

# What a truncated or corrupt compressed stream raises while it is being read.
CORRUPT = (EOFError, OSError, lzma.LZMAError, zlib.error, tarfile.TarError, zipfile.BadZipFile)


@contextlib.contextmanager
def decompressing(handle: IO[bytes], name: str) -> Iterator[IO[bytes]]:
    """``handle`` decompressed as its ``name`` says (``.gz``, ``.xz``), else as it is; closes
    ``handle`` on exit."""
    with handle:
        lower = name.lower()
        if lower.endswith(".gz"):
            with gzip.GzipFile(fileobj=handle, mode="rb") as unzipped:
                yield unzipped  # type: ignore[misc]
        elif lower.endswith(".xz"):
            with lzma.LZMAFile(handle, "rb") as unxz:
                yield unxz  # type: ignore[misc]
        else:
            yield handle


def open_compressed(path: Path) -> contextlib.AbstractContextManager[IO[bytes]]:
    """A plain, ``.gz`` or ``.xz`` file (by its name) as a stream of its text bytes."""
    return decompressing(open(path, "rb"), path.name)
