"""Reading line-aligned corpus files through the input policy, sharded over the executor.

The driver cuts the files into blocks of lines at newlines (:class:`mtcore.textblock.
BlockReader`, aligned across the files) and workers check each block against the policy with a
few passes at memory speed: UTF-8 decoding, a search for NUL and line-break characters, line
lengths, ``\\r\\n`` ends. A block where no rule fires comes back as "unchanged"; one where a rule
may fire is read line by line with the very functions the serial reader uses
(:func:`mtcore.corpus.decode_line`, :func:`mtcore.corpus.empty_pair`), so both give the same
pairs, the same counts and the same errors naming file and line.

When no block of uncompressed input changed, the output files are the input files: a
copy-on-write clone where the file system has one, else a hard link (the runner re-runs a step
whose linked output changed since, see :func:`mtcore.hashing.linked_files`), else a kernel-side
copy. Nothing is decoded into Python strings per line and no byte is written twice.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mtcore.corpus import (
    BOM,
    INNER_BREAKS,
    InputPolicy,
    decode_line,
    empty_pair,
    too_long,
)
from mtcore.errors import DataError
from mtcore.stats import Stats
from mtcore.textblock import BlockReader, RawBlock

BLOCK_LINES = 50_000
"""Lines per block: about 10 MB of news-length text, a few MB of short segments."""
IN_PROCESS_BYTES = 32 << 20
"""Below this total size the blocks are checked in the driver: starting workers costs more."""
_COMPRESSED = (".gz", ".xz")
_BOM = BOM.encode()
_NUL_OR_BREAK = ("\x00", *(chr(c) for c in range(0x2030) if INNER_BREAKS.match(chr(c))))
_ASCII_BAD = "".join(ch for ch in _NUL_OR_BREAK if ord(ch) < 0x80).encode()
_WIDE_BAD = tuple(ch for ch in _NUL_OR_BREAK if ord(ch) >= 0x80)
_BLANK_LINE = re.compile(r"(?m)^\s*$")
_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)


@dataclass
class BlockResult:
    """What a worker found in one block: ``sides`` None when the output is the input bytes,
    else the output bytes per file; ``lines`` the pairs out; ``stats`` the rules that fired."""

    sides: tuple[bytes, ...] | None
    lines: int
    stats: dict[str, int]


def ingest(
    paths: Sequence[Path],
    out: Sequence[Path],
    policy: InputPolicy,
    stats: Stats,
    executor: Any,
    progress: Any = None,
    block_lines: int = BLOCK_LINES,
) -> int:
    """Reads the line-aligned files ``paths`` through ``policy`` into ``out`` (one file each)
    and returns the number of pairs written; counts in ``stats`` what the policy handled."""
    compressed = any(p.name.endswith(_COMPRESSED) for p in paths)
    pending: deque[RawBlock] = deque()  # blocks submitted, in order, until their result is in

    def tasks() -> Iterator[tuple[RawBlock, InputPolicy]]:
        for raw in BlockReader(paths, block_lines, decompress=compressed):
            pending.append(raw)
            yield raw, policy

    small = sum(p.stat().st_size for p in paths) < IN_PROCESS_BYTES
    results = map(check_block, tasks()) if small else executor.map(check_block, tasks())
    written = 0
    writers: list[Any] | None = None
    offsets = [0] * len(paths)  # input bytes before the current block, per file
    try:
        for result in results:
            raw = pending.popleft()
            stats.merge(result.stats)
            if writers is None and (result.sides is not None or compressed):
                writers = [open(path, "wb") for path in out]  # noqa: SIM115 (closed below)
                for source, handle, offset in zip(paths, writers, offsets, strict=True):
                    copy_prefix(source, handle, offset)
            if writers is not None:
                sides = result.sides if result.sides is not None else raw.raws
                for handle, data in zip(writers, sides, strict=True):
                    handle.write(data)
            offsets = [o + len(r) for o, r in zip(offsets, raw.raws, strict=True)]
            written += result.lines
            if progress is not None:
                progress.update(result.lines)
    finally:
        for handle in writers or ():
            handle.close()
    if writers is None:  # every block unchanged: the outputs are the inputs
        for source, target in zip(paths, out, strict=True):
            if _ends_with_newline(source):
                same_file(source, target)
            else:  # the last line gets its newline
                with open(target, "wb") as handle:
                    copy_prefix(source, handle, source.stat().st_size)
                    handle.write(b"\n")
    return written


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        if not handle.seek(0, os.SEEK_END):
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def copy_prefix(source: Path, handle: Any, size: int) -> None:
    """The first ``size`` bytes of ``source`` appended to ``handle`` (an unchanged prefix,
    written once a later block turns out to change)."""
    if not size:
        return
    handle.flush()
    with open(source, "rb") as src:
        left = size
        while left:
            sent = os.sendfile(handle.fileno(), src.fileno(), None, left)
            if not sent:
                raise DataError(f"{source}: changed while it was read (shorter than {size} bytes)")
            left -= sent


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


# --- the worker side --------------------------------------------------------------------------


def check_block(task: tuple[RawBlock, InputPolicy]) -> BlockResult:
    """One block through the policy: the fast checks, else line by line."""
    raw, policy = task
    stats = Stats()
    sides = []
    changed = False
    for data in raw.raws:
        fast = _fast_side(data, raw.first_line, policy, stats)
        if fast is None:
            return _line_by_line(raw, policy)
        changed = changed or fast is not data
        sides.append(fast)
    if policy.empty != "keep" and _any_empty(sides):
        return _line_by_line(raw, policy)
    return BlockResult(tuple(sides) if changed else None, raw.count, stats.as_dict())


def _fast_side(data: bytes, first_line: int, policy: InputPolicy, stats: Stats) -> bytes | None:
    """The side's output bytes if no rule but CR LF stripping fires (counted in ``stats``),
    else None (read the block line by line)."""
    if first_line == 1 and data.startswith(_BOM):
        return None
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    if len(newlines) and int(np.diff(newlines, prepend=-1).max()) - 1 > policy.max_line_bytes:
        return None
    if len(data.translate(None, _ASCII_BAD)) != len(data):  # NUL, \r and other breaks
        crlf = data.count(b"\r\n")
        if policy.crlf != "strip" or not crlf or data.count(b"\r") != crlf:
            return None
        if len(data.translate(None, _ASCII_BAD.replace(b"\r", b""))) != len(data):
            return None
        data = data.replace(b"\r\n", b"\n")
        stats.add("input.crlf_stripped", crlf)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text.isascii() and any(ch in text for ch in _WIDE_BAD):
        return None
    return data


def _any_empty(sides: Sequence[bytes]) -> bool:
    """Whether some line of some side is empty or all spaces (``\\s`` is what ``str.strip``
    strips; a match that runs over newlines covers only blank lines)."""
    return any(_BLANK_LINE.search(data.decode("utf-8")[:-1]) for data in sides)


def _line_by_line(raw: RawBlock, policy: InputPolicy) -> BlockResult:
    """The serial reader's rules on every line of the block, both files in step."""
    stats = Stats()
    split = [data.split(b"\n") for data in raw.raws]
    out: list[list[bytes]] = [[] for _ in raw.raws]
    limit = policy.max_line_bytes
    for row in range(raw.count):
        number = raw.first_line + row
        texts = []
        for side, lines in enumerate(split):
            line = lines[row]
            if len(line) > limit:
                texts.append(too_long(raw.paths[side], number, policy, stats))
            else:
                texts.append(decode_line(line, raw.paths[side], number, policy, stats))
        if any(t is None for t in texts):
            stats.add("input.pairs_dropped")
            continue
        pair = tuple(t for t in texts if t is not None)
        if empty_pair(pair, raw.paths[0], number, policy, stats):
            continue
        for side, text in enumerate(pair):
            out[side].append(text.encode("utf-8"))
    sides = tuple(b"".join(line + b"\n" for line in lines) for lines in out)
    return BlockResult(sides, len(out[0]), stats.as_dict())
