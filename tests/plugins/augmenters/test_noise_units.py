"""Noise on unsegmented Chinese and Japanese (WMT22's real test sources): a unit chosen by the
language, the augment step's collapse check (the old ``unit: word`` on Chinese fails with its
counts), and the recipe check that a vocabulary keeps every tag written upstream whole."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from mtcore.contracts.errors import RecipeError, StepError
from mtcore.contracts.registry import Registry
from mtcore.recipe.load import build_recipe
from mtcore_plugins.augmenters.noise import NoiseAugmenter, NoiseConfig, unit_for
from mtcore_plugins.common.text.tokens import join_tokens, tokens
from mtcore_plugins.steps._binarize_pieces import tagged
from mtcore_plugins.steps.augment import AugmentConfig, AugmentStep
from tests.plugins.augmenters.test_augmentation import read_corpus, run_step, write_corpus
from tests.support.data import SHARED

SOURCES = {
    "zh": SHARED
    / "zh-en/wmt-conference+wmt22-news-systems/txt/sources/generaltest2022.zh-en.src.zh",
    "ja": SHARED
    / "ja-en/wmt-conference+wmt22-news-systems/txt/sources/generaltest2022.ja-en.src.ja",
}
CJK_SPACE_CJK = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff] [\u3040-\u30ff\u4e00-\u9fff]")


def source_lines(lang: str, n: int) -> list[str]:
    """The first ``n`` non-empty lines of WMT22's ``lang`` test source."""
    path = SOURCES[lang]
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"real data not found at {path}")
        pytest.skip(f"real data not found at {path}")
    lines = [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    return lines[:n]


@pytest.mark.parametrize(
    ("lang", "unit"),
    [
        ("zh", "token"),  # jieba's words
        ("zh-Hans", "token"),  # any spelling of Chinese
        ("ja", "token"),  # MeCab's words
        ("th", "char"),  # no segmenter installed: characters
        ("en", "word"),  # whitespace words
        ("ru", "word"),
    ],
)
def test_unit_follows_the_language(lang: str, unit: str) -> None:
    assert unit_for(lang) == unit


@pytest.mark.parametrize("lang", ["zh", "ja"])
def test_unset_unit_noises_segmenter_words_and_writes_no_spaces(lang: str) -> None:
    lines = source_lines(lang, 600)
    noise = NoiseAugmenter(NoiseConfig())
    out = noise.augment(lines, lang, 1)
    counts = noise.take_counts()
    words = sum(len(tokens(line, lang)) for line in lines)
    assert counts["lines"] == len(lines) and counts["units"] == words
    assert counts["single"] < 0.05 * len(lines)  # lines of several words: noise has work
    assert counts["changed"] > 0.9 * len(lines)
    assert 0.17 < counts["dropped"] / words < 0.23  # He et al.'s 0.2
    # blank 0.2 of the words left after dropping (0.8 of them)
    assert 0.13 < counts["blanked"] / words < 0.19
    assert counts["bare"] < 0.01 * len(lines)
    assert sum(o.count("<blank>") for o in out) == counts["blanked"]
    # written as the language is written: no space between two CJK characters
    assert not any(CJK_SPACE_CJK.search(o) for o in out)
    assert sum(o != line for o, line in zip(out, lines, strict=True)) == counts["changed"]


def test_join_tokens_spaces_only_between_non_cjk_words() -> None:
    assert join_tokens(["我", "在", "New", "York", "工作"], "zh") == "我在New York工作"
    assert join_tokens(["<blank>", "研究", "<blank>", "3", "km"], "zh") == "<blank>研究<blank> 3 km"
    glued = frozenset({"<blank>"})  # the blank token sits without spaces, as a CJK word does
    assert join_tokens(["<blank>", "<blank>", "3", "<blank>", "km"], "zh", glued) == (
        "<blank><blank>3<blank>km"
    )
    assert join_tokens(["New", "York"], "en") == "New York"


def noise_step(tmp_path: Path, registry: Registry, lang: str, **noise: Any) -> Any:
    lines = source_lines(lang, 300)
    corpus = write_corpus(tmp_path / "in", {lang: lines, "en": ["x"] * len(lines)})
    step = AugmentStep(AugmentConfig(side=lang, augmenters=[{"name": "noise", **noise}]))
    return run_step(step, tmp_path / "out", registry, corpus=corpus)


def test_the_old_word_unit_on_chinese_fails_with_its_counts(
    registry: Registry, tmp_path: Path
) -> None:
    with pytest.raises(StepError) as caught:
        noise_step(tmp_path, registry, "zh", unit="word")
    message = str(caught.value)
    assert message.startswith("step: augmenter 'noise' collapsed:")
    # most Chinese lines are one whitespace "word": blank can only make them a bare <blank>
    assert re.search(r"bare\.noise (\d+)", message) and "noise.single" in message
    bare = int(re.search(r"bare\.noise (\d+)", message).group(1))  # type: ignore[union-attr]
    assert bare > 0.1 * 300  # about a fifth of the lines: what the issue found


def test_the_step_records_the_noise_counts(registry: Registry, tmp_path: Path) -> None:
    ctx = noise_step(tmp_path, registry, "zh")
    stats = ctx.stats
    assert stats["seen.noise"] == stats["noise.lines"] == 300
    assert stats["changed.noise"] == stats["noise.changed"] > 270
    assert stats["noise.dropped"] > 0 and stats["noise.shuffled"] > 200
    assert stats["bare.noise"] == stats["noise.bare"] < 5
    out = read_corpus(tmp_path / "out" / "corpus")
    assert sum("<blank>" in line for line in out["zh"]) == stats["noise.blanked_lines"]


@pytest.mark.parametrize(
    ("noise", "limits", "why"),
    [
        # blanking nearly every word leaves lines that are only <blank>
        ({"blank": 0.95, "drop": 0.0}, {}, "lines are only its tokens"),
        # noise so light that it (almost) never changes a line
        ({"drop": 0.001, "blank": 0.0, "shuffle": 0}, {}, "it changed"),
        # whitespace words of Japanese: one unit a line, failed even with the other limits off
        ({"unit": "word"}, {"max_bare_share": 1.0, "min_changed_share": 0.0}, "are one unit"),
    ],
)
def test_collapse_check_fails(
    noise: dict[str, Any],
    limits: dict[str, float],
    why: str | None,
    registry: Registry,
    tmp_path: Path,
) -> None:
    lines = source_lines("ja", 300)
    corpus = write_corpus(tmp_path / "in", {"ja": lines})
    chain: list[dict[str, Any] | str] = [{"name": "noise", "unit": "char", **noise}]
    step = AugmentStep(AugmentConfig(side="ja", augmenters=chain, **limits))
    with pytest.raises(StepError, match=re.escape(why)):
        run_step(step, tmp_path / "out", registry, corpus=corpus)


class Pieces:
    """A stand-in processor: every word a piece with spm's word-start mark."""

    def pieces(self, lines: list[str]) -> list[list[str]]:
        return [[f"\u2581{word}" for word in line.split()] for line in lines]


def test_binarize_tags_stay_whole_anywhere_in_a_line() -> None:
    lines = ["<BT> a b", "a <blank> b <blank>", "a b", "<blank>"]
    assert tagged(Pieces(), lines, frozenset({"<BT>", "<blank>"})) == [  # type: ignore[arg-type]
        ["<BT>", "\u2581a", "\u2581b"],
        ["\u2581a", "<blank>", "\u2581b", "<blank>"],
        ["\u2581a", "\u2581b"],
        ["<blank>"],
    ]


def vocab_recipe(symbols: list[str], noise_tokens: str = "<blank>") -> dict[str, Any]:
    files = {"en": "a.en", "uk": "a.uk"}
    return {
        "name": "kept",
        "data": {"bitext": {"source": "local", "files": files}},
        "steps": {
            "spm": {"kind": "spm", "inputs": {"corpus": "bitext"}, "user_defined_symbols": symbols},
            "noised": {
                "kind": "augment",
                "inputs": {"corpus": "bitext"},
                "side": "en",
                "augmenters": ["tag", {"name": "noise", "blank_token": noise_tokens}],
            },
            "mixed": {"kind": "mix", "inputs": {"bitext": "bitext", "st": "noised"}},
            "bin": {
                "kind": "binarize",
                "inputs": {"train": "mixed", "valid": "bitext", "spm": "spm"},
                "src": "en",
                "tgt": "uk",
            },
        },
    }


def test_a_vocabulary_must_keep_every_token_written_upstream(registry: Registry) -> None:
    build_recipe(vocab_recipe(["<BT>", "<blank>"]), registry)  # both kept: valid
    with pytest.raises(RecipeError) as caught:
        build_recipe(vocab_recipe(["<BT>"]), registry)
    assert str(caught.value).count("steps.spm:") == 1
    assert (
        "steps.spm: the vocabulary does not keep '<blank>' whole, which step 'noised' writes "
        "into text that step 'bin' encodes with it"
    ) in str(caught.value)
    with pytest.raises(RecipeError, match="does not keep '<unk2>' whole"):
        build_recipe(vocab_recipe(["<BT>", "<blank>"], "<unk2>"), registry)
