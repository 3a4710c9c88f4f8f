"""The sharded reader (mtcore.data.ingest) gives what the serial reader gives: the same pairs, the
same counts, the same errors naming file and line, whatever the block size; unchanged plain
input is not written a second time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mtcore.contracts.errors import DataError
from mtcore.contracts.stats import Stats
from mtcore.data import ingest as ingest_module
from mtcore.data.corpus import InputPolicy, read_parallel
from mtcore.data.ingest import ingest
from mtcore_plugins.executors.local import LocalExecutor
from tests.core.data.test_corpus import CASES, JA3, write_pair

SERIAL = LocalExecutor.from_dict({"workers": 1})


def sharded(
    paths: list[Path], policy: InputPolicy, out: Path, block_lines: int, executor=SERIAL
) -> tuple[list[tuple[str, ...]], Stats, list[Path]]:
    out.mkdir(exist_ok=True)
    targets = [out / f"corpus.{i}" for i in range(len(paths))]
    stats = Stats()
    lines = ingest(paths, targets, policy, stats, executor, block_lines=block_lines)
    sides = [t.read_bytes().decode("utf-8").split("\n") for t in targets]
    assert all(side[-1] == "" for side in sides), "every line ends with a newline"
    pairs = list(zip(*(side[:-1] for side in sides), strict=True))
    assert len(pairs) == lines
    return pairs, stats, targets


def serial(paths: list[Path], policy: InputPolicy) -> tuple[list[tuple[str, ...]], Stats]:
    stats = Stats()
    return list(read_parallel(paths, policy, stats)), stats


EMPTY_DROP = {"empty": "drop"}
LIMIT_50 = {"max_line_bytes": 50}
EXTRA = [
    (
        "a clean first block, then CR LF ends: the first block's bytes are copied",
        b"cat\ndog\nbird\r\nfish\r\n",
        "猫\n犬\n鳥\n魚\n".encode(),
        {},
    ),
    ("CR LF and no newline at the end", b"cat\r\ndog\r\nbird\r", JA3, {}),
    ("CR LF and a lone CR in one block", b"cat\r\nd\rog\r\nbird\n", JA3, {}),
    ("CR LF is an error where the policy says", b"cat\ndog\r\nbird\n", JA3, {"crlf": "error"}),
    ("a BOM with empty lines dropped", b"\xef\xbb\xbf\ncat\ndog\n", JA3, EMPTY_DROP),
    ("spaces only are empty", b"cat\n  \t\nbird\n", JA3, EMPTY_DROP),
    ("an ideographic space is empty", b"a\nb\nc\n", "猫\n\u3000\n鳥\n".encode(), EMPTY_DROP),
    ("an empty last line is kept", b"cat\ndog\n\n", JA3, {}),
    ("an empty last line is dropped", b"cat\ndog\n\n", JA3, EMPTY_DROP),
    ("U+0085 inside a CJK line", b"cat\ndog\nbird\n", "猫\n犬\x85犬\n鳥\n".encode(), {}),
    ("a line exactly at the limit", b"cat\n" + b"x" * 50 + b"\nbird\n", JA3, LIMIT_50),
    (
        "one byte over the limit at the end",
        b"cat\ndog\n" + b"x" * 51,
        JA3,
        {**LIMIT_50, "too_long": "drop"},
    ),
    (
        "a bad line and a dropped one in two blocks",
        b"c\x00t\ndog\nb\xffd\n",
        JA3,
        {"nul": "drop", "invalid_utf8": "drop"},
    ),
]


@pytest.mark.parametrize("block_lines", [1, 2, 50])
@pytest.mark.parametrize(
    ("why", "en", "ja", "policy"),
    [(c[0], c[1], c[2], c[3]) for c in CASES] + EXTRA,
    ids=[c[0] for c in CASES] + [c[0] for c in EXTRA],
)
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_same_as_the_serial_reader(tmp_path, why, en, ja, policy, block_lines, gz):
    paths = write_pair(tmp_path, en, ja, gz)
    settings = InputPolicy(**policy)
    try:
        expected, counts = serial(paths, settings)
    except DataError as exc:
        with pytest.raises(DataError) as caught:
            sharded(paths, settings, tmp_path / "out", block_lines)
        # the same file and line (the serial reader says "N lines but"; so does the cut)
        assert str(caught.value).split(":")[:2] == str(exc).split(":")[:2]
        return
    pairs, stats, _ = sharded(paths, settings, tmp_path / "out", block_lines)
    assert pairs == expected
    assert stats.as_dict() == counts.as_dict()


@pytest.mark.parametrize(
    ("why", "en", "ja", "policy"),
    [(c[0], c[1], c[2], c[3]) for c in CASES] + EXTRA,
    ids=[c[0] for c in CASES] + [c[0] for c in EXTRA],
)
def test_a_byte_budget_of_one_line_gives_the_same_pairs(tmp_path, why, en, ja, policy):
    """Plain blocks cut at a byte budget (a line longer than it sent alone, cut to the limit)
    read as the serial reader does."""
    settings = InputPolicy(**{"max_line_bytes": 16, **policy})
    paths = write_pair(tmp_path, en, ja)
    targets = [tmp_path / "o.en", tmp_path / "o.ja"]
    try:
        expected, counts = serial(paths, settings)
    except DataError as exc:
        with pytest.raises(DataError) as caught:
            ingest(paths, targets, settings, Stats(), SERIAL, block_bytes=1)
        assert str(caught.value).split(":")[:2] == str(exc).split(":")[:2]
        return
    stats = Stats()
    assert ingest(paths, targets, settings, stats, SERIAL, block_bytes=1) == len(expected)
    sides = [t.read_text(encoding="utf-8").split("\n")[:-1] for t in targets]
    assert list(zip(*sides, strict=True)) == expected
    assert stats.as_dict() == counts.as_dict()


def test_unchanged_input_is_not_written_again(tmp_path):
    paths = write_pair(tmp_path, b"cat\ndog\nbird\n", JA3)
    _, stats, targets = sharded(paths, InputPolicy(), tmp_path / "out", 2)
    assert stats.as_dict() == {}
    for source, target in zip(paths, targets, strict=True):
        assert target.read_bytes() == source.read_bytes()
        # a clone shares no inode but no bytes were copied either; else a hard link
        same = os.stat(source).st_ino == os.stat(target).st_ino
        assert same or ingest_module.same_file(source, tmp_path / "probe") == "clone"


def test_changed_input_leaves_the_source_alone(tmp_path):
    paths = write_pair(tmp_path, b"cat\ndog\r\nbird\n", JA3)
    before = [p.read_bytes() for p in paths]
    sharded(paths, InputPolicy(), tmp_path / "out", 1)
    assert [p.read_bytes() for p in paths] == before
    assert os.stat(paths[0]).st_nlink == 1


def test_an_earlier_attempts_link_is_replaced_not_written_through(tmp_path):
    """An attempt whose input was unchanged left its outputs as hard links to the user's files;
    a rerun that must write (here the input changed meanwhile: a CR LF to repair) opened them
    with "wb" and truncated the user's own corpus through the link (issue 43)."""
    paths = write_pair(tmp_path, b"cat\ndog\nbird\n", JA3)
    out = tmp_path / "out"
    out.mkdir()
    for i, source in enumerate(paths):
        os.link(source, out / f"corpus.{i}")
    paths[0].write_bytes(b"cat\ndog\r\nbird\n")  # in place: the links see it
    before = [p.read_bytes() for p in paths]
    pairs, stats, targets = sharded(paths, InputPolicy(), out, 1)
    assert [p.read_bytes() for p in paths] == before
    assert [pair[0] for pair in pairs] == ["cat", "dog", "bird"]
    assert os.stat(paths[0]).st_ino != os.stat(targets[0]).st_ino


def test_workers_give_the_same_bytes(tmp_path, monkeypatch):
    """Two worker processes, blocks of 7 lines: the same output as in one process, with
    dropped pairs in some blocks and not in others."""
    en = b"".join(b"line %d\n" % i if i % 13 else b"bad \xff %d\n" % i for i in range(200))
    ja = "".join(f"行 {i}\n" if i % 17 else f"行\u2028{i}\n" for i in range(200)).encode()
    paths = write_pair(tmp_path, en, ja)
    policy = InputPolicy(invalid_utf8="drop")
    expected, counts = serial(paths, policy)
    monkeypatch.setattr(ingest_module, "IN_PROCESS_BYTES", 0)
    executor = LocalExecutor.from_dict({"workers": 2})
    try:
        pairs, stats, _ = sharded(paths, policy, tmp_path / "out", 7, executor)
    finally:
        executor.close()
    assert pairs == expected
    assert stats.as_dict() == counts.as_dict()
    assert counts["input.invalid_utf8_dropped"] == 16  # lines 0, 13, ..., 195


def test_split_copies_lines_in_blocks_as_the_seeded_choice_says(tmp_path, monkeypatch):
    """The split step cuts blocks of bytes: the same three corpora, in corpus order, as
    picking the seeded random sample pair by pair, whatever the block size."""
    import random

    from mtcore.contracts.step import Artifact, StepContext
    from mtcore.data.corpus import CorpusWriter
    from mtcore_plugins.steps import split as split_module

    pairs = [(f"line {i} ünï", f"行 {i}") for i in range(500)]
    with CorpusWriter(tmp_path / "c", ("en", "ja")) as writer:
        writer.write_all(pairs)
    chosen = random.Random(3).sample(range(len(pairs)), 70)
    role = dict.fromkeys(chosen[:50], "valid") | dict.fromkeys(chosen[50:], "test")
    for block in (7, 100_000):
        monkeypatch.setattr(split_module, "BLOCK_LINES", block)
        ctx = StepContext(
            step_id="split",
            kind="split",
            step_hash="test",
            work=tmp_path / f"split-{block}",
            inputs={"corpus": Artifact.open(tmp_path / "c")},
            executor=SERIAL,
            registry=None,  # type: ignore[arg-type]
            show_progress=False,
        )
        split_module.SplitStep.from_dict({"valid_size": 50, "test_size": 20, "seed": 3}).run(ctx)
        for name in ("train", "valid", "test"):
            expected = [p for i, p in enumerate(pairs) if role.get(i, "train") == name]
            for side, lang in enumerate(("en", "ja")):
                text = (ctx.work / name / f"corpus.{lang}").read_text(encoding="utf-8")
                assert text == "".join(p[side] + "\n" for p in expected)


def test_the_scan_sees_what_python_sees_on_random_bytes():
    """The compiled pass agrees with Python's strict UTF-8 decoder and with the policy's
    characters on random mixtures of valid text, broken sequences and control bytes."""
    import random
    import re

    import numpy as np

    from mtcore.data.ingest import SCANNED_BREAKS, _scan
    from mtcore.text.chars import INNER_BREAKS

    assert {chr(c) for c in range(0x110000) if INNER_BREAKS.match(chr(c))} == set(SCANNED_BREAKS)
    rng = random.Random(5)
    pieces = [
        *"aZ 9.\t\r\n\x00\x0b\x0c\x1c\x1e\x1f\x85\u2028\u2029é猫🙂\ufeff\U0010ffff",
        *(bytes([b]) for b in (0x80, 0xBF, 0xC0, 0xC1, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xF5, 0xFF)),
        b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x80\x80\x80", b"\xc2\x85",
    ]  # fmt: skip
    for _ in range(20_000):
        chosen = [rng.choice(pieces) for _ in range(rng.randint(0, 12))]
        data = b"".join(p if isinstance(p, bytes) else p.encode("utf-8") for p in chosen) + b"\n"
        invalid, bad, crlf, longest = _scan(np.frombuffer(data, dtype=np.uint8))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            assert invalid, data
            continue
        assert not invalid, data
        lone_cr = data.count(b"\r") != data.count(b"\r\n")
        others = re.sub("\r\n", "", text)
        assert bad == (lone_cr or "\x00" in text or any(c in others for c in SCANNED_BREAKS[1:]))
        assert crlf == data.count(b"\r\n")
        assert longest == max(len(line) for line in data.split(b"\n"))
