"""Reading line-aligned corpus files through the input policy, sharded over the executor.

The driver cuts the files into blocks of lines, aligned across the files, by counting newlines
(plain files: byte ranges that workers read themselves; ``.gz``/``.xz``: the decompressed bytes,
sent). A worker checks its block against the policy in one compiled pass (:func:`_scan`:
UTF-8 well-formedness, NUL and line-break characters, lone CRs, CR LF ends, the longest line).
A block where no rule fires comes back as "unchanged"; one where a rule may fire is read line
by line with the very functions the serial reader uses (:func:`mtcore.data.corpus.decode_line`,
:func:`mtcore.data.corpus.empty_pair`), so both give the same pairs, the same counts and the same
errors naming file and line.

When no block of uncompressed input changed, the output files are the input files: a
copy-on-write clone where the file system has one, else a hard link (the runner re-runs a step
whose linked output changed since, see :func:`mtcore.recipe.hashing.linked_files`), else a
kernel-side
copy. Once a block changes, unchanged bytes are copied by the kernel (``sendfile``).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np

from mtcore.contracts.errors import DataError
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import (
    InputPolicy,
    decode_line,
    empty_pair,
    too_long,
)
from mtcore.exec.files import copy_range, same_file
from mtcore.text.block import BlockReader
from mtcore.text.chars import BOM

BLOCK_LINES = 50_000
"""Lines per block: about 10 MB of news-length text, a few MB of short segments."""
IN_PROCESS_BYTES = 32 << 20
BLOCK_BYTES = 64 << 20
"""Bytes of one file a block of decompressed input holds at most (fewer lines where they are
long: a small ``.gz`` can expand to long lines by the thousand)."""
"""Below this total size the blocks are checked in the driver: starting workers costs more."""
_COMPRESSED = (".gz", ".xz")
_BOM = BOM.encode()
SCANNED_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""The line-break characters :func:`_scan` finds: every one mtcore.text.chars.INNER_BREAKS matches
(tested)."""
_BLANK_LINE = re.compile(r"(?m)^\s*$")
_CUT_CHUNK = 1 << 22


@dataclass
class Block:
    """A task: lines ``first_line`` to ``first_line + count - 1`` of each file, as the byte
    range ``ranges[i]`` of ``paths[i]`` (read by the worker) or as ``data`` (sent to it:
    decompressed input, or workers that do not see the driver's files)."""

    paths: tuple[str, ...]
    first_line: int
    count: int
    ranges: tuple[tuple[int, int], ...] = ()
    data: tuple[bytes, ...] = ()

    def load(self) -> tuple[bytes, ...]:
        if self.data:
            return self.data
        out = []
        for path, (start, end) in zip(self.paths, self.ranges, strict=True):
            with open(path, "rb") as handle:
                handle.seek(start)
                out.append(handle.read(end - start))
        return tuple(out)


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
    block_bytes: int = BLOCK_BYTES,
) -> int:
    """Reads the line-aligned files ``paths`` through ``policy`` into ``out`` (one file each)
    and returns the number of pairs written; counts in ``stats`` what the policy handled."""
    compressed = any(p.name.endswith(_COMPRESSED) for p in paths)
    small = sum(p.stat().st_size for p in paths) < IN_PROCESS_BYTES
    send_bytes = not small and not getattr(executor, "shares_files", True)
    blocks = (
        _decompressed(paths, block_lines, policy.max_line_bytes, block_bytes)
        if compressed
        else _cut(
            paths, block_lines, max(block_bytes, policy.max_line_bytes + 1), policy.max_line_bytes
        )
    )
    pending: deque[Block] = deque()  # blocks submitted, in order, until their result is in

    def tasks() -> Iterator[tuple[Block, InputPolicy]]:
        for block in blocks:
            if send_bytes and not block.data:
                block = Block(block.paths, block.first_line, block.count, (), block.load())
            pending.append(block)
            yield block, policy

    results = map(check_block, tasks()) if small else executor.map(check_block, tasks())
    written = 0
    writers: list[Any] | None = None
    offsets = [0] * len(paths)  # input bytes before the current block, per file
    try:
        for result in results:
            block = pending.popleft()
            stats.merge(result.stats)
            if writers is None and (result.sides is not None or compressed):
                for path in out:  # a link left by an earlier attempt: "wb" would truncate
                    path.unlink(missing_ok=True)  # the user's own input through it
                writers = [open(path, "xb") for path in out]  # noqa: SIM115 (closed below)
                for source, handle, offset in zip(paths, writers, offsets, strict=True):
                    copy_range(source, handle, 0, offset)
            if writers is not None:
                if result.sides is not None:
                    for handle, data in zip(writers, result.sides, strict=True):
                        handle.write(data)
                elif block.data:
                    for handle, data in zip(writers, block.data, strict=True):
                        handle.write(data)
                else:
                    for source, handle, (start, end) in zip(
                        paths, writers, block.ranges, strict=True
                    ):
                        copy_range(source, handle, start, end)
            if block.ranges:
                offsets = [end for _, end in block.ranges]
            written += result.lines
            if progress is not None:
                progress.update(result.lines)
    finally:
        for handle in writers or ():
            handle.close()
    if writers is None:  # every block unchanged: the outputs are the inputs
        for source, target in zip(paths, out, strict=True):
            same_file(source, target)
    return written


def _decompressed(
    paths: Sequence[Path], lines: int, max_line_bytes: int, block_bytes: int
) -> Iterator[Block]:
    """Blocks of ``.gz``/``.xz`` (or mixed) input, decompressed by the driver; no line longer
    than the policy's limit is held whole, no block past ``block_bytes`` a file
    (:class:`BlockReader`)."""
    reader = BlockReader(paths, lines, True, max_line_bytes, block_bytes)
    for raw in reader:
        yield Block(raw.paths, raw.first_line, raw.count, (), raw.raws)


def _cut(paths: Sequence[Path], lines: int, cap: int, max_line: int) -> Iterator[Block]:
    """Byte ranges of ``lines`` lines of each plain file, aligned across the files, and at most
    ``cap`` bytes of each: the driver only counts newlines (``bytearray.count``, at memory
    speed) and locates one in each file per block. A line longer than ``cap`` is sent alone,
    cut to its first ``max_line + 1`` bytes (the input policy then names or drops it), so no
    block costs more than ``cap`` bytes a file (issue 70: a plain one-line file cost 2.8x its
    size before "line longer than"). Unequal line counts are an error naming the shorter
    file."""
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open(p, "rb")) for p in paths]
        sizes = [os.fstat(h.fileno()).st_size for h in handles]
        finals = [_ends_with_newline(p) for p in paths]
        buffer = bytearray(_CUT_CHUNK)
        pos = [0] * len(paths)
        first = 1
        while True:
            spans = [
                _advance(h, buffer, pos[s], lines, sizes[s], finals[s], cap)
                for s, h in enumerate(handles)
            ]
            ends, counts = [e for e, _ in spans], [c for _, c in spans]
            most = max(counts)
            short = next(
                (i for i, c in enumerate(counts) if c < most and ends[i] >= sizes[i]), None
            )
            if short is not None:
                _unequal(paths, short, counts.index(most), first - 1 + counts[short])
            fewest = min(counts)
            if not fewest:  # the end of every file, or a line longer than the cap
                at_end = [i for i, e in enumerate(ends) if not counts[i] and e >= sizes[i]]
                if len(at_end) == len(paths):
                    return
                if at_end:
                    other = next(i for i in range(len(paths)) if i not in at_end)
                    _unequal(paths, at_end[0], other, first - 1)
                raws, pos = _long_line(handles, buffer, pos, sizes, max_line)
                yield Block(tuple(str(p) for p in paths), first, 1, (), raws)
                first += 1
                continue
            if fewest < most:  # a file's cap came first: every file to that many lines
                ends = [
                    _advance(h, buffer, pos[s], fewest, sizes[s], finals[s], cap)[0]
                    for s, h in enumerate(handles)
                ]
            yield Block(
                tuple(str(p) for p in paths), first, fewest, tuple(zip(pos, ends, strict=True))
            )
            first += fewest
            pos = ends


def _long_line(
    handles: Sequence[Any], buffer: bytearray, pos: list[int], sizes: list[int], max_line: int
) -> tuple[tuple[bytes, ...], list[int]]:
    """The next line of each file, at most its first ``max_line + 1`` bytes (with a newline),
    and where each file's following line starts."""
    raws, after = [], []
    for handle, start, size in zip(handles, pos, sizes, strict=True):
        handle.seek(start)
        head = handle.read(max_line + 1)
        cut = head.find(b"\n")
        if cut >= 0:
            raws.append(head[: cut + 1])
            after.append(start + cut + 1)
            continue
        raws.append(head + b"\n")
        end = start + len(head)
        while end < size:
            handle.seek(end)
            length = handle.readinto(buffer)
            found = buffer.find(b"\n", 0, length)
            if found >= 0:
                end += found + 1
                break
            end += length
        after.append(min(end, size))
    return tuple(raws), after


def _unequal(paths: Sequence[Path], short: int, longer: int, have: int) -> None:
    raise DataError(
        f"{paths[short]} has {have} lines but {paths[longer]} has more (line {have + 1} has "
        "no partner): the files of a parallel corpus must have equal line counts"
    )


def _advance(
    handle: Any,
    buffer: bytearray,
    start: int,
    lines: int,
    size: int,
    final_newline: bool,
    cap: int,
) -> tuple[int, int]:
    """From byte ``start``, the offset after ``lines`` more lines, the end of the file, or the
    last whole line within ``cap`` bytes, whichever comes first, and how many lines that is
    (0 before the end of the file: the first line is longer than ``cap``); a last line
    without a newline counts."""
    pos, found, last_end = start, 0, start
    view = memoryview(buffer)
    while found < lines and pos < size:
        handle.seek(pos)
        length = handle.readinto(buffer)
        if not length:
            break
        count = buffer.count(b"\n", 0, length)
        if found + count < lines and pos + length <= start + cap:
            if count:
                last_end = pos + buffer.rfind(b"\n", 0, length) + 1
            found += count
            pos += length
            continue
        newlines = np.flatnonzero(np.frombuffer(view[:length], dtype=np.uint8) == 10)
        room = int(np.searchsorted(newlines, start + cap - pos, side="left"))
        take = min(lines - found, room)
        if take:
            return pos + int(newlines[take - 1]) + 1, found + take
        return last_end, found
    if found < lines and size > last_end and not final_newline and pos >= size:
        if size - start <= cap:
            return size, found + 1
        return last_end, found
    return min(pos, size), found


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        if not handle.seek(0, os.SEEK_END):
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


# --- the worker side --------------------------------------------------------------------------


def check_block(task: tuple[Block, InputPolicy]) -> BlockResult:
    """One block through the policy: the fast checks, else line by line."""
    block, policy = task
    raws = list(block.load())
    # the file's last line without a newline (the last block only): the output adds one
    changed = False
    for side, data in enumerate(raws):
        if data and not data.endswith(b"\n"):
            raws[side] = data + b"\n"
            changed = True
    stats = Stats()
    sides = []
    for data in raws:
        fast = _fast_side(data, block.first_line, policy, stats)
        if fast is None:
            return _line_by_line(raws, block, policy)
        changed = changed or fast is not data
        sides.append(fast)
    if policy.empty != "keep" and _any_empty(sides):
        return _line_by_line(raws, block, policy)
    return BlockResult(tuple(sides) if changed else None, block.count, stats.as_dict())


def _fast_side(data: bytes, first_line: int, policy: InputPolicy, stats: Stats) -> bytes | None:
    """The side's output bytes if no rule but CR LF stripping fires (counted in ``stats``),
    else None (read the block line by line)."""
    if first_line == 1 and data.startswith(_BOM):
        return None
    invalid, bad, crlf, longest = _scan(np.frombuffer(data, dtype=np.uint8))
    if invalid or bad or longest > policy.max_line_bytes:
        return None
    if crlf:
        if policy.crlf != "strip":
            return None
        data = data.replace(b"\r\n", b"\n")
        stats.add("input.crlf_stripped", crlf)
    return data


@numba.njit(cache=True, nogil=True)
def _scan(buf: np.ndarray) -> tuple[bool, bool, int, int]:  # pragma: no cover (compiled)
    """One pass over newline-terminated bytes: whether they are not well-formed UTF-8 (as
    Python's strict decoder sees it: no overlong forms, surrogates or code points past
    U+10FFFF), whether they hold a NUL, a line-break character other than LF (VT, FF,
    U+001C..U+001E, U+0085, U+2028, U+2029) or a CR not before a LF, how many CR LF they
    hold, and the longest line's length in bytes without its LF."""
    n = len(buf)
    bad = False
    crlf = 0
    longest = 0
    line_start = 0
    i = 0
    while i < n:
        b = buf[i]
        if b < 0x80:
            if b == 10:
                if i - line_start > longest:
                    longest = i - line_start
                line_start = i + 1
            elif b == 13:
                if i + 1 < n and buf[i + 1] == 10:
                    crlf += 1
                else:
                    bad = True
            elif b == 0 or b == 11 or b == 12 or 28 <= b <= 30:
                bad = True
            i += 1
        elif 0xC2 <= b <= 0xDF:
            if i + 1 >= n or not 0x80 <= buf[i + 1] <= 0xBF:
                return True, bad, crlf, longest
            if b == 0xC2 and buf[i + 1] == 0x85:
                bad = True
            i += 2
        elif 0xE0 <= b <= 0xEF:
            if i + 2 >= n:
                return True, bad, crlf, longest
            low = 0xA0 if b == 0xE0 else 0x80
            high = 0x9F if b == 0xED else 0xBF
            c1 = buf[i + 1]
            if not low <= c1 <= high or not 0x80 <= buf[i + 2] <= 0xBF:
                return True, bad, crlf, longest
            if b == 0xE2 and c1 == 0x80 and (buf[i + 2] == 0xA8 or buf[i + 2] == 0xA9):
                bad = True
            i += 3
        elif 0xF0 <= b <= 0xF4:
            if i + 3 >= n:
                return True, bad, crlf, longest
            low = 0x90 if b == 0xF0 else 0x80
            high = 0x8F if b == 0xF4 else 0xBF
            if (
                not low <= buf[i + 1] <= high
                or not 0x80 <= buf[i + 2] <= 0xBF
                or not 0x80 <= buf[i + 3] <= 0xBF
            ):
                return True, bad, crlf, longest
            i += 4
        else:
            return True, bad, crlf, longest
    return False, bad, crlf, longest


def _any_empty(sides: Sequence[bytes]) -> bool:
    """Whether some line of some side is empty or all spaces (``\\s`` is what ``str.strip``
    strips; a match that runs over newlines covers only blank lines)."""
    return any(_BLANK_LINE.search(data.decode("utf-8")[:-1]) for data in sides)


def _line_by_line(raws: Sequence[bytes], block: Block, policy: InputPolicy) -> BlockResult:
    """The serial reader's rules on every line of the block, both files in step."""
    stats = Stats()
    split = [data.split(b"\n") for data in raws]
    out: list[list[bytes]] = [[] for _ in raws]
    limit = policy.max_line_bytes
    for row in range(block.count):
        number = block.first_line + row
        texts = []
        for side, lines in enumerate(split):
            line = lines[row]
            if len(line) > limit:
                texts.append(too_long(block.paths[side], number, policy, stats))
            else:
                texts.append(decode_line(line, block.paths[side], number, policy, stats))
        if any(t is None for t in texts):
            stats.add("input.pairs_dropped")
            continue
        pair = tuple(t for t in texts if t is not None)
        if empty_pair(pair, block.paths[0], number, policy, stats):
            continue
        for side, text in enumerate(pair):
            out[side].append(text.encode("utf-8"))
    sides = tuple(b"".join(line + b"\n" for line in lines) for lines in out)
    return BlockResult(sides, len(out[0]), stats.as_dict())
