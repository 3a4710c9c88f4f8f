"""The augmenter contract: rewrite one side of a corpus line by line, reproducibly.

An augmenter receives a shard of one side (the source side, say) with the corpus line number of
its first line and returns one line per input line, in order. Any randomness must come from the
augmenter's seed and the line number alone (:func:`line_rng`), never from the shard or the
process: the output is then the same whatever the shard size, the worker count or a resumed
run. Augmenters are chained by the ``augment`` step; the steps that make synthetic pairs
(``synthetic``) and mix corpora (``mix``) need no plugin.

The contract lives here until the core has an ``Augmenter`` base class of its own
(``mtcore.plugin``); it only needs :class:`mtcore.plugin.Plugin`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import Field

from mtcore.plugin import Plugin, PluginConfig

TOKEN_PATTERN = r"^\S{1,64}$"
"""A tag or placeholder token: one whitespace-free word (it must stay one word for the
tokenizer; see docs/augmentation.md on SentencePiece's ``user_defined_symbols``)."""


class SeededConfig(PluginConfig):
    seed: int = Field(1, ge=0, le=2**31 - 1, description="seed of the per-line random choices")


class Augmenter(Plugin):
    """``augment(lines, lang, first_line)`` returns a list as long as ``lines``; line ``i`` is
    corpus line ``first_line + i`` (1-based) of the side in language ``lang``."""

    def augment(self, lines: Sequence[str], lang: str, first_line: int) -> list[str]:
        raise NotImplementedError


def line_rng(seed: int, line: int) -> random.Random:
    """The random generator of one corpus line: a function of ``seed`` and the 1-based line
    number only (distinct for every pair of them below 2**48 lines), so a line is noised the
    same way in any shard. ``random.Random`` seeded with an int is stable across Python
    versions and platforms, unlike ``hash``."""
    return random.Random((seed << 48) | line)
