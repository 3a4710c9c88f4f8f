"""Exact embedding nearest-neighbour search over a corpus (NT5 §3.3: "We searched for the
nearest 4,000 sentences to the target domain using faiss"), shared by the ``knn_select`` step
and the ``knn`` selector.

For each query (a target-domain sentence), the ``k`` corpus pairs whose sentence (one column)
has the highest cosine similarity with it. Embeddings come from the ``embedding`` filter's
encoders (:mod:`mtcore_plugins.common.similarity.embeddings`), in the executor's workers, one corpus
shard per task: each worker embeds its shard and returns its own top k per query; the driver merges
those into the global top k. Nothing but the top k is kept, so memory does not grow with the corpus.

Search is exact (a flat inner-product scan over unit vectors): NumPy, or faiss's
``IndexFlatIP`` when installed (``search: auto``). Ties at the k-th place go to the earlier pair:
where faiss reports a tie at the boundary the row is redone in NumPy.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field

from mtcore.api import (
    BlockReader,
    Corpus,
    DataError,
    RawBlock,
    StepContext,
    map_shards,
    worker_memo,
)
from mtcore_plugins.common.similarity.embeddings import EncoderConfig

Task = tuple[dict[str, Any], tuple[str, ...], int, RawBlock]


class KnnConfig(EncoderConfig):
    """The search settings of the ``knn_select`` step and the ``knn`` selector."""

    k: int = Field(10, ge=1, le=1_000_000, description="nearest corpus pairs per domain sentence")
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

    def languages(self, corpus: Corpus, domain: Corpus, where: str) -> tuple[str, str]:
        """(corpus language, domain-set language) to embed; a clear error when absent."""
        lang = self.lang or corpus.langs[0]
        if lang not in corpus.langs:
            raise DataError(f"{where}: lang {lang!r} is not a corpus language ({corpus.langs})")
        domain_lang = self.domain_lang or (lang if lang in domain.langs else domain.langs[0])
        if domain_lang not in domain.langs:
            raise DataError(
                f"{where}: domain_lang {domain_lang!r} is not a language of the domain set "
                f"{domain.path} ({domain.langs})"
            )
        return lang, domain_lang

    def encoder_settings(self) -> dict[str, Any]:
        return self.model_dump(include={"backend", "model", "batch_size", "threads"})


def domain_queries(
    config: KnnConfig, domain: Corpus, domain_lang: str, ctx: StepContext
) -> tuple[int, str]:
    """Embeds the domain sentences once, into ``ctx.scratch("domain")``: (their number, the
    ``.npy`` file the workers read)."""
    column = domain.langs.index(domain_lang)
    sentences = [pair[column] for pair in domain]
    if not sentences:
        raise DataError(f"{ctx.step_id}: the domain set {domain.path} is empty")
    queries = embed_texts(config.encoder_settings(), sentences)
    query_file = ctx.scratch("domain") / "queries.npy"
    np.save(query_file, queries)
    return len(sentences), str(query_file)


def search(
    config: KnnConfig, corpus: Corpus, lang: str, queries: tuple[int, str], ctx: StepContext
) -> tuple[TopK, int]:
    """The global top k of every query over ``corpus``'s ``lang`` column, and the corpus size;
    shards go through ``ctx.executor``, their results saved in ``ctx.scratch("shards")``."""
    count, query_file = queries
    settings = config.encoder_settings()
    settings |= {"queries": query_file, "k": config.k, "search": config.search}
    column = corpus.langs.index(lang)
    best = TopK(count, config.k)
    shards = map_shards(
        ctx.executor,
        knn_task,
        BlockReader(corpus.files(), config.shard_size),
        lambda raw: (settings, corpus.langs, column, raw),
        ctx.scratch("shards"),
    )
    total = 0
    with ctx.progress(corpus.count(), "knn") as bar:
        for raw, (sims, rows) in shards:
            best.merge(sims, rows)
            total += raw.count
            bar.update(raw.count)
    return best, total


def best_cosines(best: TopK, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Per corpus pair, its highest cosine with a domain sentence it is a neighbour of (NaN
    for a pair no domain sentence has among its k nearest), and the mask of those neighbours."""
    found = best.rows >= 0
    score = np.full(total, -np.inf)
    np.maximum.at(score, best.rows[found], best.sims[found])
    neighbours = np.zeros(total, dtype=bool)
    neighbours[best.rows[found]] = True
    score[~neighbours] = np.nan
    return score, neighbours


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
