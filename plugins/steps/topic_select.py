"""Test-set-related selection (Yishu §2.2.2): training pairs whose source shares topic n-grams
or rare words with the test-set source, for in-domain fine-tuning.

The older spelling of the ``selection`` step with ``selector: {name: topic, ...}`` and its
``top_k``/``top_fraction``, which it runs (``_selector_run.SelectorRun``; the reading of the
paper is written out in :mod:`mtcore_plugins.common.similarity.topic`); it keeps its settings,
and so its hash. Outputs the selected pairs, a score table aligned with the input (columns
``topic.score`` and ``topic.terms``) for ``select`` and reports, and the topic terms with their
document frequencies.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field, model_validator

from mtcore.api import Selector, Step, StepContext
from mtcore.api.engine import Budget
from mtcore_plugins.common.similarity.topic import TopicConfig
from mtcore_plugins.steps._scores import write_scores
from mtcore_plugins.steps._selector_run import SelectorRun


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


class TopicSelectStep(SelectorRun, Step[TopicSelectConfig]):
    """Outputs ``corpus`` (related pairs, corpus order), ``scores`` (one row per input pair:
    shared TF-IDF weight and number of shared topic terms), ``terms/terms.tsv`` (each topic
    term with its document frequency and idf) and ``rejects`` (the first pairs each cut
    dropped, with their scores)."""

    name = "topic_select"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "test": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "scores", "terms", "rejects")

    def selector_entry(self) -> dict[str, Any]:
        settings = self.config.model_dump(exclude={"top_k", "top_fraction"})
        return {"name": "topic", **settings}

    def budget(self) -> Budget:
        return Budget(top_k=self.config.top_k, top_fraction=self.config.top_fraction)

    def write(
        self, ctx: StepContext, selector: Selector, keep: np.ndarray, scores: np.ndarray
    ) -> None:
        found, shared = selector.terms, selector.shared  # type: ignore[attr-defined]
        table = np.column_stack([scores, shared.astype(np.float64)])
        write_scores(ctx.output("scores"), ["topic.score", "topic.terms"], table)
        found.write(ctx.output("terms"))
        ctx.stats.add("topic_terms", int(found.topic.sum()))
        ctx.stats.add("pairs_related", int(selector.related.sum()))  # type: ignore[attr-defined]
