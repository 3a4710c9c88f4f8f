"""Input noise for noised self-training (He et al. 2019; HW-TSC §3.4): word drop, blanking and
local shuffle of the source side.

HW-TSC §3.4 adopts He et al.'s "Noised ST" without giving its settings. The drop and blank
defaults are those of He et al.'s released code (jxhe/self-training-text-generation,
``paraphrase.py``: word dropout 0.2, word blank 0.2), which applies Lample et al. (2018,
§2.3)'s noise in the order kept here: shuffle, then drop, then blank. Their code passes its
word shuffle 3 as Lample's alpha (a word moves fewer than 3 places); ``shuffle`` here is
Lample's bound k itself, default k = 3 (Lample et al. §2.3).

A unit is what the noise drops, blanks and moves. Unset, it follows the language of the side:
the segmenter's words for Chinese and Japanese (jieba, MeCab), written back without spaces;
characters for the other scripts written without spaces between words (Thai, Lao, Khmer,
Burmese, Tibetan, Dzongkha); whitespace words elsewhere. Whitespace words of an unsegmented
line are the whole line, which the noise can only blank (the ``augment`` step fails on that).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import Field

from mtcore.api import Augmenter
from mtcore_plugins.augmenters.base import SeededConfig, line_rng
from mtcore_plugins.common.text import langcodes
from mtcore_plugins.common.text.augmenting import CountsLines, EmitsTokens
from mtcore_plugins.common.text.tags import TOKEN_PATTERN
from mtcore_plugins.common.text.tokens import join_tokens, segmenter_lang, tokens

Unit = Literal["word", "char", "token"]
CHAR_LANGS = frozenset({"th", "lo", "km", "my", "bo", "dz"})
"""Scripts written without spaces between words for which no segmenter is installed."""


def unit_for(lang: str) -> Unit:
    """The unit noise uses on ``lang`` when none is set."""
    if segmenter_lang(lang):
        return "token"
    return "char" if langcodes.iso1(lang) in CHAR_LANGS else "word"


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
    unit: Unit | None = Field(
        None,
        description="word: whitespace-separated words, rejoined with single spaces; char: "
        "characters, rejoined without spaces; token: the language's segmenter (jieba, MeCab; "
        "whitespace elsewhere), rejoined without spaces in Chinese and Japanese; unset: token "
        "for zh and ja, char for th, lo, km, my, bo and dz, word otherwise",
    )


class NoiseAugmenter(CountsLines, EmitsTokens, Augmenter[NoiseConfig]):
    """Noises each non-empty line with a generator seeded by (seed, line number). A line that
    ends up unchanged is returned byte for byte (its spacing kept); a line never loses every
    unit (He et al.'s code keeps one at random). Counts per call: ``lines`` (non-empty),
    ``single`` (of one unit), ``units``, ``dropped``, ``blanked`` (units), ``shuffled``,
    ``blanked_lines``, ``bare`` (every unit left blanked) and ``changed`` lines."""

    name = "noise"

    def emitted(self) -> frozenset[str]:
        return frozenset({self.config.blank_token}) if self.config.blank else frozenset()

    def augment(self, lines: Sequence[str], lang: str, first_line: int) -> list[str]:
        c = self.config
        if c.drop == 0.0 and c.blank == 0.0 and c.shuffle == 0:
            return list(lines)
        unit = c.unit or unit_for(lang)
        counts = self.counter()
        return [
            self._noise_line(line, first_line + i, unit, lang, counts)
            for i, line in enumerate(lines)
        ]

    def _noise_line(
        self, line: str, number: int, unit: Unit, lang: str, counts: Counter[str]
    ) -> str:
        c = self.config
        units = split_units(line, unit, lang)
        if not units:
            return line
        counts.update(lines=1, units=len(units), single=len(units) == 1)
        rng = line_rng(c.seed, number)
        noised = local_shuffle(units, c.shuffle, rng.random) if c.shuffle else list(units)
        counts["shuffled"] += noised != units
        if c.drop:
            kept = [u for u in noised if rng.random() >= c.drop]
            noised = kept or [noised[int(rng.random() * len(noised))]]
            counts["dropped"] += len(units) - len(noised)
        if c.blank:
            noised = [c.blank_token if rng.random() < c.blank else u for u in noised]
            blanked = noised.count(c.blank_token) - units.count(c.blank_token)
            counts.update(blanked=blanked, blanked_lines=blanked > 0)
            counts["bare"] += all(u == c.blank_token for u in noised)
        if noised == units:
            return line
        counts["changed"] += 1
        return join_units(noised, unit, lang, c.blank_token)


def split_units(line: str, unit: Unit, lang: str) -> list[str]:
    if unit == "word":
        return line.split()
    return tokens(line, lang) if unit == "token" else list(line)


def join_units(units: list[str], unit: Unit, lang: str, blank: str) -> str:
    if unit == "word":
        return " ".join(units)
    return join_tokens(units, lang, frozenset({blank})) if unit == "token" else "".join(units)


def local_shuffle(units: list[str], k: int, uniform: Callable[[], float]) -> list[str]:
    """Lample et al. (2018) §2.3: sort by ``i + (k + 1) * uniform()`` (``uniform`` in [0, 1));
    no unit moves more than ``k`` positions (a unit ``j > i + k`` has a key of at least
    ``i + k + 1``, above any key of ``i``)."""
    keys = [i + uniform() * (k + 1) for i in range(len(units))]
    order = sorted(range(len(units)), key=keys.__getitem__)
    return [units[i] for i in order]
