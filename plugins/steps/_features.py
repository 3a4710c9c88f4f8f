"""Adds rerank feature columns to an n-best list: every hypothesis of every entry gets one score
per scorer plugin, computed on the executor's workers shard by shard (each worker builds the
scorers, and loads their models, once), resume-safe like every sharded step."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mtcore.api import Scorer, StepContext, StepError, load_registry, map_shards, worker_memo
from mtcore.api.engine import ComponentSpec
from mtcore_plugins.steps._nbest import Entry, NBestWriter, read_nbest

STEP_KEYS = ("name", "feature")
"""Keys of a feature entry that belong to the step, not to the scorer's settings."""


def _chain(specs: tuple[ComponentSpec, ...], src: str, tgt: str, resources: Any) -> list[Scorer]:
    """The scorers of ``specs``, set up once per worker process; one chain per process: a new
    step's models replace the last."""

    def build() -> list[Scorer]:
        registry = load_registry()
        chain = []
        for spec in specs:
            scorer = spec.build(registry, src, tgt, {role: Path(p) for role, p in resources})
            chain.append(scorer)
        return chain

    return worker_memo((specs, src, tgt, resources), build, only=True)


Task = tuple[tuple[ComponentSpec, ...], str, str, Any, int, str, list[Entry]]


def feature_task(task: Task) -> list[Entry]:
    """Executor task: the entries of one shard with every scorer's column added."""
    import torch

    specs, src, tgt, resources, threads, where, entries = task
    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    pairs = [(entry.source, text) for entry in entries for text, _ in entry.hyps]
    rows = [(entry, rank) for entry in entries for rank in range(len(entry.hyps))]
    for spec, scorer in zip(specs, _chain(specs, src, tgt, resources), strict=True):
        values = scorer.score(pairs)
        if not isinstance(values, list | tuple) or len(values) != len(pairs):
            raise StepError(
                f"scorer {spec.label!r} returned {len(values)} values for {len(pairs)} "
                f"hypotheses ({where}, entries {entries[0].id}-{entries[-1].id})"
            )
        for (entry, rank), value in zip(rows, values, strict=True):
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise StepError(
                    f"scorer {spec.label!r} scored {value!r} (not a finite number) for "
                    f"{where} entry {entry.id} hypothesis {rank}: {entry.hyps[rank][0][:80]!r}"
                )
            entry.hyps[rank][1][spec.label] = float(value)
    return entries


def shards(path: Path, size: int) -> Iterator[list[Entry]]:
    batch: list[Entry] = []
    for entry in read_nbest(path):
        batch.append(entry)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def add_features(
    ctx: StepContext,
    source: Path,
    out: NBestWriter,
    specs: tuple[ComponentSpec, ...],
    resources: Any,
    shard_size: int,
    threads: int,
    store: str,
) -> list[Entry]:
    """Writes ``source`` (an nbest.jsonl) with the scorers' columns to ``out`` and returns the
    entries (an n-best list for reranking is a test or dev set: it fits in memory)."""
    found: list[Entry] = []
    results = map_shards(
        ctx.executor,
        feature_task,
        shards(source, shard_size),
        lambda batch: (specs, out.src, out.tgt, resources, threads, str(source), batch),
        ctx.scratch(store),
    )
    for _, entries in results:
        for entry in entries:
            out.write(entry)
            found.append(entry)
    return found
