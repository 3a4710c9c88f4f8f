"""Embedding nearest neighbours of a target-domain set (NT5 §3.3: "We searched for the nearest
4,000 sentences to the target domain using faiss").

For each sentence of the ``domain`` input, the ``k`` pairs of ``corpus`` whose sentence (one
column) has the highest cosine similarity with it; the output is the union of those pairs,
each once, in corpus order. ``max_pairs`` caps the union: its pairs with the highest best
cosine are kept (ties to the earlier pair), which is how a recipe asks for NT5's 4,000.

The search is the ``knn`` selector's (:mod:`mtcore_plugins.common.similarity.knn`: exact, sharded
over the executor, NumPy or faiss) and the cap is the core's selection budget
(``Budget(top_k=...)``); this step adds the ``neighbours`` table. The ``selection`` step with
``selector: {name: knn}`` and ``top_k`` selects the same pairs.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
from pydantic import Field

from mtcore.api import BlockReader, Corpus, CorpusWriter, Step, StepContext
from mtcore.api.engine import Budget
from mtcore_plugins.common.similarity.knn import (
    KnnConfig,
    TopK,
    best_cosines,
    domain_queries,
    search,
    shard_top_k as shard_top_k,  # where tests and older code import it from
)


class KnnSelectConfig(KnnConfig):
    max_pairs: int | None = Field(
        None,
        ge=1,
        description="keep at most this many pairs of the union, highest best cosine first "
        "(NT5 §3.3: 4,000)",
    )


class KnnSelectStep(Step[KnnSelectConfig]):
    """Outputs ``corpus`` (the selected pairs, corpus order) and ``neighbours/neighbours.tsv``
    (domain line, rank, corpus line, cosine; lines numbered from 1)."""

    parallel = True  # its shards go through ctx.executor

    name = "knn_select"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "domain": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "neighbours")

    def run(self, ctx: StepContext) -> None:
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        domain = Corpus.open(ctx.inputs["domain"].path)
        lang, domain_lang = self.config.languages(corpus, domain, ctx.step_id)
        queries = domain_queries(self.config, domain, domain_lang, ctx)
        best, total = search(self.config, corpus, lang, queries, ctx)
        scores, neighbours = best_cosines(best, total)
        keep, _ = Budget(top_k=self.config.max_pairs).cut(scores, True, neighbours)
        self._write(ctx, corpus, keep, best)
        ctx.stats.add("pairs_in", total)
        ctx.stats.add("domain_sentences", queries[0])
        ctx.stats.add("pairs_out", int(keep.sum()))

    def _write(self, ctx: StepContext, corpus: Corpus, keep: np.ndarray, best: TopK) -> None:
        with CorpusWriter(ctx.output("corpus"), corpus.langs) as writer:
            start = 0
            for raw in BlockReader(corpus.files(), self.config.shard_size):
                mask = keep[start : start + raw.count]
                writer.write_raw(
                    [raw.kept_bytes(s, mask) for s in range(len(raw.raws))], int(mask.sum())
                )
                start += raw.count
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
