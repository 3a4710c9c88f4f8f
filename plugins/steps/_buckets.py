"""What the deduplication steps share: records scattered over bucket files on disk so that
one file at a time is sorted in memory, the shards' results appended to those files through an
:class:`~mtcore.api.AppendLog` (a killed run resumes after the last whole shard), and the
settings for keeping the best-scored member of a group."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO, Literal, TypeVar

import numpy as np
from pydantic import Field

from mtcore.api import NOT_IDENTITY, BlockReader, Corpus, PluginConfig, StepContext, map_shards
from mtcore.api.engine import AppendLog

R = TypeVar("R")


class BucketedConfig(PluginConfig):
    """Settings of a step that groups pairs through bucket files and keeps one of a group."""

    column: str | None = Field(
        None,
        min_length=1,
        description="score column (of the `scores` input, a score step's table) whose best "
        "member of a group is kept; without it, the first in corpus order",
    )
    direction: Literal["higher", "lower"] = Field(
        "higher", description="which scores of `column` are better"
    )
    buckets: int = Field(
        64,
        ge=1,
        le=4096,
        description="bucket files the records are spread over: one at a time is held in "
        "memory, a share 1 / buckets of them",
        json_schema_extra=NOT_IDENTITY,
    )
    shard_size: int = Field(
        50_000,
        ge=1,
        le=10_000_000,
        description="pairs per shard",
        json_schema_extra=NOT_IDENTITY,
    )

    def direction_problems(self) -> list[tuple[str, str]]:
        if self.column is None and "direction" in self.model_fields_set:
            return [("direction", "applies with `column` (a score column) only")]
        return []


def scatter(records: np.ndarray, where: np.ndarray, handles: Sequence[BinaryIO]) -> None:
    """Appends each row of ``records`` to the file ``handles[where[row]]``, rows in order."""
    order = np.argsort(where, kind="stable")
    records, where = records[order], where[order]
    bounds = np.searchsorted(where, np.arange(len(handles) + 1, dtype=where.dtype))
    for number, handle in enumerate(handles):
        low, high = bounds[number], bounds[number + 1]
        if high > low:
            records[low:high].tofile(handle)


def appended_shards(
    ctx: StepContext,
    fn: Callable[[Any], R],
    corpus: Corpus,
    make_task: Callable[[Any], Any],
    log: AppendLog,
    shard_size: int,
    desc: str,
) -> Iterator[tuple[int, R]]:
    """``(first pair number, fn(make_task(shard)))`` for the shards of ``corpus`` after those
    ``log`` holds, over the executor, with a progress bar; the caller appends a result to
    ``log``'s files before asking for the next one, which commits it."""
    total = corpus.count()
    shards = map_shards(
        ctx.executor,
        fn,
        BlockReader(corpus.files(), shard_size),
        make_task,
        None,  # results go straight to the append log, not saved twice
        skip=log.done,
    )
    start = min(total, log.done * shard_size)
    with ctx.progress(total, desc) as bar:
        bar.update(start)
        for raw, result in shards:
            yield start, result
            log.commit()
            start += raw.count
            bar.update(raw.count)
