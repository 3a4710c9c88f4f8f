"""Removes training pairs that overlap held-out sets (dev/test), so that scores on them stay
honest: a pair whose source equals a held-out source or whose target equals a held-out target
is dropped. The held-out corpora are the clean step's extra inputs, named in ``sets``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from mtcore.api import Corpus, PluginConfig, PluginError, TextBlock
from mtcore_plugins.common.text.keys import normalize_text
from mtcore_plugins.filters._array import ArrayFilter


class OverlapConfig(PluginConfig):
    sets: list[str] = Field(
        min_length=1, description="the step's input roles holding held-out corpora (dev, test)"
    )
    match: Literal["either", "source", "target", "pair"] = Field(
        "either",
        description="either: a side equal to the same side of a held-out pair; pair: both",
    )
    normalize: bool = Field(False, description="compare case-folded text, whitespace collapsed")


class OverlapFilter(ArrayFilter[OverlapConfig]):
    """Score per side: 1 when that side occurs on the same side of a held-out set."""

    name = "overlap"
    higher_is_better = False
    vectorized = False

    def setup(self, langs: tuple[str, ...], resources: Mapping[str, Path] | None = None) -> None:
        super().setup(langs, resources)
        self.held: list[set[str]] = [set() for _ in langs]
        self.held_pairs: set[tuple[str, ...]] = set()
        for role in self.config.sets:
            corpus = Corpus.open(self.resource(role))
            if set(corpus.langs) != set(langs):
                raise PluginError(
                    f"overlap: held-out set {role!r} has languages {corpus.langs}, the corpus "
                    f"{langs}"
                )
            order = [corpus.langs.index(lang) for lang in langs]
            for pair in corpus:
                sides = tuple(self._norm(pair[i]) for i in order)
                self.held_pairs.add(sides)
                for i, text in enumerate(sides):
                    self.held[i].add(text)

    def _norm(self, text: str) -> str:
        return normalize_text(text) if self.config.normalize else text

    def score_block(self, block: TextBlock) -> np.ndarray:
        lines = [[self._norm(t) for t in c.lines] for c in block.columns]
        out = np.zeros((len(block), len(self.langs)), dtype=np.int8)
        for side, texts in enumerate(lines):
            out[:, side] = [t in self.held[side] for t in texts]
        if self.config.match == "pair":
            both = [tuple(p) in self.held_pairs for p in zip(*lines, strict=True)]
            out[:] = np.asarray(both, dtype=np.int8)[:, None]
        return out

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        scores = np.asarray(scores).reshape(len(scores), -1)
        match = self.config.match
        if match == "source":
            return scores[:, 0] == 0
        if match == "target":
            return scores[:, -1] == 0
        return np.asarray(~scores.any(axis=1))
