"""A data selector a recipe can name once this package is installed: ``vocab_overlap``, the
share of a pool pair's words (one side) that occur in an in-domain text, as simple domain
selectors of the cynical-selection family start from. Words are whitespace tokens, lowercased;
a pair with no words scores NaN (the engine ranks it last and no threshold keeps it).

    pick: {kind: selection, inputs: {corpus: pool, domain: dev},
           selector: {name: vocab_overlap, lang: en}, top_fraction: 0.1}
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from pydantic import Field

from mtcore.api import Corpus, DataError, PluginConfig, Selector, StepContext


class VocabOverlapConfig(PluginConfig):
    lang: str = Field(description="the language whose side is compared (in pool and domain)")
    domain: str = Field("domain", description="the step input holding the in-domain corpus")
    min_count: int = Field(1, ge=1, description="domain words seen fewer times are left out")


class VocabOverlapSelector(Selector[VocabOverlapConfig]):
    """Score: the share of the side's words found in the domain vocabulary, in [0, 1]."""

    name = "vocab_overlap"
    higher_is_better = True

    def roles(self) -> tuple[str, ...]:
        return (self.config.domain,)

    def fit(self, ctx: StepContext, pool: Corpus, inputs: Mapping[str, Path]) -> None:
        domain = Corpus.open(self.resource(inputs, self.config.domain))
        for corpus in (pool, domain):
            if self.config.lang not in corpus.langs:
                raise DataError(
                    f"selector 'vocab_overlap': {corpus.path} has no {self.config.lang!r} side "
                    f"(it has {list(corpus.langs)})"
                )
        side = domain.langs.index(self.config.lang)
        counts: dict[str, int] = {}
        for pair in domain:
            for word in pair[side].lower().split():
                counts[word] = counts.get(word, 0) + 1
        self.vocabulary = {w for w, n in counts.items() if n >= self.config.min_count}

    def score(self, ctx: StepContext, pool: Corpus) -> np.ndarray:
        side = pool.langs.index(self.config.lang)
        scores = []
        for pair in pool:
            words = pair[side].lower().split()
            found = sum(word in self.vocabulary for word in words)
            scores.append(found / len(words) if words else float("nan"))
        return np.asarray(scores, dtype=np.float64)
