"""Per-pair scores of a whole pool, one shard per task over the step's executor: the selectors
whose score of a pair depends on that pair alone (Moore-Lewis, similarity)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mtcore.api import BlockReader, Corpus, Pair, StepContext, map_shards

PairScorer = Callable[[Any, Sequence[Pair]], Sequence[float]]


def score_pool(
    ctx: StepContext, pool: Corpus, scorer: PairScorer, state: Any, shard_size: int, name: str
) -> np.ndarray:
    """``scorer(state, pairs)`` over every shard of ``pool``, in order, as one float64 array.
    ``scorer`` must be a module-level function and ``state`` picklable (they travel to the
    workers); finished shards are saved in ``ctx.scratch(name)``, so a killed run resumes."""
    parts = []
    shards = map_shards(
        ctx.executor,
        _score_shard,
        BlockReader(pool.files(), shard_size),
        lambda raw: (scorer, state, pool.langs, raw),
        ctx.scratch(name),
    )
    with ctx.progress(pool.count, name) as bar:
        for raw, scores in shards:
            parts.append(scores)
            bar.update(raw.count)
    return np.concatenate(parts) if parts else np.zeros(0)


def _score_shard(task: tuple[PairScorer, Any, tuple[str, ...], Any]) -> np.ndarray:
    """Runs in a worker: the scores of one shard's pairs."""
    scorer, state, langs, raw = task
    return np.asarray(scorer(state, raw.decode(langs).pairs()), dtype=np.float64)
