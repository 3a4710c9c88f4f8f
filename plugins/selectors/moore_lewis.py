"""Moore-Lewis selection (Moore and Lewis 2010; NT5 §3.3 keeps "the top 20,000 scored
sentences"): the cross-entropy difference ``H_in(s) - H_gen(s)`` per token under two KenLM
models, lower is better.

The score is the ``moore_lewis`` filter's (:mod:`mtcore_plugins.common.lm.moore_lewis`); the two
models come from ``kenlm`` steps connected to the selecting step under the roles ``in_domain``
and ``general`` name. NT5 §3.3 as one step: ``selector: {name: moore_lewis, side: target}``
with ``top_k: 20000``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from pydantic import Field

from mtcore.api import Corpus, Pair, Selector, StepContext
from mtcore_plugins.common.lm.moore_lewis import CrossEntropyConfig, CrossEntropyDifference
from mtcore_plugins.selectors._shards import score_pool


class MooreLewisSelectorConfig(CrossEntropyConfig):
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pool pairs per task")


class MooreLewisSelector(Selector[MooreLewisSelectorConfig]):
    """Score: H_in - H_gen per token (log10), summed over the chosen sides; lower is better."""

    name = "moore_lewis"
    higher_is_better = False

    def roles(self) -> tuple[str, ...]:
        return (self.config.in_domain, self.config.general)

    def fit(self, ctx: StepContext, pool: Corpus, inputs: Mapping[str, Path]) -> None:
        folders = {role: self.resource(inputs, role) for role in self.roles()}
        self.difference = CrossEntropyDifference(
            self.config, pool.langs, folders, "selector 'moore_lewis'"
        )

    def score(self, ctx: StepContext, pool: Corpus) -> np.ndarray:
        return score_pool(
            ctx, pool, _differences, self.difference, self.config.shard_size, "moore_lewis"
        )


def _differences(difference: CrossEntropyDifference, pairs: Sequence[Pair]) -> list[float]:
    return difference.scores(pairs)
