"""A shard of a corpus in columnar form, the unit the cleaning engine hands to filters.

A :class:`TextBlock` holds one :class:`TextColumn` per language. A column keeps its lines as
one UTF-8 buffer (``\\n`` after every line) and derives, on first use and once, what array code
needs: the decoded text, its code points as ``uint32`` with line bounds, a whitespace mask, word
bounds. Filters written against these arrays score a shard with a few NumPy passes instead of a
Python loop per pair; filters that are not get ``block.pairs()`` (the engine's fallback).

Blocks are read by :class:`BlockReader` straight from the corpus files: the driver only cuts
bytes at newlines, workers decode and check them (strictly: a corpus inside a workdir was
already checked by the step that wrote it, so anything odd here is an error naming file and
line). A column read so comes from :meth:`TextColumn.decoded`: the checks, the code points,
line bounds and word statistics in one compiled pass (:mod:`mtcore.text.kernels`), the text
decoded only if something asks for it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from mtcore.contracts.errors import DataError
from mtcore.contracts.plugin import Pair
from mtcore.exec.streams import CORRUPT, open_compressed
from mtcore.text.chars import BOM
from mtcore.text.kernels import (
    BAD_CHARS,
    NO_CLASSES,
    SPACE_LUT,
    CharClasses,
    count_codes,
    decode_column,
    word_stats,
)


def lines_of_codes(codes: np.ndarray) -> list[str]:
    """The lines of code points laid out as a column's (each line ended by ``\\n``)."""
    return codes.astype("<u4", copy=False).tobytes().decode("utf-32-le").split("\n")[:-1]


def line_of_offsets(offsets: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The line index of each position, given the start offsets of the lines."""
    return np.searchsorted(offsets, positions, side="right") - 1


def segment_sums(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per-line sums of ``values`` over ``[start, end)`` (empty lines give 0)."""
    total = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=total[1:])
    return total[ends] - total[starts]


class TextColumn:
    """The lines of one side of a block. ``raw`` is UTF-8 with ``\\n`` ending every line."""

    def __init__(self, raw: bytes, count: int, text: str | None = None) -> None:
        self.raw = raw
        self.count = count
        self.fused: dict[str, np.ndarray] = {}  # per-line counts of character sets, if decoded
        if text is not None:
            self.__dict__["text"] = text

    @classmethod
    def decoded(
        cls,
        raw: bytes,
        count: int,
        path: str,
        first_line: int,
        classes: CharClasses = NO_CLASSES,
    ) -> TextColumn:
        """The column of ``count`` lines of a corpus file, checked (invalid UTF-8, NUL,
        line-break characters, a BOM are errors naming file and line) and decoded to code
        points in one compiled pass, which also counts the characters of ``classes`` per line
        (read by :meth:`count_chars`); its text is decoded only if a filter asks for it."""
        arrays = decode_column(raw, count, classes)
        if arrays is None or (first_line == 1 and len(arrays[0]) and arrays[0][0] == 0xFEFF):
            # what is wrong and where: Python's own decoder says it (and raises)
            return cls(raw, count, _checked_text(raw, path, first_line))
        column = cls(raw, count)
        codes, ends, byte_ends, words, longest, counts = arrays
        column.__dict__.update(codes=codes, ends=ends, byte_ends=byte_ends)
        column.__dict__["_word_stats"] = (words, longest)
        column.fused = {chars: counts[:, bit] for bit, chars in enumerate(classes.names)}
        return column

    @classmethod
    def from_lines(cls, lines: Sequence[str]) -> TextColumn:
        text = "".join(line + "\n" for line in lines)
        return cls(text.encode("utf-8"), len(lines), text)

    @cached_property
    def text(self) -> str:
        return self.raw.decode("utf-8")

    @cached_property
    def byte_ends(self) -> np.ndarray:
        """Offset in ``raw`` of each line's ``\\n``."""
        return np.flatnonzero(np.frombuffer(self.raw, dtype=np.uint8) == 10)

    def line(self, row: int) -> str:
        """Line ``row`` (decodes that line alone when the column's text is not decoded)."""
        if "text" in self.__dict__:
            return self.text[self.starts[row] : self.ends[row]]
        start = int(self.byte_ends[row - 1]) + 1 if row else 0
        return self.raw[start : int(self.byte_ends[row])].decode("utf-8")

    @cached_property
    def lines(self) -> list[str]:
        return self.text.split("\n")[:-1] if self.count else []

    @cached_property
    def codes(self) -> np.ndarray:
        """Code points of ``text`` (the ``\\n`` separators included)."""
        order = "<" if sys.byteorder == "little" else ">"
        return np.frombuffer(self.text.encode("utf-32-le"), dtype=f"{order}u4")

    @cached_property
    def ends(self) -> np.ndarray:
        """Index in ``codes`` of each line's ``\\n``."""
        ends = np.flatnonzero(self.codes == 10)
        if len(ends) != self.count:  # the reader guarantees this; a bug if not
            raise DataError(f"block column has {len(ends)} line ends, expected {self.count}")
        return ends

    @cached_property
    def starts(self) -> np.ndarray:
        starts = np.empty(self.count, dtype=np.int64)
        if self.count:
            starts[0] = 0
            starts[1:] = self.ends[:-1] + 1
        return starts

    @cached_property
    def char_len(self) -> np.ndarray:
        """Characters per line (``len(line)``)."""
        return (self.ends - self.starts).astype(np.int64)

    @cached_property
    def is_space(self) -> np.ndarray:
        """``str.isspace()`` of every code point (the separators are spaces)."""
        return SPACE_LUT[np.minimum(self.codes, len(SPACE_LUT) - 1)]

    @cached_property
    def _word_stats(self) -> tuple[np.ndarray, np.ndarray]:
        return word_stats(self.codes, self.starts, self.ends, SPACE_LUT)

    @cached_property
    def word_count(self) -> np.ndarray:
        """``len(line.split())`` per line."""
        return self._word_stats[0]

    @cached_property
    def longest_word(self) -> np.ndarray:
        """``max(len(w) for w in line.split())`` per line, 0 for a line without words."""
        return self._word_stats[1]

    def count_codes(self, table: np.ndarray) -> np.ndarray:
        """Per-line count of the code points ``c`` with ``table[c]`` true (a boolean table as
        :func:`code_table` makes; code points past its end count as false)."""
        return count_codes(self.codes, self.starts, self.ends, table)

    def count_chars(self, chars: str) -> np.ndarray:
        """Per-line count of the characters of ``chars``: from the decoding pass when a filter
        of the chain declared ``chars`` in ``char_classes``, else counted now."""
        fused = self.fused.get(chars)
        if fused is not None:
            return fused.astype(np.int64)
        return self.count_codes(_chars_table(chars))

    def count_in(self, mask: np.ndarray) -> np.ndarray:
        """Per-line count of code points where ``mask`` (aligned with ``codes``) is true."""
        return segment_sums(mask, self.starts, self.ends)

    def lines_with(self, pattern: re.Pattern[str] | re.Pattern[bytes]) -> np.ndarray:
        """Sorted indices of the lines where the compiled regex ``pattern`` matches (patterns
        must not match ``\\n``, so that a match never spans two lines). A bytes pattern
        searches the UTF-8 bytes, and the text need not be decoded."""
        if isinstance(pattern.pattern, bytes):
            hits = [m.start() for m in pattern.finditer(self.raw)]  # type: ignore[arg-type]
            at = np.asarray(hits, dtype=np.int64)
            return np.unique(np.searchsorted(self.byte_ends, at)) if hits else at
        hits = [m.start() for m in pattern.finditer(self.text)]  # type: ignore[arg-type]
        if not hits:
            return np.zeros(0, dtype=np.int64)
        return np.unique(line_of_offsets(self.starts, np.asarray(hits, dtype=np.int64)))

    def take(self, rows: np.ndarray) -> TextColumn:
        lines = self.lines
        return TextColumn.from_lines([lines[i] for i in rows])


class TextBlock:
    """A shard: one column per language, ``len(block)`` pairs. ``first_line`` is the 1-based
    line number of the first pair in the corpus files (for error messages)."""

    def __init__(
        self, columns: Sequence[TextColumn], langs: Sequence[str], first_line: int = 1
    ) -> None:
        if len(columns) != len(langs):
            raise ValueError("one column per language")
        counts = {c.count for c in columns}
        if len(counts) > 1:
            raise DataError(f"block columns differ in length: {sorted(counts)}")
        self.columns = tuple(columns)
        self.langs = tuple(langs)
        self.first_line = first_line

    @classmethod
    def from_pairs(
        cls, pairs: Sequence[Pair], langs: Sequence[str], first_line: int = 1
    ) -> TextBlock:
        sides = list(zip(*pairs, strict=True)) if pairs else [() for _ in langs]
        return cls([TextColumn.from_lines(side) for side in sides], langs, first_line)

    def __len__(self) -> int:
        return self.columns[0].count if self.columns else 0

    def pairs(self) -> list[Pair]:
        return list(zip(*(c.lines for c in self.columns), strict=True))

    def take(self, rows: np.ndarray) -> TextBlock:
        """The pairs at ``rows`` (in that order) as a new block."""
        return TextBlock([c.take(rows) for c in self.columns], self.langs, self.first_line)


@functools.lru_cache(maxsize=64)
def _chars_table(chars: str) -> np.ndarray:
    return code_table(chars)


def code_table(chars: str) -> np.ndarray:
    """A boolean table over code points, true for the characters of ``chars``."""
    points = [ord(c) for c in chars]
    table = np.zeros(max(points, default=0) + 1, dtype=np.bool_)
    table[points] = True
    return table


# --- reading blocks from corpus files -------------------------------------------------------


class RawBlock:
    """Bytes of ``count`` lines of each file, cut at newlines by the driver; ``ends`` holds the
    offset of each line's ``\\n`` per side, for writing kept lines without decoding."""

    __slots__ = ("count", "ends", "first_line", "paths", "raws")

    def __init__(
        self,
        raws: tuple[bytes, ...],
        ends: tuple[np.ndarray, ...],
        first_line: int,
        paths: tuple[str, ...],
    ) -> None:
        self.raws = raws
        self.ends = ends
        self.count = len(ends[0]) if ends else 0
        self.first_line = first_line
        self.paths = paths

    def __getstate__(self) -> tuple[object, ...]:  # workers need no line ends: send less
        return (self.raws, self.count, self.first_line, self.paths)

    def __setstate__(self, state: tuple[object, ...]) -> None:
        raws, count, first_line, paths = state
        self.raws = raws  # type: ignore[assignment]
        self.count = count  # type: ignore[assignment]
        self.first_line = first_line  # type: ignore[assignment]
        self.paths = paths  # type: ignore[assignment]
        self.ends = ()

    def decode(self, langs: Sequence[str], classes: CharClasses = NO_CLASSES) -> TextBlock:
        """Decode and check every side (invalid UTF-8, NUL, line-break characters, BOM are
        errors naming file and line), counting the characters of ``classes`` per line; runs in
        the worker."""
        columns = [
            TextColumn.decoded(raw, self.count, path, self.first_line, classes)
            for raw, path in zip(self.raws, self.paths, strict=True)
        ]
        return TextBlock(columns, langs, self.first_line)

    def kept_bytes(self, side: int, keep: np.ndarray) -> bytes:
        """The lines of ``side`` where ``keep`` is true, as bytes ready to append to a file."""
        if keep.all():
            return self.raws[side]
        if not keep.any():
            return b""
        ends = self.ends[side]
        lengths = np.diff(ends, prepend=-1)  # bytes per line, newline included
        mask = np.repeat(keep, lengths)
        return np.frombuffer(self.raws[side], dtype=np.uint8)[mask].tobytes()

    def pair(self, row: int) -> str:
        """Line ``row`` of every side, joined by tabs (a rejected pair as a step shows it)."""
        sides = []
        for side, ends in enumerate(self.ends):
            start = int(ends[row - 1]) + 1 if row else 0
            sides.append(self.raws[side][start : int(ends[row])].decode("utf-8", "replace"))
        return "\t".join(sides)


_NL = b"\n"


def _checked_text(raw: bytes, path: str, first_line: int) -> str:
    def where(byte_offset: int) -> str:
        return f"{path}:{first_line + raw.count(_NL, 0, byte_offset)}"

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        column = exc.start - raw.rfind(_NL, 0, exc.start) - 1
        raise DataError(
            f"{where(exc.start)}: invalid UTF-8 at byte {column} of the line "
            f"({raw[exc.start : exc.start + 4]!r}); a corpus inside the workdir must be UTF-8"
        ) from None
    if any(ch in text for ch in BAD_CHARS):
        at, ch = min((text.find(ch), ch) for ch in BAD_CHARS if ch in text)
        what = "NUL byte" if ch == "\x00" else f"line-break character {ch!r}"
        raise DataError(f"{where(len(text[:at].encode()))}: {what} inside a corpus line")
    if first_line == 1 and text.startswith(BOM):
        raise DataError(f"{path}:1: byte-order mark in a corpus inside the workdir")
    return text


class BlockReader:
    """Cuts line-aligned files into :class:`RawBlock` s of ``lines`` pairs, reading large
    chunks and finding newlines with NumPy. Unequal line counts are an error naming the
    shorter file, as in :func:`mtcore.data.corpus.read_parallel`."""

    CHUNK = 1 << 22

    def __init__(
        self,
        paths: Sequence[Path],
        lines: int,
        decompress: bool = False,
        max_line_bytes: int | None = None,
        max_block_bytes: int | None = None,
    ) -> None:
        """``decompress``: read ``.gz``/``.xz`` files (by name) as their text.
        ``max_line_bytes``: a longer line is kept only to its first ``max_line_bytes + 1``
        bytes, the rest skipped as it is read (still too long for the input policy, which
        then drops it or names it): one line of a compressed file (128 MB from a 586 KB
        ``.gz``) never has to fit in memory. ``max_block_bytes``: a block holds fewer than
        ``lines`` lines where they would pass this many bytes in a file (only for readers
        whose blocks' boundaries do not matter to their output: ingest's)."""
        self.paths = [Path(p) for p in paths]
        self.lines = lines
        self.decompress = decompress
        self.max_line_bytes = max_line_bytes
        self.max_block_bytes = max_block_bytes

    def __iter__(self) -> Iterator[RawBlock]:
        with contextlib.ExitStack() as stack:
            if self.decompress:
                handles = [stack.enter_context(open_compressed(p)) for p in self.paths]
            else:
                handles = [stack.enter_context(open(p, "rb")) for p in self.paths]
            yield from self._blocks(handles)

    def _blocks(self, handles: list[Any]) -> Iterator[RawBlock]:
        buffers = [
            _LineBuffer(h, p, self.max_line_bytes) for h, p in zip(handles, self.paths, strict=True)
        ]
        first = 1
        while True:
            want = self.lines
            if self.max_block_bytes is not None:  # the fewest lines any file holds in budget
                want = max(1, min(b.fill(self.lines, self.max_block_bytes) for b in buffers))
            parts = [b.take(want) for b in buffers]
            counts = [len(ends) for _, ends in parts]
            if max(counts) == 0:
                return
            if min(counts) != max(counts):
                short = self.paths[counts.index(min(counts))]
                long_ = self.paths[counts.index(max(counts))]
                have = first - 1 + min(counts)
                raise DataError(
                    f"{short} has {have} lines but {long_} has more (line {have + 1} has no "
                    "partner): the files of a parallel corpus must have equal line counts"
                )
            yield RawBlock(
                tuple(raw for raw, _ in parts),
                tuple(ends for _, ends in parts),
                first,
                tuple(str(p) for p in self.paths),
            )
            first += counts[0]


class _LineBuffer:
    def __init__(self, handle: object, path: Path, limit: int | None = None) -> None:
        self.handle = handle
        self.path = path
        self.limit = limit  # bytes kept of one line (then + 1 to mark it too long)
        self.lines = 0  # lines taken so far, for errors
        self.buffer = bytearray()  # appends in amortised constant time (bytes: quadratic)
        self.newlines: np.ndarray = np.zeros(0, dtype=np.int64)  # offsets of \n in buffer
        self.eof = False
        self.skipping = False  # inside a line past the limit: bytes dropped until its \n

    def _fill(self) -> None:
        try:
            chunk = self.handle.read(BlockReader.CHUNK)  # type: ignore[attr-defined]
        except CORRUPT as exc:
            reached = self.lines + len(self.newlines)
            raise DataError(
                f"{self.path}:{reached + 1}: cannot be read after line {reached}, the file is "
                f"truncated or corrupt ({type(exc).__name__}: {exc}); delete it and fetch it again"
            ) from exc
        if not chunk:
            self.eof = True
            if self.buffer and not self.buffer.endswith(b"\n"):  # last line without newline
                self.buffer += b"\n"
                self.newlines = np.append(self.newlines, len(self.buffer) - 1)
            return
        if self.skipping:
            end = chunk.find(b"\n")
            if end < 0:
                return
            chunk, self.skipping = chunk[end:], False  # from the \n ending the long line
        found = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10) + len(self.buffer)
        self.buffer += chunk
        self.newlines = np.concatenate([self.newlines, found])
        if self.limit is not None:
            tail = int(self.newlines[-1]) + 1 if len(self.newlines) else 0
            if len(self.buffer) - tail > self.limit + 1:  # the open last line is too long
                del self.buffer[tail + self.limit + 1 :]
                self.skipping = True

    def fill(self, lines: int, budget: int) -> int:
        """Reads until ``lines`` whole lines are buffered, the file ends, or the buffer holds
        ``budget`` bytes; returns the whole lines buffered, at most ``lines``."""
        while len(self.newlines) < lines and not self.eof and len(self.buffer) < budget:
            self._fill()
        return min(lines, len(self.newlines))

    def take(self, lines: int) -> tuple[bytes, np.ndarray]:
        while len(self.newlines) < lines and not self.eof:
            self._fill()
        count = min(lines, len(self.newlines))
        if count == 0:
            return b"", np.zeros(0, dtype=np.int64)
        cut = int(self.newlines[count - 1]) + 1
        raw = bytes(self.buffer[:cut])
        ends = self.newlines[:count].copy()
        del self.buffer[:cut]
        self.newlines = self.newlines[count:] - cut
        self.lines += count
        return raw, ends
