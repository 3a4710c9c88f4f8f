"""Compiled kernels over the UTF-8 bytes and the code points of a :class:`TextColumn`.

:func:`decode_column` reads a shard's column in one pass: it checks the bytes as Python's strict
UTF-8 decoder does, rejects NUL and the line breaks :data:`mtcore.corpus.INNER_BREAKS` matches,
and derives at the same time what array filters read: the code points, each line's end, and
the whitespace words (count and longest, as ``str.split()`` sees them). Decoding to ``str`` and
encoding to UTF-32 took two passes and a third for the words; a filter that needs the text
still gets it, decoded then.
"""

from __future__ import annotations

import numba
import numpy as np

from mtcore.corpus import INNER_BREAKS

# Every code point Python's str.isspace() accepts (what str.split() splits on); the largest is
# U+3000, so a table of U+0000..U+3001 answers for all code points once clipped to U+3001
# (not a space: it stands for every code point above the table).
SPACE_LUT = np.array([chr(c).isspace() for c in range(0x3002)], dtype=np.bool_)

# NUL and every character INNER_BREAKS matches (all below U+2030): not allowed inside a line.
BAD_CHARS = ("\x00", *(chr(c) for c in range(0x2030) if INNER_BREAKS.match(chr(c))))

# What the decoder does with a code point below U+3002 (those above are word characters).
WORD, SPACE, NEWLINE, FORBIDDEN = 0, 1, 2, 3
KINDS = np.where(SPACE_LUT, SPACE, WORD).astype(np.uint8)
KINDS[[ord(ch) for ch in BAD_CHARS]] = FORBIDDEN
KINDS[10] = NEWLINE


@numba.njit(cache=True, nogil=True)
def _sequence(raw: np.ndarray, i: int, lead: int) -> tuple[int, int]:  # pragma: no cover
    """The code point of the multi-byte sequence at ``raw[i]`` and its length; length 0 when
    it is not one that CPython's strict decoder accepts (overlong forms, surrogates, code
    points past U+10FFFF, stray or missing continuation bytes)."""
    n = len(raw)
    if lead < 0xC2:
        return 0, 0
    if lead < 0xE0:
        if i + 1 >= n or raw[i + 1] & 0xC0 != 0x80:
            return 0, 0
        return ((lead & 0x1F) << 6) | (raw[i + 1] & 0x3F), 2
    if lead < 0xF0:
        if i + 2 >= n:
            return 0, 0
        c1, c2 = raw[i + 1], raw[i + 2]
        low = 0xA0 if lead == 0xE0 else 0x80
        high = 0x9F if lead == 0xED else 0xBF
        if c1 < low or c1 > high or c2 & 0xC0 != 0x80:
            return 0, 0
        return ((lead & 0x0F) << 12) | ((c1 & 0x3F) << 6) | (c2 & 0x3F), 3
    if lead < 0xF5:
        if i + 3 >= n:
            return 0, 0
        c1, c2, c3 = raw[i + 1], raw[i + 2], raw[i + 3]
        low = 0x90 if lead == 0xF0 else 0x80
        high = 0x8F if lead == 0xF4 else 0xBF
        if c1 < low or c1 > high or c2 & 0xC0 != 0x80 or c3 & 0xC0 != 0x80:
            return 0, 0
        code = ((lead & 0x07) << 18) | ((c1 & 0x3F) << 12) | ((c2 & 0x3F) << 6) | (c3 & 0x3F)
        return code, 4
    return 0, 0


@numba.njit(cache=True, nogil=True)
def _decode(
    raw: np.ndarray, count: int, kinds: np.ndarray
) -> tuple[
    np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int
]:  # pragma: no cover (compiled)
    codes = np.empty(len(raw), dtype=np.uint32)
    ends = np.zeros(count + 1, dtype=np.int64)  # one spare: a surplus line is an error anyway
    byte_ends = np.zeros(count + 1, dtype=np.int64)
    words = np.zeros(count + 1, dtype=np.int64)
    longest = np.zeros(count + 1, dtype=np.int64)
    top = len(kinds)
    i = m = line = w = run = best = 0
    inside = 0  # 1 while in a word
    while i < len(raw):
        lead = raw[i]
        if lead < 0x80:
            code = int(lead)
            i += 1
        elif (
            # most CJK: three bytes, no overlong form or surrogate possible after these leads
            0xE1 <= lead <= 0xEF
            and lead != 0xED
            and i + 2 < len(raw)
            and raw[i + 1] & 0xC0 == 0x80
            and raw[i + 2] & 0xC0 == 0x80
        ):
            code = ((lead & 0x0F) << 12) | ((raw[i + 1] & 0x3F) << 6) | (raw[i + 2] & 0x3F)
            i += 3
        else:
            code, size = _sequence(raw, i, lead)
            if size == 0:
                return codes, ends, byte_ends, words, longest, i
            i += size
        kind = kinds[code] if code < top else WORD
        # branch-free word counting: words and spaces alternate too often to predict
        word = int(kind == WORD)
        w += word & (1 - inside)
        inside = word
        run = (run + 1) * word
        best = max(best, run)
        if kind >= NEWLINE:
            if kind == FORBIDDEN or line == count:
                return codes, ends, byte_ends, words, longest, i - 1
            ends[line] = m
            byte_ends[line] = i - 1
            words[line] = w
            longest[line] = best
            w = best = 0
            line += 1
        codes[m] = code
        m += 1
    if line != count:
        return codes, ends, byte_ends, words, longest, len(raw)
    return codes[:m], ends[:count], byte_ends[:count], words[:count], longest[:count], -1


def decode_column(raw: bytes, count: int) -> tuple[np.ndarray, ...] | None:
    """``(codes, ends, byte_ends, word_count, longest_word)`` of ``count`` lines of UTF-8, each
    ending in ``\\n``; ``None`` when the bytes are not valid UTF-8, hold a forbidden character
    or another number of lines (the caller finds what and where, for its message)."""
    *arrays, error = _decode(np.frombuffer(raw, dtype=np.uint8), count, KINDS)
    return None if error >= 0 else tuple(arrays)


@numba.njit(cache=True, nogil=True)
def word_stats(
    codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, space: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover (compiled)
    """Per line, ``len(line.split())`` and the longest word's length (for columns built from
    ``str`` lines; decoded columns get both from :func:`decode_column`)."""
    count = np.zeros(len(starts), dtype=np.int64)
    longest = np.zeros(len(starts), dtype=np.int64)
    last = len(space) - 1
    for line in range(len(starts)):
        words = 0
        best = 0
        run = 0
        for x in range(starts[line], ends[line]):
            if space[min(codes[x], last)]:
                if run:
                    words += 1
                    best = max(best, run)
                run = 0
            else:
                run += 1
        if run:
            words += 1
            best = max(best, run)
        count[line] = words
        longest[line] = best
    return count, longest


@numba.njit(cache=True, nogil=True)
def count_codes(
    codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, table: np.ndarray
) -> np.ndarray:  # pragma: no cover (compiled)
    """Per line, the code points ``c`` with ``table[c]`` true (past its end: false)."""
    out = np.zeros(len(starts), dtype=np.int64)
    size = len(table)
    for line in range(len(starts)):
        n = 0
        for x in range(starts[line], ends[line]):
            c = codes[x]
            if c < size and table[c]:
                n += 1
        out[line] = n
    return out
