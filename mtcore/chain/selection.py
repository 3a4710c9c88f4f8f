"""Data selection: the ``selectors`` plugin contract, the budget and the one selection engine.

A selector scores a candidate pool (a corpus), optionally against in-domain text or artifacts
other steps made (a domain set, a test set, language models), connected to the step under
input roles the selector names. It is fitted once per run (:meth:`Selector.fit`), then scores
every pair of the pool (:meth:`Selector.score`). The budget (:class:`Budget`) and the engine
(:func:`select_pool`) are the core's: a threshold, then a top k, a top fraction or a percentile
band, cut the way every ranked cut of mtcore is (:func:`mtcore.chain.ranking.ranked_cut`): ties at a
boundary go to the earlier pair, a NaN score fails every threshold and ranks last.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from pydantic import Field, model_validator

from mtcore.chain.ranking import KeepSpec, ranked_cut
from mtcore.contracts.errors import PluginError
from mtcore.contracts.kinds import connected_input
from mtcore.contracts.plugin import ConfigT, Plugin, PluginConfig

if TYPE_CHECKING:
    from mtcore.contracts.step import StepContext
    from mtcore.data.corpus import Corpus

RANK_RULES = ("top_k", "top_fraction", "percentile")


class Selector(Plugin[ConfigT], ABC):
    """Picks a subset of a pool by a score: Moore-Lewis, embedding kNN, topic, similarity.

    ``fit`` runs once per run, in the driver, before ``score``: it reads the step inputs the
    selector needs (``roles``; ``inputs`` maps each connected role to its artifact directory)
    and may read the pool too (document frequencies). ``score`` returns one float per pair of
    the pool, in corpus order; ``higher_is_better`` says which way it points, and NaN means the
    pair could not be scored (it fails every threshold and ranks last). Both receive the step's
    context: its executor spreads shards over workers (:func:`mtcore.exec.shards.map_shards`) and
    ``ctx.scratch`` holds resumable work.

    A selector whose method itself picks pairs before any budget (the k nearest neighbours of
    each domain sentence; pairs sharing enough topic terms) says which in ``candidates``; the
    budget then cuts among them.
    """

    higher_is_better: ClassVar[bool] = True

    def roles(self) -> tuple[str, ...]:
        """The step input roles ``fit`` reads, as the settings name them; none by default."""
        return ()

    def resource(self, inputs: Mapping[str, Path], role: str) -> Path:
        """The artifact directory connected to ``role``; a clear error when it is not."""
        return connected_input(inputs, role, f"selector {self.name!r}")

    @abstractmethod
    def fit(self, ctx: StepContext, pool: Corpus, inputs: Mapping[str, Path]) -> None:
        """Learns what scoring needs (embeds a domain set, loads model paths, counts terms)."""

    @abstractmethod
    def score(self, ctx: StepContext, pool: Corpus) -> np.ndarray:
        """One float per pair of ``pool``, in order (after ``fit``)."""

    def candidates(self) -> np.ndarray | None:
        """After ``score``: a boolean mask of the pairs the method itself selects before any
        budget; None (the default) makes every pair a candidate."""
        return None


class Budget(PluginConfig):
    """How much of a scored pool to keep: a ``threshold``, and/or one rank rule (``top_k``,
    ``top_fraction``, ``percentile``). With both, the threshold applies first and the rest is
    ranked; with neither, every candidate is kept."""

    threshold: float | None = Field(
        None,
        description="keep pairs scoring at least this (higher is better) or at most this "
        "(lower is better); applied before any rank rule",
    )
    top_k: int | None = Field(None, ge=1, description="keep this many pairs, best first")
    top_fraction: float | None = Field(
        None, gt=0, le=1, description="keep this fraction of the ranked pairs, best first"
    )
    percentile: tuple[float, float] | None = Field(
        None, description="keep pairs whose score lies in this [low, high] percentile band"
    )

    @model_validator(mode="after")
    def _one_rule(self) -> Budget:
        rules = [n for n in RANK_RULES if getattr(self, n) is not None]
        if len(rules) > 1:
            raise ValueError(f"give at most one of top_k, top_fraction, percentile (got {rules})")
        if rules:
            self.keep_spec()  # validates the percentile band
        return self

    def keep_spec(self) -> KeepSpec | None:
        """The rank rule as the ranked cut's spec; None without one."""
        values = {n: getattr(self, n) for n in RANK_RULES if getattr(self, n) is not None}
        return KeepSpec.model_validate(values) if values else None

    def cut(
        self, scores: np.ndarray, higher_is_better: bool, candidates: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict[str, int]]:
        """Which pairs are kept, and the drops by reason: ``dropped.selector`` (not a
        candidate; only with ``candidates``), ``dropped.threshold`` (always counted) and
        ``dropped.rank`` (only with a rank rule)."""
        keep, dropped = self.cut_rows(scores, higher_is_better, candidates)
        return keep, {reason: int(rows.sum()) for reason, rows in dropped.items()}

    def cut_rows(
        self, scores: np.ndarray, higher_is_better: bool, candidates: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """:meth:`cut` with each reason's dropped pairs as a mask over ``scores``."""
        scores = np.asarray(scores, dtype=np.float64)
        dropped: dict[str, np.ndarray] = {}
        keep: np.ndarray = np.ones(len(scores), dtype=bool)
        if candidates is not None:
            keep = np.asarray(candidates, dtype=bool).copy()
            dropped["dropped.selector"] = ~keep
        before = keep.copy()
        if self.threshold is not None:
            with np.errstate(invalid="ignore"):
                passes = scores >= self.threshold if higher_is_better else scores <= self.threshold
            keep &= passes & ~np.isnan(scores)
        dropped["dropped.threshold"] = before & ~keep
        spec = self.keep_spec()
        if spec is not None:
            rows = np.flatnonzero(keep)
            ranked = ranked_cut(scores[rows], spec, higher_is_better, len(scores))
            keep[rows[~ranked]] = False
            dropped["dropped.rank"] = np.zeros(len(scores), dtype=bool)
            dropped["dropped.rank"][rows[~ranked]] = True
        return keep, dropped


@dataclass(frozen=True)
class Selection:
    """What :func:`select_pool` decided: the kept pairs (a mask over the pool), every pair's
    score, and the counts ``pairs_in``, ``pairs_out`` and ``dropped.*``."""

    keep: np.ndarray
    scores: np.ndarray
    counts: dict[str, int]
    dropped: dict[str, np.ndarray] = field(default_factory=dict)
    """Each reason's dropped pairs (``dropped.selector`` and so on), a mask over the pool."""


def select_pool(ctx: StepContext, pool: Corpus, selector: Selector, budget: Budget) -> Selection:
    """Scores ``pool`` with the fitted ``selector`` and applies ``budget`` to its candidates."""
    scores = np.asarray(selector.score(ctx, pool), dtype=np.float64)
    candidates = selector.candidates()
    total = pool.count()
    shape = None if candidates is None else np.asarray(candidates).shape
    if scores.shape != (total,) or shape not in (None, (total,)):
        raise PluginError(
            f"selector {selector.name!r} returned scores of shape {scores.shape} and "
            f"candidates of shape {shape} for a pool of {total} pairs: give one score per pair"
        )
    keep, dropped = budget.cut_rows(scores, selector.higher_is_better, candidates)
    counts = {reason: int(rows.sum()) for reason, rows in dropped.items()}
    return Selection(
        keep, scores, {"pairs_in": total, **counts, "pairs_out": int(keep.sum())}, dropped
    )
