"""Keep rules of ranked chain entries and selection steps: a top fraction, a top k or a
percentile band of pairs ranked by a score, cut the same way wherever a step ranks."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from mtcore.contracts.plugin import PluginConfig


class KeepSpec(PluginConfig):
    """Which ranked pairs a chain entry keeps; exactly one of the fields."""

    top_fraction: float | None = Field(
        None, gt=0, le=1, description="keep this fraction of the pairs, best first"
    )
    top_k: int | None = Field(None, ge=1, description="keep this many pairs, best first")
    percentile: tuple[float, float] | None = Field(
        None, description="keep pairs whose score lies in this [low, high] percentile band"
    )
    fraction_of: Literal["ranked", "input"] = Field(
        "ranked",
        description="what top_fraction is a fraction of: the pairs that reach the ranking "
        "(ranked) or every pair the step read (input; NT5 §3.2 keeps 579M of the 1.2B "
        "translated sentences, counted before cleaning)",
    )
    threshold_too: bool = Field(
        False,
        description="first drop the pairs the filter's own threshold rejects, then rank the "
        "rest (NT5 §3.2: remove similarity above 0.96, rank the others)",
    )

    @model_validator(mode="after")
    def _one(self) -> KeepSpec:
        chosen = [
            n for n in ("top_fraction", "top_k", "percentile") if getattr(self, n) is not None
        ]
        if len(chosen) != 1:
            raise ValueError("give exactly one of top_fraction, top_k, percentile")
        if self.fraction_of != "ranked" and self.top_fraction is None:
            raise ValueError("fraction_of applies to top_fraction only")
        if self.percentile is not None:
            low, high = self.percentile
            if not 0 <= low <= high <= 100:
                raise ValueError("percentile band must satisfy 0 <= low <= high <= 100")
        return self


def ranked_cut(
    keys: np.ndarray, spec: KeepSpec, higher_is_better: bool, pairs_in: int | None = None
) -> np.ndarray:
    """Which of ``keys`` a ``keep`` rule keeps. Ties at a top-k/fraction boundary are broken
    by corpus order (earlier pairs first), so the kept count is exact and deterministic.
    NaN keys (a score that could not be computed) rank last. ``pairs_in`` (the step's input
    size) is what a ``fraction_of: input`` fraction counts; it defaults to ``len(keys)``."""
    n = len(keys)
    keep = np.zeros(n, dtype=bool)
    if not n:
        return keep
    if spec.percentile is not None:
        finite = keys[~np.isnan(keys)]
        if not len(finite):
            return keep
        low, high = np.percentile(finite, list(spec.percentile))
        return (keys >= low) & (keys <= high)
    base = n if spec.fraction_of == "ranked" or pairs_in is None else pairs_in
    count = spec.top_k if spec.top_k is not None else round(base * (spec.top_fraction or 0))
    count = min(count, n)
    order_key = np.where(np.isnan(keys), np.inf, -keys if higher_is_better else keys)
    order = np.argsort(order_key, kind="stable")
    keep[order[:count]] = True
    return keep
