"""Near-duplicate removal: MinHash-LSH over normalized text (:mod:`mtcore_plugins.steps._minhash`),
on one side or the whole pair, keeping the best-scored member of each cluster when a score
table is given (as Mozilla's pipeline keeps the pair with the best Bicleaner score) and the
first otherwise. A candidate pair of the LSH joins a cluster only when its estimated Jaccard
similarity (from the full signatures, kept on disk at 2 bytes a value) reaches
``min_similarity``: banding alone also joins, now and then, pairs that share one long sentence
of three, and union-find chains them into clusters of unrelated pairs.

Crawled bitext and back-translation pools repeat boilerplate with a changed number, the same
sentence with other punctuation or casing; exact dedup keeps every variant. Memory stays
bounded: signatures are computed per shard over the executor (local processes, Slurm or Ray),
their band hashes go to ``buckets`` files on disk (appended with a record of the files' sizes
after each shard, so a killed run resumes after the last whole shard), one file at a time is
sorted in memory, and the clusters are a union-find array of 4 bytes a pair.
On disk: 16 bytes a band hash, 2 bytes a MinHash value (datatrove's defaults: 448 bytes a pair).
Settings default to datatrove's minhash deduplication (5-grams, 14 bands x 8 rows).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from mtcore.api import Corpus, Step, StepContext
from mtcore.api.engine import AppendLog
from mtcore_plugins.steps import _minhash
from mtcore_plugins.steps._buckets import BucketedConfig, appended_shards
from mtcore_plugins.steps._scores import scores_input, write_kept, write_scores

SIGNATURES = "signatures.u16"


class NearDedupConfig(BucketedConfig):
    key: Literal["pair", "source", "target"] = Field(
        "pair",
        description="what must not repeat: the whole pair (both sides near-identical), or one "
        "side (a source translated twice, a target reached from two sources)",
    )
    ngram: int = Field(5, ge=1, le=32, description="characters per shingle (datatrove: 5)")
    bands: int = Field(14, ge=1, le=256, description="LSH bands (datatrove: 14)")
    rows: int = Field(8, ge=1, le=64, description="MinHash values per band (datatrove: 8)")
    seed: int = Field(1, description="seed of the hash functions")
    min_similarity: float | None = Field(
        0.7,
        ge=0,
        le=1,
        description="estimated Jaccard similarity (the share of agreeing MinHash values) an "
        "LSH candidate pair must reach to join a cluster; null: every candidate joins, as in "
        "datatrove (pairs sharing one long sentence then chain clusters together)",
    )


def _shard_hashes(task: tuple[Any, tuple[str, ...], str, int, np.ndarray, np.ndarray, int, int]):  # type: ignore[no-untyped-def]
    """Runs in a worker: one shard's band hashes."""
    raw, langs, key, ngram, a, b, bands, rows = task
    pairs = raw.decode(langs).pairs()
    if key == "source":
        texts = [p[0] for p in pairs]
    elif key == "target":
        texts = [p[-1] for p in pairs]
    else:
        texts = ["\t".join(p) for p in pairs]
    return _minhash.signatures(texts, ngram, a, b, bands, rows)


class NearDedupStep(Step[NearDedupConfig]):
    """Outputs ``corpus`` (one pair per near-duplicate cluster, in corpus order, bytes
    unchanged) and, given ``scores``, the kept pairs' rows. Counts ``pairs_in``, ``pairs_out``
    and ``near_duplicates``; metrics hold the clusters and the S-curve's threshold."""

    parallel = True  # its shards go through ctx.executor

    name = "near_dedup"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "scores": False}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "scores")

    def check(self, registry: Any) -> list[tuple[str, str]]:
        return super().check(registry) + self.config.direction_problems()

    def run(self, ctx: StepContext) -> None:
        config = self.config
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        total = corpus.count()
        header, table, scores = scores_input(ctx, config.column, total)
        a, b = _minhash.hash_params(config.bands * config.rows, config.seed)
        folder = ctx.scratch("buckets")
        names = [_minhash.Buckets.name(i) for i in range(config.buckets)]
        log = AppendLog(folder, [*names, SIGNATURES], layout=f"shard_size={config.shard_size}")
        buckets = _minhash.Buckets(folder, config.buckets, [log[n] for n in names])
        try:
            for start, (hashes, short) in appended_shards(
                ctx,
                _shard_hashes,
                corpus,
                lambda raw: (
                    raw,
                    corpus.langs,
                    config.key,
                    config.ngram,
                    a,
                    b,
                    config.bands,
                    config.rows,
                ),
                log,
                config.shard_size,
                "minhash",
            ):
                buckets.add(hashes, start)
                short.tofile(log[SIGNATURES])
        finally:
            log.close()
        sig_path = folder / SIGNATURES
        counts = dict.fromkeys(("candidate_pairs", "checked", "below"), 0)
        clusters = _minhash.UnionFind(total)
        floor = config.min_similarity
        width = sig_path.stat().st_size // (2 * total) if total else 0
        signatures = _minhash.SignatureFile(sig_path, width)
        with ctx.progress(config.buckets, "clusters") as bar:
            for first, other in buckets.edges(bar.update):
                counts["candidate_pairs"] += len(first)
                if floor is not None:
                    # pairs already in one cluster need no check: a variant shares most of its
                    # bands with its original, and the first band joined them
                    open_ = clusters.roots(first) != clusters.roots(other)
                    first, other = first[open_], other[open_]
                    similar = _minhash.similarity(signatures, first, other) >= floor
                    counts["checked"] += len(first)
                    counts["below"] += int((~similar).sum())
                    first, other = first[similar], other[similar]
                clusters.join(first, other)
        roots = clusters.result()
        keep = _minhash.keep_one(roots, scores, config.direction == "higher")
        with ctx.progress(total, "write") as bar:
            write_kept(ctx.output("corpus"), corpus, keep, bar.update)
        if table is not None and header is not None:
            write_scores(ctx.output("scores"), header, table[keep])
        kept = int(keep.sum())
        ctx.stats.add("pairs_in", total)
        ctx.stats.add("pairs_out", kept)
        ctx.stats.add("near_duplicates", total - kept)
        # from the members that are not their cluster's root (a count per pair would cost
        # 8 bytes a pair in the driver)
        members = roots[roots != np.arange(total, dtype=roots.dtype)]
        _, sizes = np.unique(members, return_counts=True)
        ctx.metrics["clusters_with_duplicates"] = len(sizes)
        ctx.metrics["largest_cluster"] = int(sizes.max()) + 1 if len(sizes) else min(total, 1)
        ctx.metrics["threshold"] = round(_minhash.threshold(config.bands, config.rows), 3)
        ctx.stats.add("candidate_pairs", counts["candidate_pairs"])
        if config.min_similarity is not None:
            ctx.stats.add("candidate_pairs_checked", counts["checked"])
            ctx.stats.add("candidate_pairs_below_min_similarity", counts["below"])
