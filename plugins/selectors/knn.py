"""Embedding nearest neighbours of a target-domain set (NT5 §3.3: "We searched for the nearest
4,000 sentences to the target domain using faiss").

The candidates are the pool pairs among the ``k`` nearest (cosine) of some sentence of the
domain set, connected under the role ``domain`` names; a candidate's score is its highest
cosine with a domain sentence, so ``top_k: 4000`` keeps NT5's 4,000 closest. The search is the
``knn_select`` step's (:mod:`mtcore_plugins.common.similarity.knn`): exact, sharded over the
executor, NumPy or faiss, ties to the earlier pair.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from pydantic import Field

from mtcore.api import Corpus, Selector, StepContext
from mtcore_plugins.common.similarity.knn import KnnConfig, best_cosines, domain_queries, search


class KnnSelectorConfig(KnnConfig):
    domain: str = Field(
        "domain",
        min_length=1,
        description="step input role connected to the target-domain sentences (a dev set)",
    )


class KnnSelector(Selector[KnnSelectorConfig]):
    """The k nearest pool pairs of each domain sentence, ranked by their best cosine.

    Candidates: the neighbours. Score: a candidate's highest cosine with a domain sentence
    (NaN for the other pairs); higher is better."""

    name = "knn"
    higher_is_better = True

    def roles(self) -> tuple[str, ...]:
        return (self.config.domain,)

    def fit(self, ctx: StepContext, pool: Corpus, inputs: Mapping[str, Path]) -> None:
        self.config.check_model_dir("selector 'knn'")
        domain = Corpus.open(self.resource(inputs, self.config.domain))
        self.lang, domain_lang = self.config.languages(pool, domain, ctx.step_id)
        self.queries = domain_queries(self.config, domain, domain_lang, ctx)

    def score(self, ctx: StepContext, pool: Corpus) -> np.ndarray:
        self.best, total = search(self.config, pool, self.lang, self.queries, ctx)
        scores, self.neighbours = best_cosines(self.best, total)
        return scores

    def candidates(self) -> np.ndarray:
        return self.neighbours
