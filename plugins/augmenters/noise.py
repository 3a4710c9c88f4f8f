"""Input noise for noised self-training (He et al. 2019; HW-TSC §3.4): word drop, blanking and
local shuffle of the source side.

HW-TSC §3.4 adopts He et al.'s "Noised ST" without giving its settings. The drop and blank
defaults are those of He et al.'s released code (jxhe/self-training-text-generation,
``paraphrase.py``: word dropout 0.2, word blank 0.2), which applies Lample et al. (2018,
§2.3)'s noise in the order kept here: shuffle, then drop, then blank. Their code passes its
word shuffle 3 as Lample's alpha (a word moves fewer than 3 places); ``shuffle`` here is
Lample's bound k itself, default k = 3 (Lample et al. §2.3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import Field

from mtcore.api import Augmenter
from mtcore_plugins.augmenters.base import SeededConfig, line_rng
from mtcore_plugins.common.text.tags import TOKEN_PATTERN


class NoiseConfig(SeededConfig):
    drop: float = Field(
        0.2, ge=0.0, lt=1.0, description="probability of deleting each word (He et al.: 0.2)"
    )
    blank: float = Field(
        0.2,
        ge=0.0,
        lt=1.0,
        description="probability of replacing each remaining word by the blank token "
        "(He et al.: 0.2)",
    )
    shuffle: int = Field(
        3,
        ge=0,
        le=100,
        description="local shuffle: each word moves at most this many positions; 0 disables "
        "(Lample et al. 2018 §2.3: k = 3)",
    )
    blank_token: str = Field(
        "<blank>",
        pattern=TOKEN_PATTERN,
        description="what a blanked word becomes (He et al. use the vocabulary's <unk>); make it "
        "one SentencePiece piece with user_defined_symbols",
    )
    unit: Literal["word", "char"] = Field(
        "word",
        description="word: whitespace-separated words, rejoined with single spaces; char: "
        "characters (for unsegmented Japanese or Chinese), rejoined without spaces",
    )


class NoiseAugmenter(Augmenter[NoiseConfig]):
    """Noises each non-empty line with a generator seeded by (seed, line number). A line that
    ends up unchanged is returned byte for byte (its spacing kept); a line never loses every
    word (He et al.'s code keeps one at random)."""

    name = "noise"

    def augment(self, lines: Sequence[str], lang: str, first_line: int) -> list[str]:
        c = self.config
        if c.drop == 0.0 and c.blank == 0.0 and c.shuffle == 0:
            return list(lines)
        return [self.noise_line(line, first_line + i) for i, line in enumerate(lines)]

    def noise_line(self, line: str, number: int) -> str:
        c = self.config
        units = line.split() if c.unit == "word" else list(line)
        if not units:
            return line
        rng = line_rng(c.seed, number)
        noised = local_shuffle(units, c.shuffle, rng.random) if c.shuffle else list(units)
        if c.drop:
            kept = [u for u in noised if rng.random() >= c.drop]
            noised = kept or [noised[int(rng.random() * len(noised))]]
        if c.blank:
            noised = [c.blank_token if rng.random() < c.blank else u for u in noised]
        if noised == units:
            return line
        return " ".join(noised) if c.unit == "word" else "".join(noised)


def local_shuffle(units: list[str], k: int, uniform: Callable[[], float]) -> list[str]:
    """Lample et al. (2018) §2.3: sort by ``i + (k + 1) * uniform()`` (``uniform`` in [0, 1));
    no unit moves more than ``k`` positions (a unit ``j > i + k`` has a key of at least
    ``i + k + 1``, above any key of ``i``)."""
    keys = [i + uniform() * (k + 1) for i in range(len(units))]
    order = sorted(range(len(units)), key=keys.__getitem__)
    return [units[i] for i in order]
