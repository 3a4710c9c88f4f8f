"""Bad input never silently loses or misaligns data: each case is an error naming file and line,
or a repair counted in the stats."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from mtcore.contracts.errors import DataError
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import Corpus, CorpusWriter, InputPolicy, read_parallel
from mtcore.data.read import read_tsv


def write_pair(tmp_path: Path, en: bytes, ja: bytes, gz: bool = False) -> list[Path]:
    paths = []
    for lang, data in (("en", en), ("ja", ja)):
        path = tmp_path / (f"c.{lang}.gz" if gz else f"c.{lang}")
        if gz:
            with gzip.open(path, "wb") as handle:
                handle.write(data)
        else:
            path.write_bytes(data)
        paths.append(path)
    return paths


JA3 = "猫\n犬\n鳥\n".encode()

# (why, en bytes, ja bytes, policy, expected pairs or error fragment, expected counters)
CASES = [
    (
        "clean input passes untouched",
        b"cat\ndog\nbird\n",
        JA3,
        {},
        [("cat", "猫"), ("dog", "犬"), ("bird", "鳥")],
        {},
    ),
    (
        "no newline at end of file is not a lost line",
        b"cat\ndog\nbird",
        JA3,
        {},
        [("cat", "猫"), ("dog", "犬"), ("bird", "鳥")],
        {},
    ),
    (
        "Windows line ends are stripped and counted",
        b"cat\r\ndog\r\nbird\r\n",
        JA3,
        {},
        [("cat", "猫"), ("dog", "犬"), ("bird", "鳥")],
        {"input.crlf_stripped": 3},
    ),
    (
        "a lone CR would split the line in fairseq/universal newlines: becomes a space",
        b"cat\rmeow\ndog\nbird\n",
        JA3,
        {},
        [("cat meow", "猫"), ("dog", "犬"), ("bird", "鳥")],
        {"input.inner_breaks_replaced": 1},
    ),
    (
        "U+2028 would split the line in str.splitlines",
        "a\u2028b\ndog\nbird\n".encode(),
        JA3,
        {},
        [("a b", "猫"), ("dog", "犬"), ("bird", "鳥")],
        {"input.inner_breaks_replaced": 1},
    ),
    (
        "a BOM is stripped from the first line only",
        b"\xef\xbb\xbfcat\ndog\nbird\n",
        JA3,
        {},
        [("cat", "猫"), ("dog", "犬"), ("bird", "鳥")],
        {"input.bom_stripped": 1},
    ),
    (
        "invalid UTF-8 is an error naming file and line",
        b"cat\nd\xffg\nbird\n",
        JA3,
        {},
        "c.en:2: invalid UTF-8",
        {},
    ),
    (
        "invalid UTF-8 dropped removes the whole pair, keeping alignment",
        b"cat\nd\xffg\nbird\n",
        JA3,
        {"invalid_utf8": "drop"},
        [("cat", "猫"), ("bird", "鳥")],
        {"input.invalid_utf8_dropped": 1, "input.pairs_dropped": 1},
    ),
    (
        "invalid UTF-8 replaced keeps the pair",
        b"cat\nd\xffg\nbird\n",
        JA3,
        {"invalid_utf8": "replace"},
        [("cat", "猫"), ("d\ufffdg", "犬"), ("bird", "鳥")],
        {"input.invalid_utf8_replaced": 1},
    ),
    ("a NUL byte is an error by default", b"cat\nd\x00g\nbird\n", JA3, {}, "c.en:2: NUL byte", {}),
    (
        "a NUL byte can be stripped",
        b"cat\nd\x00g\nbird\n",
        JA3,
        {"nul": "strip"},
        [("cat", "猫"), ("dg", "犬"), ("bird", "鳥")],
        {"input.nul_stripped": 1},
    ),
    (
        "mismatched line counts name the shorter file",
        b"cat\ndog\n",
        JA3,
        {},
        "c.en has 2 lines but",
        {},
    ),
    (
        "mismatched line counts the other way",
        b"cat\ndog\nbird\nfish\n",
        JA3,
        {},
        "c.ja has 3 lines but",
        {},
    ),
    (
        "empty sides are kept by default (a filter decides)",
        b"cat\n\nbird\n",
        JA3,
        {},
        [("cat", "猫"), ("", "犬"), ("bird", "鳥")],
        {},
    ),
    (
        "empty sides can be dropped as pairs",
        b"cat\n\nbird\n",
        JA3,
        {"empty": "drop"},
        [("cat", "猫"), ("bird", "鳥")],
        {"input.empty_dropped": 1},
    ),
    (
        "empty sides can be an error",
        b"cat\n\nbird\n",
        JA3,
        {"empty": "error"},
        "c.en:2: empty segment",
        {},
    ),
    (
        "an over-long line is an error by default",
        b"cat\n" + b"x" * 100 + b"\nbird\n",
        JA3,
        {"max_line_bytes": 50},
        "c.en:2: line longer than 50 bytes",
        {},
    ),
    (
        "an over-long line can be dropped; the next line is still line 3",
        b"cat\n" + b"x" * 100 + b"\nbird\n",
        JA3,
        {"max_line_bytes": 50, "too_long": "drop"},
        [("cat", "猫"), ("bird", "鳥")],
        {"input.too_long_dropped": 1},
    ),
]


@pytest.mark.parametrize(
    ("why", "en", "ja", "policy", "expected", "counters"), CASES, ids=[c[0] for c in CASES]
)
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_bad_input_table(tmp_path, why, en, ja, policy, expected, counters, gz):
    paths = write_pair(tmp_path, en, ja, gz)
    stats = Stats()
    if isinstance(expected, str):
        if gz:
            expected = expected.replace("c.en", "c.en.gz").replace("c.ja", "c.ja.gz")
        with pytest.raises(DataError, match=expected.replace(".", r"\.")):
            list(read_parallel(paths, InputPolicy(**policy), stats))
        return
    assert list(read_parallel(paths, InputPolicy(**policy), stats)) == expected
    for key, value in counters.items():
        assert stats[key] == value


def test_megabyte_lines_stream(tmp_path):
    big = "語" * 400_000  # 1.2 MB of UTF-8 on one line
    paths = write_pair(tmp_path, f"a\n{big}\nc\n".encode(), b"x\ny\nz\n")
    pairs = list(read_parallel(paths, InputPolicy(max_line_bytes=2 << 20), Stats()))
    assert [len(p[0]) for p in pairs] == [1, 400_000, 1]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            b"hello\tkonnichiwa\tattribution\n",
            [("hello", "konnichiwa")],
        ),  # extra columns are ignored
        (b"hello\n", "expected at least 2 tab-separated columns, found 1"),  # too few columns
    ],
)
def test_tsv(tmp_path, line, expected):
    path = tmp_path / "c.tsv"
    path.write_bytes(line)
    if isinstance(expected, str):
        with pytest.raises(DataError, match=f"c.tsv:1: {expected}"):
            list(read_tsv(path, [0, 1], InputPolicy(), Stats()))
    else:
        assert list(read_tsv(path, [0, 1], InputPolicy(), Stats())) == expected


def test_writer_round_trip_and_count(tmp_path, enja_files):
    pairs = list(read_parallel([enja_files["en"], enja_files["ja"]], InputPolicy(), Stats()))
    with CorpusWriter(tmp_path / "out", ("en", "ja")) as writer:
        writer.write_all(pairs)
    corpus = Corpus.open(tmp_path / "out")
    assert corpus.langs == ("en", "ja")
    assert corpus.count() == len(pairs) == 400
    assert list(corpus) == pairs


def test_writer_refuses_newlines(tmp_path):
    writer = CorpusWriter(tmp_path / "out", ("en", "ja"))
    with pytest.raises(DataError, match="newline"):
        writer.write(("a\nb", "c"))
