"""Compiled passes for the text processors that run on every line of a corpus.

A batch of lines is one array of code points (each line ended by ``\\n``, the layout of a
decoded :class:`mtcore.text.block.TextColumn`), and a kernel rewrites it: a pass at memory speed
in place of a Python call per line. The ``normalize`` step hands processors that have such a
pass (``process_codes``) the decoded column itself, and encodes their output straight back to
UTF-8; called with a list of lines, the same pass runs on the lines joined. Each kernel gives
what its processor's plain Python gives, to the character:

- :func:`normalized`: ``unicodedata.normalize(form, line)``. Most characters are their own
  normal form whatever their neighbours are, and most of the others (full-width ASCII,
  ideographic punctuation, ligatures, compatibility digits...) map to a fixed string of such
  characters. A line made only of those two kinds is normalized by a table, character by
  character; a line with any other character (a combining mark, a character that can compose
  with the one before it, Hangul jamo...) goes through ``unicodedata``.
- :func:`squeezed`: ``" ".join(line.split())``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import cache
from typing import Literal

import numba
import numpy as np

from mtcore.api.engine import SPACE_LUT, lines_of_codes

STABLE, COMPLEX = -1, -2  # table values; 0 and up: offset of the mapping in the flat array
NL = 10
Form = Literal["NFC", "NFD", "NFKC", "NFKD"]


def as_codes(lines: Sequence[str]) -> np.ndarray | None:
    """The code points of ``lines``, each followed by ``\\n`` (the layout of a decoded
    column); ``None`` when a line holds a ``\\n`` or a lone surrogate itself (the caller then
    works line by line)."""
    text = "\n".join(lines) + "\n" if lines else ""
    if text.count("\n") != len(lines):
        return None
    try:
        return utf32(text)
    except UnicodeEncodeError:  # a lone surrogate (text read with surrogateescape)
        return None


def utf32(text: str) -> np.ndarray:
    """The code points of ``text`` (scalar values only)."""
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


def _seconds() -> set[int]:
    """Every code point that can be the second of a canonical composition (the marks and
    Hangul vowels and trailing consonants a preceding character may absorb)."""
    seconds = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))  # Hangul V and T jamo
    for c in range(0x110000):
        parts = unicodedata.decomposition(chr(c)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            seconds.add(int(parts[1], 16))
    return seconds


@cache
def form_table(form: Form) -> tuple[np.ndarray, np.ndarray]:
    """Per code point: STABLE (its own normal form, combining class 0, never absorbed by the
    character before it), COMPLEX, or the offset in the flat array of its normal form, a
    -1-terminated run of stable code points. Built once per process (about half a second)."""
    seconds = _seconds()
    table = np.full(0x110000, STABLE, dtype=np.int32)
    flat: list[int] = []
    for c in range(0x110000):
        ch = chr(c)
        if c in seconds or unicodedata.combining(ch):
            table[c] = COMPLEX
    for c in range(0x110000):
        if table[c] == COMPLEX:
            continue
        if 0xD800 <= c < 0xE000:  # surrogates never reach here (the text is valid UTF-8)
            continue
        ch = chr(c)
        out = unicodedata.normalize(form, ch)
        if out == ch:
            continue
        if all(table[ord(x)] == STABLE and unicodedata.normalize(form, x) == x for x in out):
            table[c] = len(flat)
            flat.extend([*map(ord, out), -1])
        else:
            table[c] = COMPLEX
    return table, np.asarray(flat, dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def _normalize(
    codes: np.ndarray, table: np.ndarray, flat: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover (compiled)
    """The table-mapped code points, and per line whether it needs ``unicodedata``."""
    lines = 1
    for c in codes:
        lines += c == NL
    hard = np.zeros(lines, dtype=np.bool_)
    size = len(codes)
    for c in codes:
        at = table[c]
        if at >= 0:
            while flat[at] >= 0:
                size += 1
                at += 1
            size -= 1
    out = np.empty(size, dtype=np.uint32)
    m = 0
    line = 0
    for c in codes:
        at = table[c]
        if at == -1:
            out[m] = c
            m += 1
            line += c == NL
        elif at >= 0:
            while flat[at] >= 0:
                out[m] = flat[at]
                m += 1
                at += 1
        else:
            hard[line] = True
            out[m] = c
            m += 1
    return out, hard


def normalize_codes(codes: np.ndarray, form: Form) -> np.ndarray:
    """``unicodedata.normalize(form, line)`` of every line of ``codes`` (lines ended by
    ``\\n``)."""
    table, flat = form_table(form)
    out, hard = _normalize(codes, table, flat)
    rows = np.flatnonzero(hard).tolist()
    if not rows:
        return out
    before, after = lines_of_codes(codes), lines_of_codes(out)
    for row in rows:
        after[row] = unicodedata.normalize(form, before[row])
    return utf32("\n".join(after) + "\n")


def normalized(lines: Sequence[str], form: Form) -> list[str]:
    """``unicodedata.normalize(form, line)`` of every line."""
    codes = as_codes(lines)
    if codes is None:
        return [unicodedata.normalize(form, line) for line in lines]
    return lines_of_codes(normalize_codes(codes, form))


@numba.njit(cache=True, nogil=True)
def _squeeze(codes: np.ndarray, space: np.ndarray) -> np.ndarray:  # pragma: no cover
    """Per line, its words joined by one U+0020 (``\\n`` kept after each line). No branch per
    code point (spaces and words alternate too often to predict): a space is written where one
    may go and kept only if a word follows one in the same line."""
    out = np.empty(len(codes) + 1, dtype=np.uint32)
    top = len(space) - 1
    m = 0
    after_space = False  # the code point before was a space
    in_line = False  # a word was written on this line
    for c in codes:
        newline = c == NL
        blank = space[min(c, top)] & ~newline
        word = ~blank & ~newline
        out[m] = 32
        m += word & after_space & in_line
        out[m] = c
        m += ~blank
        in_line = (in_line | word) & ~newline
        after_space = blank
    return out[:m]


def squeeze_codes(codes: np.ndarray) -> np.ndarray:
    """``" ".join(line.split())`` of every line of ``codes`` (lines ended by ``\\n``)."""
    return _squeeze(codes, SPACE_LUT)


def squeezed(lines: Sequence[str]) -> list[str]:
    """``" ".join(line.split())`` of every line."""
    codes = as_codes(lines)
    if codes is None:
        return [" ".join(line.split()) for line in lines]
    return lines_of_codes(squeeze_codes(codes))
