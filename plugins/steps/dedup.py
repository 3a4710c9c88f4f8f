"""Exact deduplication as a step, its memory bounded whatever the corpus size: the pair (or one
side) hashed per shard over the executor, the 128-bit keys scattered with their pair numbers
to ``buckets`` files on disk (appended with a record of their sizes after each shard, so a
killed run resumes after the last whole shard), one file at a time sorted in memory, every
copy after the first (or, given a score table, every copy but the best-scored) dropped.

The ``dedup`` filter in a clean chain keeps its keys in the driver's memory, 16 bytes a kept
pair (1.6 GB at 100M pairs). This step holds 1 byte a pair (the keep mask) and one bucket
file (24 bytes a record, ``pairs / buckets`` records); the rest is on disk, 24 bytes a pair
(datatrove's exact dedup also scatters its signatures over bucket files). Both give
the same pairs for the same ``key`` and ``normalize``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from mtcore.api import Corpus, Step, StepContext
from mtcore.api.engine import AppendLog
from mtcore_plugins.common.text.keys import block_keys
from mtcore_plugins.steps._buckets import BucketedConfig, appended_shards, scatter
from mtcore_plugins.steps._scores import scores_input, write_kept, write_scores


class DedupStepConfig(BucketedConfig):
    key: Literal["pair", "source", "target"] = Field(
        "pair", description="what must be unique: the whole pair, or one side"
    )
    normalize: bool = Field(False, description="compare case-folded text with whitespace collapsed")


def _shard_keys(task: tuple[Any, tuple[str, ...], str, bool]) -> np.ndarray:
    """Runs in a worker: one shard's (n, 2) uint64 keys."""
    raw, langs, key, normalize = task
    return block_keys(raw.decode(langs), key, normalize)


class KeyBuckets:
    """128-bit keys with their pair numbers, scattered over ``count`` files of an append log
    by the key's high bits (24 bytes a record)."""

    def __init__(self, log: AppendLog, count: int) -> None:
        self.folder = log.folder
        self.count = count
        self.handles = [log[self.name(i)] for i in range(count)]

    @staticmethod
    def name(number: int) -> str:
        return f"keys-{number:05d}.bin"

    def path(self, number: int) -> Path:
        return self.folder / self.name(number)

    def add(self, keys: np.ndarray, first_index: int) -> None:
        """``keys`` (n, 2) of pairs ``first_index`` ... ``first_index + n - 1``."""
        n = len(keys)
        records: np.ndarray = np.empty((n, 3), dtype=np.uint64)
        records[:, :2] = keys
        records[:, 2] = np.arange(first_index, first_index + n, dtype=np.uint64)
        scatter(records, (keys[:, 0] >> np.uint64(40)) % np.uint64(self.count), self.handles)

    def drop(
        self,
        keep: np.ndarray,
        scores: np.ndarray | None,
        higher: bool,
        done: Callable[[int], object] = lambda _: None,
    ) -> int:
        """Clears ``keep`` at every copy but one of each key, bucket by bucket: the first, or
        the best-scored (ties: the first); ``done(1)`` after each bucket. Returns the keys with
        copies."""
        groups = 0
        for number in range(self.count):
            records = np.fromfile(self.path(number), dtype=np.uint64).reshape(-1, 3)
            if len(records) < 2:
                done(1)
                continue
            index = records[:, 2].astype(np.int64)
            if scores is None:
                order = np.lexsort((index, records[:, 1], records[:, 0]))
            else:
                rank = -scores[index] if higher else scores[index]
                order = np.lexsort((index, rank, records[:, 1], records[:, 0]))
            hi, lo = records[order, 0], records[order, 1]
            copy = np.zeros(len(order), dtype=bool)
            copy[1:] = (hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1])
            keep[index[order[copy]]] = False
            groups += int((copy[1:] & ~copy[:-1]).sum())  # runs of copies
            del records, index, order, hi, lo, copy
            done(1)
        return groups


class DedupStep(Step[DedupStepConfig]):
    """Outputs ``corpus`` (one pair per key, in corpus order, bytes unchanged) and, given
    ``scores``, the kept pairs' rows. Counts ``pairs_in``, ``pairs_out`` and ``duplicates``;
    the metric ``keys_with_copies`` counts the keys seen more than once."""

    parallel = True  # its shards go through ctx.executor

    name = "dedup"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "scores": False}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "scores")

    def check(self, registry: Any) -> list[tuple[str, str]]:
        return super().check(registry) + self.config.direction_problems()

    def run(self, ctx: StepContext) -> None:
        config = self.config
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        total = corpus.count()
        header, table, scores = scores_input(ctx, config.column, total)
        names = [KeyBuckets.name(i) for i in range(config.buckets)]
        log = AppendLog(ctx.scratch("buckets"), names, layout=f"shard_size={config.shard_size}")
        names = [KeyBuckets.name(i) for i in range(config.buckets)]
        log = AppendLog(ctx.scratch("buckets"), names, layout=f"shard_size={config.shard_size}")
        buckets = KeyBuckets(log, config.buckets)
        try:
            for start, keys in appended_shards(
                ctx,
                _shard_keys,
                corpus,
                lambda raw: (raw, corpus.langs, config.key, config.normalize),
                log,
                config.shard_size,
                "hash",
            ):
                buckets.add(keys, start)
        finally:
            log.close()
        keep = np.ones(total, dtype=bool)
        with ctx.progress(config.buckets, "buckets") as bar:
            groups = buckets.drop(keep, scores, config.direction == "higher", bar.update)
        with ctx.progress(total, "write") as bar:
            write_kept(ctx.output("corpus"), corpus, keep, bar.update)
        if table is not None and header is not None:
            write_scores(ctx.output("scores"), header, table[keep])
        kept = int(keep.sum())
        ctx.stats.add("pairs_in", total)
        ctx.stats.add("pairs_out", kept)
        ctx.stats.add("duplicates", total - kept)
        ctx.metrics["keys_with_copies"] = groups
