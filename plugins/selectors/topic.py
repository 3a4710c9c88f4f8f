"""Test-set-related selection (Yishu §2.2.2): pool pairs whose source shares rare words or
n-grams (topic terms) with the test-set source, scored by the TF-IDF weight they share.

The terms and scores are the ``topic_select`` step's (:mod:`mtcore_plugins.common.similarity.topic`,
where the reading of the paper is written out). The candidates are the pairs sharing at least
``min_terms`` topic terms; a budget's ``top_k``/``top_fraction`` keeps the best of them. The test
set is connected under the role ``test`` names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from pydantic import Field

from mtcore.api import Corpus, Selector, StepContext
from mtcore_plugins.common.similarity.topic import TopicConfig, fit_terms, score_pairs


class TopicSelectorConfig(TopicConfig):
    test: str = Field("test", min_length=1, description="step input role connected to the test set")


class TopicSelector(Selector[TopicSelectorConfig]):
    """Pairs sharing the test set's rare terms, ranked by the TF-IDF weight they share.

    Candidates: pairs sharing at least ``min_terms`` topic terms with the test set. Score: the
    sum of ln(N / df) over the topic terms a pair shares; higher is better."""

    name = "topic"
    higher_is_better = True

    def roles(self) -> tuple[str, ...]:
        return (self.config.test,)

    def fit(self, ctx: StepContext, pool: Corpus, inputs: Mapping[str, Path]) -> None:
        test = Corpus.open(self.resource(inputs, self.config.test))
        lang = self.config.language(pool, test, ctx.step_id)
        self.terms = fit_terms(self.config, pool, test, lang, ctx)

    def score(self, ctx: StepContext, pool: Corpus) -> np.ndarray:
        scores, self.shared = score_pairs(self.config, pool, self.terms, ctx)
        self.related = self.shared >= self.config.min_terms
        return scores

    def candidates(self) -> np.ndarray:
        return self.related
