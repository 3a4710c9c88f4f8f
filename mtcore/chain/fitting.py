"""Corpus-level fits of the filters that learn a model from the data (``Filter.fit_size``).

A filter such as the word aligner learns from the pairs it scores; fitted on each shard, its
scores would depend on ``shard_size``. Before any shard is scored, each such filter of the
chain, in chain order, is fitted once on a sample of the corpus:

- the sample is ``fit_size`` pairs at evenly spaced rows of the whole corpus (all of it when
  smaller), so the same corpus gives the same sample whatever the shard size and workers;
- the earlier filters of the chain run on it through the executor, as on any shard, and the
  filter learns from the pairs they keep (stateful entries drop nothing here);
- ``fit`` writes into a temporary directory renamed to ``<scratch>/fit/<n>-<label>`` when
  complete: a step killed while fitting fits again, one killed later reuses the fit. The
  directory then travels with the chain's specs to every worker (``ComponentSpec.fitted``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from mtcore.chain.components import ComponentSpec
from mtcore.chain.filtering import KEPT, ChainTask, ShardResult, chain_resources, chain_task
from mtcore.contracts.errors import DataError
from mtcore.contracts.kinds import CorpusFit
from mtcore.contracts.plugin import Pair
from mtcore.exec.shards import map_shards
from mtcore.text.block import BlockReader, RawBlock

READ_LINES = 100_000  # lines read at a time while drawing a sample
FIT_INFO = "fit.json"


def fit_chain(
    ctx: Any,
    files: Sequence[Path],
    langs: tuple[str, ...],
    specs: tuple[ComponentSpec, ...],
    resources: tuple[tuple[str, str], ...],
) -> tuple[ComponentSpec, ...]:
    """``specs`` with ``fitted`` set for every filter that asks to be fitted."""
    done = list(specs)
    for index, spec in enumerate(specs):
        plugin = spec.configured(ctx.registry)
        size = plugin.fit_size() if isinstance(plugin, CorpusFit) else 0
        if size <= 0:
            continue
        folder = ctx.scratch("fit") / f"{index:03d}-{spec.label}"
        if not folder.exists():
            prefix = tuple(done[:index])
            sample = kept_by(ctx, prefix, langs, resources, draw_sample(files, langs, size))
            paths = {role: Path(path) for role, path in resources}
            fit_into(spec.build(ctx.registry, langs, paths), sample, folder)
        info = json.loads((folder / FIT_INFO).read_text())
        ctx.stats.add(f"fit.{spec.label}.pairs", int(info["pairs"]))
        done[index] = replace(spec, fitted=str(folder))
    return tuple(done)


def sample_rows(total: int, size: int) -> np.ndarray:
    """``size`` evenly spaced row numbers of ``total`` rows (all of them when fewer)."""
    if total <= size:
        return np.arange(total, dtype=np.int64)
    return np.arange(size, dtype=np.int64) * total // size


def draw_sample(files: Sequence[Path], langs: tuple[str, ...], size: int) -> list[RawBlock]:
    """The sampled lines of the corpus, in order, as blocks of lines already checked as the
    workers check every shard (an error names the file and line of the corpus)."""
    rows = sample_rows(_count_lines(files[0]), size)
    blocks = []
    for raw in BlockReader(files, READ_LINES):
        start = raw.first_line - 1
        lo, hi = np.searchsorted(rows, [start, start + raw.count])
        if lo == hi:
            continue
        block = _lines_of(raw, rows[lo:hi] - start)
        try:
            block.decode(langs)
        except DataError:
            raw.decode(langs)  # raises the same error, named with its line in the corpus
            raise
        blocks.append(block)
    return blocks


def kept_by(
    ctx: Any,
    prefix: tuple[ComponentSpec, ...],
    langs: tuple[str, ...],
    resources: tuple[tuple[str, str], ...],
    blocks: Sequence[RawBlock],
) -> list[Pair]:
    """The pairs of ``blocks`` that the filters of ``prefix`` keep, run as on any shard:
    stateful entries drop nothing here, ranked ones only by their own ``threshold_too``."""
    pairs: list[Pair] = []
    if not prefix:
        for block in blocks:
            pairs += block.decode(langs).pairs()
        return pairs
    tasks = ((prefix, langs, resources, block) for block in blocks)
    for block, result in zip(blocks, ctx.executor.map(chain_task, tasks), strict=True):
        keep = np.flatnonzero(result.verdicts == KEPT)
        pairs += block.decode(langs).take(keep).pairs()
    return pairs


def fit_into(plugin: CorpusFit, sample: Sequence[Pair], folder: Path) -> None:
    """``plugin.fit`` into a temporary directory renamed to ``folder`` once complete."""
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    plugin.fit(sample, tmp)
    (tmp / FIT_INFO).write_text(json.dumps({"pairs": len(sample)}) + "\n")
    os.replace(tmp, folder)


def _count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


def _lines_of(raw: RawBlock, rows: np.ndarray) -> RawBlock:
    """The lines ``rows`` of ``raw`` as a block of their own (first line: the first row's)."""
    keep = np.zeros(raw.count, dtype=bool)
    keep[rows] = True
    sides = [raw.kept_bytes(side, keep) for side in range(len(raw.raws))]
    ends = tuple(np.flatnonzero(np.frombuffer(b, dtype=np.uint8) == 10) for b in sides)
    return RawBlock(tuple(sides), ends, raw.first_line + int(rows[0]), raw.paths)


def map_chain(
    ctx: Any,
    fn: Callable[[ChainTask], ShardResult],
    files: Sequence[Path],
    langs: tuple[str, ...],
    specs: tuple[ComponentSpec, ...],
    shard_size: int,
) -> Iterator[tuple[RawBlock, ShardResult]]:
    """``fn`` (``chain_task`` or ``score_task`` of :mod:`mtcore.chain.filtering`) over the shards of
    the corpus ``files`` on the step's executor, resume-safe, in corpus order, once fitted."""
    resources = chain_resources(ctx.inputs)
    specs = fit_chain(ctx, files, langs, specs, resources)
    return map_shards(
        ctx.executor,
        fn,
        BlockReader(files, shard_size),
        lambda raw: (specs, langs, resources, raw),
        ctx.scratch("shards"),
    )
