"""Compiled kernels over the UTF-8 bytes and the code points of a :class:`TextColumn`.

:func:`decode_column` reads a shard's column in one pass: it checks the bytes as Python's strict
UTF-8 decoder does, rejects NUL and the line breaks :data:`mtcore.text.chars.INNER_BREAKS` matches,
and derives at the same time what array filters read: the code points, each line's end, and
the whitespace words (count and longest, as ``str.split()`` sees them). Decoding to ``str`` and
encoding to UTF-32 took two passes and a third for the words; a filter that needs the text
still gets it, decoded then.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from mtcore.text.chars import INNER_BREAKS

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
    raw: np.ndarray, count: int, kinds: np.ndarray, classes: np.ndarray, nbits: int
) -> tuple[
    np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int
]:  # pragma: no cover (compiled)
    codes = np.empty(len(raw), dtype=np.uint32)
    ends = np.zeros(count + 1, dtype=np.int64)  # one spare: a surplus line is an error anyway
    byte_ends = np.zeros(count + 1, dtype=np.int64)
    words = np.zeros(count + 1, dtype=np.int64)
    longest = np.zeros(count + 1, dtype=np.int64)
    counts = np.zeros((count + 1, nbits), dtype=np.int32)  # per line, per character class
    acc = np.zeros(8, dtype=np.int32)
    top = len(kinds)
    ncls = len(classes)
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
                return codes, ends, byte_ends, words, longest, counts, i
            i += size
        if code < ncls:
            bits = classes[code]
            if bits:
                for b in range(8):
                    acc[b] += (bits >> b) & 1
        kind = kinds[code] if code < top else WORD
        # branch-free word counting: words and spaces alternate too often to predict
        word = int(kind == WORD)
        w += word & (1 - inside)
        inside = word
        run = (run + 1) * word
        best = max(best, run)
        if kind >= NEWLINE:
            if kind == FORBIDDEN or line == count:
                return codes, ends, byte_ends, words, longest, counts, i - 1
            ends[line] = m
            byte_ends[line] = i - 1
            words[line] = w
            longest[line] = best
            w = best = 0
            for b in range(nbits):
                counts[line, b] = acc[b]
                acc[b] = 0
            line += 1
        codes[m] = code
        m += 1
    if line != count:
        return codes, ends, byte_ends, words, longest, counts, len(raw)
    tail = (codes[:m], ends[:count], byte_ends[:count], words[:count], longest[:count])
    return (*tail, counts[:count], -1)


class CharClasses:
    """Up to eight sets of characters whose per-line counts the decoding pass computes for a
    whole chain (a filter names its sets in ``Filter.char_classes``); sets past the eighth
    are counted by their filters' own pass."""

    def __init__(self, sets: Sequence[str] = ()) -> None:
        self.names = tuple(dict.fromkeys(s for s in sets if s))[:8]
        top = max((ord(c) for chars in self.names for c in chars), default=-1)
        self.table = np.zeros(top + 1, dtype=np.uint8)
        for bit, chars in enumerate(self.names):
            for c in chars:
                self.table[ord(c)] |= 1 << bit


NO_CLASSES = CharClasses()


def decode_column(
    raw: bytes, count: int, classes: CharClasses = NO_CLASSES
) -> tuple[np.ndarray, ...] | None:
    """``(codes, ends, byte_ends, word_count, longest_word, class_counts)`` of ``count`` lines
    of UTF-8, each ending in ``\\n`` (``class_counts``: (lines, len(classes.names)) int32,
    per line the characters of each of ``classes``); ``None`` when the bytes are not valid
    UTF-8, hold a forbidden character or another number of lines (the caller finds what and
    where, for its message)."""
    data = np.frombuffer(raw, dtype=np.uint8)
    codes, *arrays, error = _decode(data, count, KINDS, classes.table, len(classes.names))
    if error >= 0:
        return None
    if 4 * len(codes) < 3 * len(raw):  # multi-byte text: free the room its bytes would need
        codes = codes.copy()
    return (codes, *arrays)


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


@numba.njit(cache=True, nogil=True)
def encode_utf8(codes: np.ndarray) -> np.ndarray:  # pragma: no cover (compiled)
    """The UTF-8 bytes of code points (valid scalar values, as a decoded column holds)."""
    size = 0
    for c in codes:
        size += 1 if c < 0x80 else 2 if c < 0x800 else 3 if c < 0x10000 else 4
    out = np.empty(size, dtype=np.uint8)
    m = 0
    for c in codes:
        if c < 0x80:
            out[m] = c
            m += 1
        elif c < 0x800:
            out[m] = 0xC0 | (c >> 6)
            out[m + 1] = 0x80 | (c & 0x3F)
            m += 2
        elif c < 0x10000:
            out[m] = 0xE0 | (c >> 12)
            out[m + 1] = 0x80 | ((c >> 6) & 0x3F)
            out[m + 2] = 0x80 | (c & 0x3F)
            m += 3
        else:
            out[m] = 0xF0 | (c >> 18)
            out[m + 1] = 0x80 | ((c >> 12) & 0x3F)
            out[m + 2] = 0x80 | ((c >> 6) & 0x3F)
            out[m + 3] = 0x80 | (c & 0x3F)
            m += 4
    return out


@numba.njit(cache=True, nogil=True)
def _line_changes(
    before: np.ndarray, after: np.ndarray, ends: np.ndarray, new_ends: np.ndarray
) -> int:  # pragma: no cover (compiled)
    changed = 0
    for line in range(len(ends)):
        a = ends[line - 1] + 1 if line else 0
        b = new_ends[line - 1] + 1 if line else 0
        size = ends[line] - a
        if new_ends[line] - b != size:
            changed += 1
            continue
        for t in range(size):
            if before[a + t] != after[b + t]:
                changed += 1
                break
    return changed


def line_changes(before: np.ndarray, after: np.ndarray) -> int:
    """How many lines differ between two arrays of as many lines (each ended by ``\\n``)."""
    if len(before) == len(after) and np.array_equal(before, after):
        return 0
    return int(
        _line_changes(before, after, np.flatnonzero(before == 10), np.flatnonzero(after == 10))
    )


@numba.njit(cache=True, nogil=True)
def _faulty(codes: np.ndarray, kinds: np.ndarray) -> bool:  # pragma: no cover (compiled)
    """Whether any code point is forbidden in a line or not a Unicode scalar value (no
    branch per code point: the loop vectorizes)."""
    top = len(kinds) - 1  # the last entry is a word character: it stands for those above
    bad = False
    for c in codes:
        bad |= (kinds[min(c, top)] == FORBIDDEN) | (c > 0x10FFFF) | ((c >= 0xD800) & (c < 0xE000))
    return bad


def first_fault(codes: np.ndarray, count: int) -> int:
    """-1 when ``codes`` are ``count`` lines each ended by ``\\n``, without a forbidden
    character or a code point that is not a Unicode scalar value; else the line at fault
    (``count``: a missing or surplus line)."""
    ends = np.flatnonzero(codes == 10)
    if len(ends) != count or (count and ends[-1] != len(codes) - 1):
        return count
    if not _faulty(codes, KINDS):
        return -1
    top = len(KINDS) - 1
    wrong = (KINDS[np.minimum(codes, top)] == FORBIDDEN) | (codes > 0x10FFFF)
    wrong |= (codes >= 0xD800) & (codes < 0xE000)
    return int(np.searchsorted(ends, np.flatnonzero(wrong)[0]))
