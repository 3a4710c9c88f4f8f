"""Selects pairs of a corpus by the scores a ``score`` step wrote for it: a threshold, a top k,
a top fraction or a percentile band over one score column or a weighted sum of columns.

The cut is the core's selection budget (:class:`mtcore.api.Budget`, as the ``selection`` step
applies it to a selector's scores) over :func:`mtcore.chain.ranking.ranked_cut`, the one the clean
step's ``keep`` rules use:
ties at a top-k/fraction boundary go to the earlier pair, so counts are exact; a NaN score
(a pair a scorer could not score) fails every threshold and ranks last. Kept pairs are written
in corpus order, their bytes cut out of the input files unchanged.

Union of selections (NT5 §3.3 joins its Moore-Lewis and kNN selections): a ``concat`` of the
selected corpora followed by ``clean`` with ``dedup`` (``key: pair``) keeps the first
occurrence of every pair, which is the deduplicated union; no step of its own is needed.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from mtcore.api import Corpus, DataError, PluginConfig, Step, StepContext
from mtcore.api.engine import Budget, KeepSpec
from mtcore_plugins.steps._scores import (
    SCORES_FILE,
    read_scores,
    write_kept,
    write_rejects,
    write_scores,
)

BUDGET_FIELDS = ("threshold", "top_k", "top_fraction", "percentile")


class SelectConfig(PluginConfig):
    column: str | None = Field(
        None, min_length=1, description="score column to rank by (a header of the scores table)"
    )
    weights: dict[str, float] | None = Field(
        None,
        min_length=1,
        description="rank by the weighted sum of these columns instead of one `column`",
    )
    direction: Literal["higher", "lower"] = Field(
        description="which scores are better. Required: a score table holds raw filter scores, "
        "and for some filters (lm in combined mode: perplexity) lower is better although the "
        "filter ranks the other way"
    )
    threshold: float | None = Field(
        None,
        description="keep pairs scoring at least this (direction higher) or at most this "
        "(lower); applied before any rank rule",
    )
    top_k: int | None = Field(None, ge=1, description="keep this many pairs, best first")
    top_fraction: float | None = Field(
        None, gt=0, le=1, description="keep this fraction of the pairs, best first"
    )
    percentile: tuple[float, float] | None = Field(
        None, description="keep pairs whose score lies in this [low, high] percentile band"
    )

    @model_validator(mode="after")
    def _check(self) -> SelectConfig:
        if (self.column is None) == (self.weights is None):
            raise ValueError("give exactly one of column, weights")
        rules = [n for n in ("top_k", "top_fraction", "percentile") if getattr(self, n) is not None]
        if len(rules) > 1:
            raise ValueError(f"give at most one of top_k, top_fraction, percentile (got {rules})")
        if not rules and self.threshold is None:
            raise ValueError(
                "give a threshold, a rank rule (top_k, top_fraction, percentile), or both"
            )
        if rules:
            self.keep_spec()  # validates the percentile band
        return self

    def keep_spec(self) -> KeepSpec | None:
        values = {
            n: getattr(self, n)
            for n in ("top_k", "top_fraction", "percentile")
            if getattr(self, n) is not None
        }
        return KeepSpec.model_validate(values) if values else None


class SelectStep(Step[SelectConfig]):
    """Outputs ``corpus`` (the kept pairs, in corpus order), ``scores`` (their rows of the
    score table, same header) and ``rejects`` (the first pairs each cut dropped, with the
    score they were cut by: ``threshold.tsv``, ``rank.tsv`` as the clean step writes them).
    Counts ``pairs_in``, ``pairs_out``, ``dropped.threshold`` and ``dropped.rank``; the metric
    ``cut_score`` is the worst score kept."""

    name = "select"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "scores": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "scores", "rejects")

    def run(self, ctx: StepContext) -> None:
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        scores = ctx.inputs["scores"]
        if scores.type != "scores":
            raise DataError(
                f"{ctx.step_id}: input scores ({scores.path}) is not a score step's output "
                f"(artifact type {scores.type!r})"
            )
        header, table = read_scores(scores.path)
        total = corpus.count()
        if len(table) != total:
            raise DataError(
                f"{ctx.step_id}: {scores.path / SCORES_FILE} has {len(table)} rows but the corpus "
                f"{corpus.path} has {total} pairs: score the same corpus you select from"
            )
        keys = self.keys(header, table, ctx.step_id)
        keep, dropped = self.cut(keys, ctx)
        self._write(ctx, corpus, keep)
        write_rejects(ctx.output("rejects"), corpus, dropped, keys)
        write_scores(ctx.output("scores"), header, table[keep])
        ctx.stats.add("pairs_in", total)
        ctx.stats.add("pairs_out", int(keep.sum()))
        if keep.any():
            kept = keys[keep]
            worst = kept.min() if self.config.direction == "higher" else kept.max()
            ctx.metrics["cut_score"] = float(worst)

    def keys(self, header: list[str], table: np.ndarray, where: str) -> np.ndarray:
        """One number per pair: the chosen column or the weighted sum of columns."""
        weights = self.config.weights or {str(self.config.column): 1.0}
        missing = [c for c in weights if c not in header]
        if missing:
            raise DataError(
                f"{where}: score columns {missing} are not in the scores table (columns: "
                f"{', '.join(header)})"
            )
        keys = np.zeros(len(table))
        for column, weight in weights.items():
            keys += weight * table[:, header.index(column)]
        return keys

    def cut(self, keys: np.ndarray, ctx: StepContext) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Which pairs are kept, and which each cut dropped: the threshold first, then the
        rank rule on the survivors (the core's selection budget, as the selection step
        applies it)."""
        config = self.config
        budget = Budget.model_validate(config.model_dump(include=set(BUDGET_FIELDS)))
        keep, dropped = budget.cut_rows(keys, config.direction == "higher")
        for reason, rows in dropped.items():
            ctx.stats.add(reason, int(rows.sum()))
        return keep, dropped

    @staticmethod
    def _write(ctx: StepContext, corpus: Corpus, keep: np.ndarray) -> None:
        write_kept(ctx.output("corpus"), corpus, keep)
