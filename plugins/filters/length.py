"""Segment length bounds on every side (NT5 §3.2: more than 500 characters or more than 150
words removed; Yishu §2.1.1: more than 150 or fewer than 5 tokens; Xiaomi §2.2.1: more than 50
tokens). OpusFilter's ``LengthFilter`` semantics: bounds inclusive, every side checked."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from mtcore.api import PluginConfig, TextBlock, TextColumn
from mtcore_plugins.common.text.tokens import count_tokens, segmenter_lang
from mtcore_plugins.filters._array import ArrayFilter

Unit = Literal["char", "word", "token"]


def column_lengths(column: TextColumn, lang: str, unit: str) -> np.ndarray:
    """``char``: ``len(line)``; ``word``: ``len(line.split())``; ``token``: words of a real
    segmenter for Japanese (MeCab with the IPA dictionary, as NT5 §3.2) and Chinese (jieba),
    else ``word``."""
    if unit == "char":
        return column.char_len
    if unit == "token" and segmenter_lang(lang) in ("ja", "zh"):
        return np.asarray(count_tokens(column.lines, lang), dtype=np.int64)
    return column.word_count


def needs_segmenter(unit: str, langs: tuple[str, ...]) -> bool:
    """Token counts of Japanese or Chinese run a segmenter per line (Python, not arrays)."""
    return unit == "token" and any(segmenter_lang(lang) in ("ja", "zh") for lang in langs)


def block_lengths(block: TextBlock, unit: str) -> np.ndarray:
    """(pairs, sides) lengths."""
    if not block.columns:
        return np.zeros((0, 0), dtype=np.int64)
    return np.stack(
        [column_lengths(c, lang, unit) for c, lang in zip(block.columns, block.langs, strict=True)],
        axis=1,
    )


class LengthConfig(PluginConfig):
    unit: Unit = Field("char", description="what a length counts: char, word or token")
    min_length: int = Field(1, ge=0, le=100_000, description="shortest side kept (inclusive)")
    max_length: int = Field(500, ge=1, le=10_000_000, description="longest side kept (inclusive)")


class LengthFilter(ArrayFilter[LengthConfig]):
    """Score: the length of each side; accept when every side is within [min, max]."""

    name = "length"
    higher_is_better = None

    def whole_blocks(self) -> bool:
        # Segmenting is Python per line: score only the pairs still alive.
        return not needs_segmenter(self.config.unit, self.langs)

    def score_block(self, block: TextBlock) -> np.ndarray:
        return block_lengths(block, self.config.unit)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        scores = np.asarray(scores).reshape(len(scores), -1)
        inside = (scores >= self.config.min_length) & (scores <= self.config.max_length)
        return inside.all(axis=1)
