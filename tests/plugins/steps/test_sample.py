"""The ``sample`` step: exact size, seeded, uniform, in corpus order, one block of memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mtcore.api import Corpus, CorpusWriter
from mtcore_plugins.steps import sample as sample_module
from mtcore_plugins.steps.sample import SampleStep, block_count
from tests.support.steps import make_ctx


def corpus(where: Path, lines: int, langs: tuple[str, ...] = ("en", "ja")) -> Path:
    with CorpusWriter(where, langs) as writer:
        for i in range(lines):
            writer.write(tuple(f"{lang} {i}" for lang in langs))
    return where


def run_sample(tmp_path: Path, source: Path, name: str, **config: int) -> tuple[list, dict]:
    ctx = make_ctx(tmp_path / name, "sample", corpus=source)
    SampleStep.from_dict(config).run(ctx)
    out = Corpus.open(ctx.output("corpus"))
    return list(out), ctx.stats.as_dict()


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 37 lines, so that a corpus of hundreds spans many blocks."""
    monkeypatch.setattr(sample_module, "BLOCK_LINES", 37)


def numbers(pairs: list) -> list[int]:
    return [int(pair[0].split()[1]) for pair in pairs]


@pytest.mark.parametrize(
    ("lines", "size"),
    [
        (1000, 1),  # one line of many blocks
        (1000, 250),  # a quarter
        (1000, 999),  # all but one
        (37, 10),  # one block exactly
        (38, 37),  # a second block of one line
    ],
)
def test_exact_size_in_order_pairs_aligned(
    tmp_path: Path, small_blocks: None, lines: int, size: int
) -> None:
    pairs, stats = run_sample(tmp_path, corpus(tmp_path / "in", lines), "out", size=size, seed=3)
    assert len(pairs) == size
    kept = numbers(pairs)
    assert kept == sorted(set(kept))  # corpus order, no line twice
    assert all(pair[1] == f"ja {n}" for pair, n in zip(pairs, kept, strict=True))
    assert stats["lines_in"] == lines and stats["lines_out"] == size
    assert stats["kept_whole"] == 0


def test_same_seed_same_sample_other_seed_other(tmp_path: Path, small_blocks: None) -> None:
    source = corpus(tmp_path / "in", 500)
    first, _ = run_sample(tmp_path, source, "a", size=100, seed=7)
    again, _ = run_sample(tmp_path, source, "b", size=100, seed=7)
    other, _ = run_sample(tmp_path, source, "c", size=100, seed=8)
    assert first == again
    assert first != other


@pytest.mark.parametrize("size", [300, 301])
def test_fewer_lines_than_size_keeps_all(tmp_path: Path, small_blocks: None, size: int) -> None:
    pairs, stats = run_sample(tmp_path, corpus(tmp_path / "in", 300), "out", size=size)
    assert numbers(pairs) == list(range(300))
    assert stats["lines_in"] == 300 and stats["lines_out"] == 300 and stats["kept_whole"] == 1


def test_monolingual_corpus(tmp_path: Path, small_blocks: None) -> None:
    pairs, _ = run_sample(tmp_path, corpus(tmp_path / "in", 200, ("zh",)), "out", size=50)
    assert len(pairs) == 50 and all(len(pair) == 1 for pair in pairs)


def test_uniform_over_lines_and_blocks(tmp_path: Path, small_blocks: None) -> None:
    """Over 200 seeds, each of 100 lines (three blocks of 37 and one of 29) is kept about
    size / lines = 30 % of the time: every count within 5 standard deviations of 60."""
    source = corpus(tmp_path / "in", 100, ("en",))
    hits = np.zeros(100)
    for seed in range(200):
        pairs, _ = run_sample(tmp_path, source, f"s{seed}", size=30, seed=seed)
        hits[numbers(pairs)] += 1
    sd = (200 * 0.3 * 0.7) ** 0.5
    assert np.all(np.abs(hits - 60) < 5 * sd)
    # the blocks' shares too (a bias between blocks would show here first)
    per_block = [hits[i : i + 37].sum() / len(hits[i : i + 37]) for i in (0, 37, 74)]
    assert all(abs(share - 60) < 8 for share in per_block)


@pytest.mark.parametrize(
    ("need", "left", "block"),
    [
        (1_200_000_000, 1_400_000_000, 100_000),  # past numpy's hypergeometric limit
        (5, 2_000_000_000, 100_000),  # few needed of billions
        (100_000, 2_000_000_000, 100_000),
        (1_999_950_000, 2_000_000_000, 100_000),  # nearly all: at least 50,000 kept here
    ],
)
def test_block_count_beyond_a_billion_stays_in_bounds(need: int, left: int, block: int) -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        kept = block_count(rng, need, left, block)
        assert max(0, block - (left - need)) <= kept <= min(block, need)
    mean = np.mean([block_count(rng, need, left, block) for _ in range(200)])
    assert abs(mean - block * need / left) < 5 * (block * need / left) ** 0.5 + 1


def test_block_count_last_block_takes_what_is_needed() -> None:
    rng = np.random.default_rng(1)
    assert block_count(rng, 10, 10, 10) == 10
    assert block_count(rng, 1_500_000_000, 1_500_000_000, 100_000) == 100_000
    assert block_count(rng, 0, 10**10, 100_000) == 0


def test_volume_is_the_size_or_the_smaller_input() -> None:
    step = SampleStep.from_dict({"size": 1000})
    assert step.volume({"corpus": None}) == {"lines": 1000.0}
    assert step.volume({"corpus": 400.0}) == {"lines": 400.0}
