"""Test-set-related selection (Yishu §2.2.2): training pairs whose source shares topic n-grams
or rare words with the test-set source, for in-domain fine-tuning.

The terms, their document frequencies and each pair's shared TF-IDF weight are the ``topic``
selector's (:mod:`mtcore_plugins.common.similarity.topic`, where the reading of the paper is written
out); ``top_k``/``top_fraction`` keep the best related pairs by score through the core's selection
budget. Outputs the selected pairs, a score table aligned with the input (columns ``topic.score``
and ``topic.terms``) for ``select`` and reports, and the topic terms with their document
frequencies.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field, model_validator

from mtcore.api import BlockReader, Corpus, CorpusWriter, Step, StepContext
from mtcore.api.engine import Budget
from mtcore_plugins.common.similarity.topic import TopicConfig, fit_terms, score_pairs
from mtcore_plugins.steps._scores import write_scores


class TopicSelectConfig(TopicConfig):
    top_k: int | None = Field(
        None, ge=1, description="then keep this many related pairs, best first"
    )
    top_fraction: float | None = Field(
        None, gt=0, le=1, description="then keep this fraction of the related pairs, best first"
    )

    @model_validator(mode="after")
    def _one(self) -> TopicSelectConfig:
        if self.top_k is not None and self.top_fraction is not None:
            raise ValueError("give at most one of top_k, top_fraction")
        return self


class TopicSelectStep(Step[TopicSelectConfig]):
    """Outputs ``corpus`` (related pairs, corpus order), ``scores`` (one row per input pair:
    shared TF-IDF weight and number of shared topic terms) and ``terms/terms.tsv`` (each topic
    term with its document frequency and idf)."""

    parallel = True  # its shards go through ctx.executor

    name = "topic_select"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "test": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "scores", "terms")

    def run(self, ctx: StepContext) -> None:
        config = self.config
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        test = Corpus.open(ctx.inputs["test"].path)
        lang = config.language(corpus, test, ctx.step_id)
        found = fit_terms(config, corpus, test, lang, ctx)
        scores, shared = score_pairs(config, corpus, found, ctx)
        related = shared >= config.min_terms
        budget = Budget(top_k=config.top_k, top_fraction=config.top_fraction)
        keep, _ = budget.cut(scores, True, related)
        self._write(ctx, corpus, keep, scores, shared)
        found.write(ctx.output("terms"))
        ctx.stats.add("pairs_in", found.total)
        ctx.stats.add("topic_terms", int(found.topic.sum()))
        ctx.stats.add("pairs_related", int(related.sum()))
        ctx.stats.add("pairs_out", int(keep.sum()))

    def _write(
        self,
        ctx: StepContext,
        corpus: Corpus,
        keep: np.ndarray,
        scores: np.ndarray,
        shared: np.ndarray,
    ) -> None:
        with CorpusWriter(ctx.output("corpus"), corpus.langs) as writer:
            start = 0
            for raw in BlockReader(corpus.files(), self.config.shard_size):
                mask = keep[start : start + raw.count]
                sides = [raw.kept_bytes(side, mask) for side in range(len(raw.raws))]
                writer.write_raw(sides, int(mask.sum()))
                start += raw.count
        table = np.column_stack([scores, shared.astype(np.float64)])
        write_scores(ctx.output("scores"), ["topic.score", "topic.terms"], table)
