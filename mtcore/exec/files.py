"""Moving bytes between files without passing them through Python: a byte range appended by
the kernel, a whole file cloned, linked or copied kernel-side."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mtcore.contracts.errors import DataError

_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)


def copy_range(source: Path, handle: Any, start: int, end: int) -> None:
    """Bytes ``start`` to ``end`` of ``source`` appended to ``handle`` by the kernel (input
    that no rule changed, once the output is being written)."""
    if end <= start:
        return
    handle.flush()
    with open(source, "rb") as src:
        offset = start
        while offset < end:
            sent = os.sendfile(handle.fileno(), src.fileno(), offset, end - offset)
            if not sent:
                raise DataError(f"{source}: changed while it was read (shorter than {end} bytes)")
            offset += sent


def same_file(source: Path, target: Path) -> str:
    """``target`` made to hold ``source``'s bytes without writing them again: a copy-on-write
    clone, else a hard link, else a kernel-side copy. Returns which."""
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    with open(source, "rb") as src, open(target, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
            return "clone"
        except OSError:
            pass
    target.unlink()
    try:
        os.link(source, target)
        return "link"
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
            raise
    shutil.copyfile(source, target)
    return "copy"


def replace_file(path: Path, data: bytes | str) -> None:
    """Writes ``path`` whole or not at all, through a fresh temporary name beside it (created
    exclusively: a link planted at a fixed temporary name would be followed), then a rename."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
