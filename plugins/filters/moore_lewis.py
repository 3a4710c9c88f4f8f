"""Moore-Lewis cross-entropy difference (Moore and Lewis 2010), for in-domain data selection.

The score, its settings and the vocabulary rule are :mod:`mtcore_plugins.common.lm.moore_lewis`'s
(the ``moore_lewis`` selector scores the same way): ``H_in(s) - H_gen(s)`` per token (log10),
lower is better. NT5 §3.3 selects "the top 20,000 scored sentences" (``keep: {top_k: 20000}``
in a clean step, or a score step and a ``select`` step with ``top_k: 20000, direction: lower``).

Both models come from ``kenlm`` steps, connected to the clean/score step under the input roles
named by ``in_domain`` and ``general``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from mtcore.api import Filter, Pair
from mtcore_plugins.common.lm.moore_lewis import CrossEntropyConfig, CrossEntropyDifference


class MooreLewisConfig(CrossEntropyConfig):
    max_score: float | None = Field(
        0.0,
        description="highest difference kept (0: at least as likely in-domain as general); "
        "unset keeps every pair (rank with `keep` or a select step instead)",
    )


class MooreLewisFilter(Filter[MooreLewisConfig]):
    """Score: H_in - H_gen per token (log10), summed over the chosen sides; lower is better."""

    name = "moore_lewis"
    higher_is_better = False

    def setup(self, langs: tuple[str, ...], resources: Mapping[str, Path] | None = None) -> None:
        super().setup(langs, resources)
        config = self.config
        folders = {role: self.resource(role) for role in (config.in_domain, config.general)}
        self.difference = CrossEntropyDifference(config, langs, folders, "filter 'moore_lewis'")

    def score(self, batch: Sequence[Pair]) -> list[float]:
        return self.difference.scores(batch)

    def accept(self, score: Any) -> bool:
        limit = self.config.max_score
        return bool(limit is None or (math.isfinite(score) and score <= limit))
