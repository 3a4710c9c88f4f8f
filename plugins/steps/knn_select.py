"""Embedding nearest neighbours of a target-domain set (NT5 §3.3: "We searched for the nearest
4,000 sentences to the target domain using faiss").

For each sentence of the ``domain`` input, the ``k`` pairs of ``corpus`` whose sentence (one
column) has the highest cosine similarity with it; the output is the union of those pairs,
each once, in corpus order. ``max_pairs`` caps the union: its pairs with the highest best
cosine are kept (ties to the earlier pair), which is how a recipe asks for NT5's 4,000.

The older spelling of the ``selection`` step with ``selector: {name: knn, ...}`` and
``top_k: <max_pairs>``, which it runs (``_selector_run.SelectorRun``); it keeps its settings,
and so its hash, and adds the ``neighbours`` table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from mtcore.api import Selector, Step, StepContext
from mtcore.api.engine import Budget
from mtcore_plugins.common.similarity.knn import (
    KnnConfig,
    shard_top_k as shard_top_k,  # where tests and older code import it from
)
from mtcore_plugins.steps._selector_run import SelectorRun


class KnnSelectConfig(KnnConfig):
    max_pairs: int | None = Field(
        None,
        ge=1,
        description="keep at most this many pairs of the union, highest best cosine first "
        "(NT5 §3.3: 4,000)",
    )


class KnnSelectStep(SelectorRun, Step[KnnSelectConfig]):
    """Outputs ``corpus`` (the selected pairs, corpus order), ``neighbours/neighbours.tsv``
    (domain line, rank, corpus line, cosine; lines numbered from 1) and ``rejects`` (the
    first pairs each cut dropped, with their scores)."""

    name = "knn_select"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "domain": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "neighbours", "rejects")

    def selector_entry(self) -> dict[str, Any]:
        return {"name": "knn", **self.config.model_dump(exclude={"max_pairs"})}

    def budget(self) -> Budget:
        return Budget(top_k=self.config.max_pairs)

    def write(
        self, ctx: StepContext, selector: Selector, keep: np.ndarray, scores: np.ndarray
    ) -> None:
        best = selector.best  # type: ignore[attr-defined]  # the knn selector's, after score
        ctx.stats.add("domain_sentences", selector.queries[0])  # type: ignore[attr-defined]
        path = ctx.output("neighbours") / "neighbours.tsv"
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write("domain_line\trank\tcorpus_line\tcosine\n")
            for query in range(best.rows.shape[0]):
                for rank in range(best.rows.shape[1]):
                    row = int(best.rows[query, rank])
                    if row >= 0:
                        cosine = float(best.sims[query, rank])
                        handle.write(f"{query + 1}\t{rank + 1}\t{row + 1}\t{cosine:.7f}\n")


def neighbours_table(path: Path) -> list[tuple[int, int, int, float]]:
    """The rows of a knn_select ``neighbours`` output: (domain line, rank, corpus line, cosine)."""
    rows = []
    with open(path / "neighbours.tsv", encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            q, r, c, s = line.rstrip("\n").split("\t")
            rows.append((int(q), int(r), int(c), float(s)))
    return rows
