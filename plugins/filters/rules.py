"""Rule filters on each side of a pair (NT5 WMT22 §3.2, Yishu WMT23 §2.1.1, HW-TSC WMT22
§2.2), each paper's number as the default: array code over a shard (one regex pass over the
whole column, or a lookup table over its code points). The rules that compare the two sides
are in :mod:`mtcore_plugins.filters.agreement`."""

from __future__ import annotations

import html.entities
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from mtcore.api import Filter, Pair, PluginConfig, TextBlock, TextColumn, worker_memo
from mtcore.api.engine import line_of_offsets
from mtcore_plugins.common.text.tokens import count_tokens, segmenter_lang
from mtcore_plugins.filters._array import ArrayFilter


def matches_per_line(column: TextColumn, pattern: re.Pattern[str]) -> np.ndarray:
    """Number of matches of ``pattern`` in each line (the pattern must not match ``\\n``)."""
    starts = [m.start() for m in pattern.finditer(column.text)]
    if not starts:
        return np.zeros(column.count, dtype=np.int64)
    rows = line_of_offsets(column.starts, np.asarray(starts, dtype=np.int64))
    return np.bincount(rows, minlength=column.count).astype(np.int64)


def per_side(block: TextBlock, fn: Any) -> np.ndarray:
    """(pairs, sides) array of ``fn(column)`` for every column."""
    if not block.columns:
        return np.zeros((0, 0), dtype=np.int64)
    return np.stack([fn(c) for c in block.columns], axis=1)


def none_above(scores: Any, limit: float) -> np.ndarray:
    """Pairs whose every side scores at most ``limit``."""
    values = np.asarray(scores, dtype=np.float64)
    return np.asarray((values.reshape(len(values), -1) <= limit).all(axis=1))


# --- identical ------------------------------------------------------------------------------

_NOT_WORD = re.compile(r"[\W_]+")


def comparable(text: str) -> str:
    """NFKC, case-folded, without whitespace or punctuation; the text itself when nothing is
    left (so that two different punctuation-only sides are not called identical)."""
    key = _NOT_WORD.sub("", unicodedata.normalize("NFKC", text).casefold())
    return key or text


class IdenticalConfig(PluginConfig):
    normalize: bool = Field(
        False, description="compare after NFKC, case-folding and removing spaces/punctuation"
    )


class IdenticalFilter(Filter[IdenticalConfig]):
    """Source equal to target (NT5 §3.2: identical source and target removed). Score: 1 when
    two sides are equal, else 0."""

    name = "identical"

    def score(self, batch: Sequence[Pair]) -> list[int]:
        if self.config.normalize:
            return [int(len({comparable(s) for s in pair}) < len(pair)) for pair in batch]
        return [int(len(set(pair)) < len(pair)) for pair in batch]

    def accept(self, score: int) -> bool:
        return score == 0

    def accept_block(self, scores: Any) -> np.ndarray:
        return np.asarray(scores, dtype=np.int64) == 0


# --- empty ----------------------------------------------------------------------------------


class EmptyConfig(PluginConfig):
    pass


class EmptyFilter(ArrayFilter[EmptyConfig]):
    """A side that is empty or whitespace only (Yishu §2.1.1: "remove empty sentences").
    Score per side: 1 when empty."""

    name = "empty"

    def score_block(self, block: TextBlock) -> np.ndarray:
        def empty(column: TextColumn) -> np.ndarray:
            lines = column.lines
            return np.fromiter((not line or line.isspace() for line in lines), np.int8, len(lines))

        return per_side(block, empty)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return none_above(scores, 0)


# --- invalid unicode ------------------------------------------------------------------------


def invalid_table(private_use: bool) -> np.ndarray:
    """A bool per code point: U+FFFD, unassigned (non-characters included), surrogates, C0/C1
    controls other than tab and, when ``private_use``, private-use code points. Built once per
    worker from the ``regex`` module's Unicode tables (newer than ``unicodedata``'s)."""

    def build() -> np.ndarray:
        import regex

        everything = "".join(map(chr, range(0x110000)))
        classes = r"\p{Cn}\p{Cs}\p{Cc}\uFFFD" + (r"\p{Co}" if private_use else "")
        table = np.zeros(0x110000, dtype=bool)
        for m in regex.finditer(f"[{classes}]+", everything):
            table[m.start() : m.end()] = True
        table[ord("\t")] = False
        table[ord("\n")] = False  # the block's line separator, never inside a line
        return table

    table: np.ndarray = worker_memo(("invalid unicode", private_use), build)
    return table


class InvalidUnicodeConfig(PluginConfig):
    private_use: bool = Field(True, description="count private-use code points as invalid")


class InvalidUnicodeFilter(ArrayFilter[InvalidUnicodeConfig]):
    """Invalid Unicode characters (NT5 §3.2). Score per side: how many; accept when none."""

    name = "invalid_unicode"
    higher_is_better = False

    def score_block(self, block: TextBlock) -> np.ndarray:
        table = invalid_table(self.config.private_use)
        return per_side(block, lambda c: c.count_in(table[c.codes]))

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return none_above(scores, 0)


# --- average word length --------------------------------------------------------------------


class AverageWordLengthConfig(PluginConfig):
    # NT5 §3.2: "ratio between word and character count is greater than 12" removed; words
    # never outnumber characters, so the ratio is characters per word.
    max_ratio: float = Field(12.0, gt=0, le=10_000, description="largest characters/word kept")
    unit: Literal["token", "word"] = Field(
        "token",
        description="token: MeCab words for Japanese and jieba words for Chinese (NT5 §3.2 "
        "tokenized Japanese with MeCab), whitespace words elsewhere; word: whitespace only",
    )


class AverageWordLengthFilter(ArrayFilter[AverageWordLengthConfig]):
    """Score per side: non-space characters per word (0 without words)."""

    name = "avg_word_length"
    higher_is_better = False

    def whole_blocks(self) -> bool:
        # Segmenting is Python per line: then score only the pairs still alive.
        return self.config.unit == "word" or not any(map(segmenter_lang, self.langs))

    def _ratio(self, column: TextColumn, lang: str) -> np.ndarray:
        chars = column.count_in(~column.is_space)
        if self.config.unit == "token" and segmenter_lang(lang):
            words = count_tokens(column.lines, lang)
        else:
            words = column.word_count
        out = np.zeros(column.count, dtype=np.float64)
        np.divide(chars, words, out=out, where=words > 0)
        return out

    def score_block(self, block: TextBlock) -> np.ndarray:
        if not block.columns:
            return np.zeros((0, 0))
        sides = zip(block.columns, block.langs, strict=True)
        return np.stack([self._ratio(c, lang) for c, lang in sides], axis=1)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return none_above(scores, self.config.max_ratio)


# --- escaped html ---------------------------------------------------------------------------

_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|([A-Za-z][A-Za-z0-9]{1,31}));")
_ENTITY_NAMES = frozenset(name[:-1] for name in html.entities.html5 if name.endswith(";"))


def entities_per_line(column: TextColumn) -> np.ndarray:
    """Escaped HTML entities per line: numeric ones and named ones HTML5 defines."""
    starts = [
        m.start()
        for m in _ENTITY.finditer(column.text)
        if m.group(1) is None or m.group(1) in _ENTITY_NAMES
    ]
    if not starts:
        return np.zeros(column.count, dtype=np.int64)
    rows = line_of_offsets(column.starts, np.asarray(starts, dtype=np.int64))
    return np.bincount(rows, minlength=column.count).astype(np.int64)


class EscapedHtmlConfig(PluginConfig):
    max_entities: int = Field(0, ge=0, le=1000, description="most entities a side may hold")


class EscapedHtmlFilter(ArrayFilter[EscapedHtmlConfig]):
    """Escaped HTML characters (``&amp;``, ``&lt;``, ``&#39;``, ``&#x27;``, ``&nbsp;``; Yishu
    §2.1.1 "eliminate escaped HTML characters"). Score per side: the number of entities."""

    name = "escaped_html"
    higher_is_better = False

    def score_block(self, block: TextBlock) -> np.ndarray:
        return per_side(block, entities_per_line)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return none_above(scores, self.config.max_entities)


# --- character repetition -------------------------------------------------------------------


class CharRepetitionConfig(PluginConfig):
    # Yishu §2.1.1: one character repeated more than four times, two characters more than
    # three times, three characters more than twice.
    limits: dict[int, int] = Field(
        {1: 4, 2: 3, 3: 2},
        description="unit length in characters -> most consecutive occurrences of a unit kept",
    )
    ignore_digits: bool = Field(False, description="runs made of digits only (1000000) pass")
    words: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="most consecutive occurrences of one whitespace-separated word kept "
        "(the the the the the); none: no word rule",
    )

    @field_validator("limits")
    @classmethod
    def _check_limits(cls, value: dict[int, int]) -> dict[int, int]:
        if not value:
            raise ValueError("give at least one unit length")
        for unit, limit in value.items():
            if not 1 <= unit <= 20 or not 1 <= limit <= 1000:
                raise ValueError(f"unit {unit}: {limit} out of range (units 1..20, limits 1..1000)")
        return value


def repetition_pattern(
    limits: dict[int, int], ignore_digits: bool, words: int | None = None
) -> re.Pattern[str]:
    """One alternative per unit length ``n``: a unit of ``n`` characters followed by at least
    ``limit`` more copies of itself (so ``limit + 1`` occurrences in a row); with ``words``, one
    more: a whole word followed by at least ``words`` more copies, each after spaces or tabs."""
    parts = []
    group = 0
    for group, (unit, limit) in enumerate(sorted(limits.items()), start=1):
        guard = rf"(?=.{{0,{unit - 1}}}\D)" if ignore_digits else ""
        parts.append(rf"({guard}.{{{unit}}})\{group}{{{limit},}}")
    if words is not None:
        guard = r"(?!\d+(?!\S))" if ignore_digits else ""
        group += 1
        parts.append(rf"(?<!\S)({guard}\S+)(?:[^\S\n]+\{group}(?!\S)){{{words},}}")
    return re.compile("|".join(parts))


class CharRepetitionFilter(ArrayFilter[CharRepetitionConfig]):
    """Score per side: runs of repeated units beyond the limits; accept when none."""

    name = "char_repetition"
    higher_is_better = False

    def setup(self, langs: tuple[str, ...], resources: Any = None) -> None:
        super().setup(langs, resources)
        config = self.config
        self.pattern = repetition_pattern(config.limits, config.ignore_digits, config.words)

    def score_block(self, block: TextBlock) -> np.ndarray:
        return per_side(block, lambda c: matches_per_line(c, self.pattern))

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return none_above(scores, 0)


# --- markup ---------------------------------------------------------------------------------

# HW-TSC §2.2 processes "XML content" (details in Wei et al. 2021). Markup here is: an
# XML/HTML start, end or empty-element tag whose name starts with a letter; a comment,
# CDATA section, declaration or processing instruction; MediaWiki templates ``{{...}}``,
# links ``[[...]]``, table delimiters ``{|``/``|}`` and bold/italic quote runs ``'''``.
_TAG = r"</?[A-Za-z][\w:.-]*(?:[^\S\n]+[^<>\n]*?)?[^\S\n]*/?>"
_XML_OTHER = r"<!--|-->|<!\[CDATA\[|<![A-Za-z]|<\?[A-Za-z]"
_WIKI = r"\{\{|\}\}|\[\[[^\]\n]*\]\]|\{\||\|\}|'''"


class MarkupConfig(PluginConfig):
    tags: bool = Field(True, description="XML/HTML tags, comments, CDATA, declarations")
    wiki: bool = Field(True, description="wiki/template markup: {{...}}, [[...]], {|, '''")
    max_entities: int = Field(
        2,
        ge=0,
        le=1000,
        description="a side with more escaped entities than this is entity-encoded markup",
    )


class MarkupFilter(ArrayFilter[MarkupConfig]):
    """Score per side: markup constructs found (entities count only beyond
    ``max_entities``); accept when no side has any."""

    name = "markup"
    higher_is_better = False

    def setup(self, langs: tuple[str, ...], resources: Any = None) -> None:
        super().setup(langs, resources)
        parts = ([_TAG, _XML_OTHER] if self.config.tags else []) + (
            [_WIKI] if self.config.wiki else []
        )
        self.pattern = re.compile("|".join(parts)) if parts else None

    def _side(self, column: TextColumn) -> np.ndarray:
        entities = entities_per_line(column)
        found = np.where(entities > self.config.max_entities, entities, 0)
        if self.pattern is not None:
            found += matches_per_line(column, self.pattern)
        return found

    def score_block(self, block: TextBlock) -> np.ndarray:
        return per_side(block, self._side)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return none_above(scores, 0)


__all__ = [
    "AverageWordLengthFilter",
    "CharRepetitionFilter",
    "EmptyFilter",
    "EscapedHtmlFilter",
    "IdenticalFilter",
    "InvalidUnicodeFilter",
    "MarkupFilter",
]
