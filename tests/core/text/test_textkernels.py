"""The one-pass decoder of a shard's column against Python's own decoding and ``str`` methods:
on raw WMT text in several scripts, and on byte strings built to hit every rule of strict UTF-8."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mtcore.contracts.errors import DataError
from mtcore.text.block import TextColumn
from mtcore.text.chars import BOM
from mtcore.text.kernels import BAD_CHARS, CharClasses, decode_column
from tests.support.data import SHARED

RAW_TEXT = [
    "en-ja/wmt-conference+wmt22-news-systems/txt/references/generaltest2022.en-ja.ref.A.ja",
    "zh-en/wmt-conference+wmt22-news-systems/txt/sources/generaltest2022.zh-en.src.zh",
    "en-ru/wmt-conference+wmt22-news-systems/txt/references/generaltest2022.en-ru.ref.A.ru",
    "en-ja/wmt-conference+wmt22-news-systems/txt/sources/generaltest2022.en-ja.src.en",
]


def reference(raw: bytes) -> tuple[np.ndarray, ...]:
    """What the column derives from Python's decoding, the way it did before the kernel."""
    column = TextColumn(raw, raw.count(b"\n"), raw.decode("utf-8"))
    return column.codes, column.ends, column.byte_ends, column.word_count, column.longest_word


def same(got: tuple[np.ndarray, ...] | None, want: tuple[np.ndarray, ...]) -> bool:
    """The arrays ``reference`` derives (the class counts after them are tested apart)."""
    return got is not None and all(
        np.array_equal(g, w) for g, w in zip(got[: len(want)], want, strict=True)
    )


@pytest.mark.parametrize("name", RAW_TEXT)
def test_raw_wmt_text_decodes_as_python_does(name):
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is not in ../shared/data")
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    want = reference(raw)
    assert same(decode_column(raw, raw.count(b"\n")), want)
    column = TextColumn.decoded(raw, raw.count(b"\n"), str(path), 1)
    lines = raw.decode("utf-8").split("\n")[:-1]
    assert [column.line(row) for row in range(0, len(lines), 97)] == lines[::97]
    assert "text" not in column.__dict__  # nothing here needed the text


# Pieces a byte string is built from, each with whether strict UTF-8 accepts it (and why).
PIECES = [
    (b"a", True),
    (b" ", True),
    (b"\t", True),
    ("\u3000".encode(), True),  # ideographic space: a space to str.split()
    ("\xa0".encode(), True),  # no-break space: a space too
    (b"\x7f", True),
    ("\x80".encode(), True),  # smallest two-byte
    ("\u07ff".encode(), True),
    ("\u0800".encode(), True),  # smallest three-byte (lead E0)
    ("日本語".encode(), True),
    ("\ud7ff".encode(), True),  # last before the surrogates (lead ED)
    ("\ue000".encode(), True),  # first after them
    ("\uffff".encode(), True),
    ("\U00010000".encode(), True),  # smallest four-byte (lead F0)
    ("😀".encode(), True),
    ("\U0010ffff".encode(), True),  # largest (lead F4)
    (b"\xc0\x80", False),  # overlong NUL
    (b"\xc1\xbf", False),  # overlong
    (b"\xe0\x80\x80", False),  # overlong three-byte
    (b"\xe0\x9f\xbf", False),
    (b"\xed\xa0\x80", False),  # a surrogate
    (b"\xed\xbf\xbf", False),
    (b"\xf0\x8f\xbf\xbf", False),  # overlong four-byte
    (b"\xf4\x90\x80\x80", False),  # past U+10FFFF
    (b"\xf5\x80\x80\x80", False),
    (b"\xff", False),
    (b"\x80", False),  # a stray continuation byte
    (b"\xe3\x81", False),  # a truncated sequence (followed by whatever comes next)
    (b"\xe3\x81a", False),
    (b"\xc3", False),
]
PIECES += [(ch.encode(), False) for ch in BAD_CHARS]  # NUL and line breaks inside a line


def test_constructed_bytes_decode_or_fail_as_python_does():
    rng = random.Random(7)
    for _ in range(3000):
        lines = []
        valid = True
        for _ in range(rng.randint(0, 4)):
            parts = [rng.choice(PIECES[:16]) for _ in range(rng.randint(0, 8))]
            if rng.random() < 0.2:
                parts.insert(rng.randint(0, len(parts)), rng.choice(PIECES[16:]))
            valid &= all(ok for _, ok in parts)
            lines.append(b"".join(piece for piece, _ in parts))
        raw = b"".join(line + b"\n" for line in lines)
        got = decode_column(raw, len(lines))
        if not valid:
            assert got is None, raw
        else:
            assert same(got, reference(raw)), raw


def test_line_count_and_position_are_checked():
    assert decode_column(b"a\nb\n", 3) is None  # fewer lines than the reader counted
    assert decode_column(b"a\nb\nc\n", 2) is None  # more
    assert decode_column(b"a\nb", 2) is None  # the last line without its newline
    assert same(decode_column(b"", 0), reference(b""))


def test_decoded_column_errors_name_file_and_line():
    with pytest.raises(DataError, match=r"c\.ja:12: invalid UTF-8 at byte 1 of the line"):
        TextColumn.decoded(b"ok\nd\xe3\x81s\n", 2, "c.ja", 11)
    with pytest.raises(DataError, match=r"c\.ja:2: line-break character '\\x85'"):
        TextColumn.decoded("ok\nx\x85y\n".encode(), 2, "c.ja", 1)
    with pytest.raises(DataError, match=r"c\.ja:1: NUL byte"):
        TextColumn.decoded(b"o\x00k\n", 1, "c.ja", 1)
    with pytest.raises(DataError, match=r"c\.ja:1: byte-order mark"):
        TextColumn.decoded((BOM + "ok\n").encode(), 1, "c.ja", 1)
    # a BOM after the file's first line is a character like others (the input policy's to judge)
    column = TextColumn.decoded((BOM + "ok\n").encode(), 1, "c.ja", 5)
    assert column.line(0) == BOM + "ok"


# Sets a chain's filters count (terminal punctuation, digits), and others on purpose: CJK
# punctuation, a character above U+FFFF, overlapping sets, more than eight sets.
CLASS_SETS = [".?!…", "123456789", "。、\uff01\uff1f", "\U0001f600a", "aeiou", "a", " ", "0"]
CLASS_SETS += ["x", "y"]


@pytest.mark.parametrize("name", RAW_TEXT)
def test_class_counts_of_the_decoding_pass_are_python_counts(name):
    """Per line and per set, the count the decoding pass makes is ``sum(ch in set for ch in
    line)``; past the eighth set, ``count_chars`` counts on its own, the same way."""
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is not in ../shared/data")
    raw = path.read_bytes() + "😀 a. 1…\n".encode()
    lines = raw.decode("utf-8").split("\n")[:-1]
    classes = CharClasses(CLASS_SETS)
    assert classes.names == tuple(CLASS_SETS[:8])
    column = TextColumn.decoded(raw, len(lines), str(path), 1, classes)
    plain = TextColumn.decoded(raw, len(lines), str(path), 1)
    for chars in CLASS_SETS:
        want = [sum(ch in chars for ch in line) for line in lines]
        assert column.count_chars(chars).tolist() == want, chars
        assert plain.count_chars(chars).tolist() == want, chars
    assert set(column.fused) == set(CLASS_SETS[:8]) and not plain.fused
    assert column.count_chars(".?!…").sum() > 0 and column.count_chars("123456789").sum() > 0
