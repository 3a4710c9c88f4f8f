"""What the built-in augmenters share. The contract itself is
:class:`mtcore.contracts.plugin.Augmenter`:
an augmenter receives a shard of one side (the source side, say) with the corpus line number of
its first line and returns one line per input line, in order, its randomness a function of its
seed and the line number alone (:func:`line_rng`). Augmenters are chained by the ``augment``
step; the steps that make synthetic pairs (``synthetic``) and mix corpora (``mix``) need no
plugin.
"""

from __future__ import annotations

import random

from pydantic import Field

from mtcore.api import Augmenter, PluginConfig
from mtcore_plugins.common.text.tags import TOKEN_PATTERN

__all__ = ["TOKEN_PATTERN", "Augmenter", "SeededConfig", "line_rng"]


class SeededConfig(PluginConfig):
    seed: int = Field(1, ge=0, le=2**31 - 1, description="seed of the per-line random choices")


def line_rng(seed: int, line: int) -> random.Random:
    """The random generator of one corpus line: a function of ``seed`` and the 1-based line
    number only (distinct for every pair of them below 2**48 lines), so a line is noised the
    same way in any shard. ``random.Random`` seeded with an int is stable across Python
    versions and platforms, unlike ``hash``."""
    return random.Random((seed << 48) | line)
