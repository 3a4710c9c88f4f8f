"""A filter chain run over a whole corpus: what the ``clean`` and ``score`` steps call.

:mod:`mtcore.chain.filtering` runs a chain on one shard. This module drives it over a corpus on the
step's executor and owns what follows from the verdicts: the kept pairs' bytes (cut out of the
input, never re-encoded), the drop count of each entry, a sample of the pairs each entry
dropped, and ranked entries (``keep``), which need every shard's keys before any pair can be
written, so their step reads its input twice. The steps only open their outputs and write what
comes back.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mtcore.chain.components import ComponentSpec
from mtcore.chain.filtering import (
    KEPT,
    ShardResult,
    StatefulStage,
    chain_resources,
    chain_task,
    keep_of,
    make_specs,
    score_task,
)
from mtcore.chain.fitting import map_chain
from mtcore.chain.ranking import ranked_cut
from mtcore.contracts.errors import StepError
from mtcore.contracts.registry import Registry
from mtcore.data.corpus import Corpus, CorpusWriter
from mtcore.text.block import BlockReader, RawBlock


@dataclass
class CleanResult:
    """Pairs read and kept, pairs dropped by each entry (by label, in chain order) and a sample
    of each entry's dropped pairs (sides joined by tabs)."""

    pairs_in: int = 0
    pairs_out: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    rejects: dict[str, list[str]] = field(default_factory=dict)
    reject_scores: dict[str, list[str]] = field(default_factory=dict)
    """The score that rejected each sampled pair, as text (sides separated by spaces; empty
    where the filter gives none: a stateful entry). A ranked entry's rejects show the key
    they were ranked by, or the score its own threshold rejected (``threshold_too``)."""
    cuts: dict[str, float] = field(default_factory=dict)
    """Each ranked entry's worst kept key (by label): where its cut fell."""


Scored = dict[int, dict[int, np.ndarray]]
"""Per chain entry, the scores of some of a shard's rejected rows: row -> its score values."""


def clean_corpus(
    ctx: Any,
    source: Corpus,
    entries: Sequence[Any],
    writer: CorpusWriter,
    shard_size: int,
    reject_samples: int,
) -> CleanResult:
    """Runs the chain ``entries`` over ``source``, writing the kept pairs to ``writer``."""
    langs = source.langs
    specs = tuple(make_specs(entries))
    resources = {role: Path(path) for role, path in chain_resources(ctx.inputs)}
    stage = StatefulStage(specs, ctx.registry, langs, resources)
    ranked = [i for i, spec in enumerate(specs) if keep_of(spec) is not None]
    out = _Output(writer, len(specs), reject_samples)
    verdict_store = ctx.scratch("verdicts")
    pairs_in = 0
    early: dict[int, Scored] = {}  # ranked: the scores of the first pass's sampled rejects
    seen = np.zeros(len(specs), dtype=np.int64)
    cuts: dict[str, float] = {}
    with ctx.progress(source.count, "clean") as bar:
        results = map_chain(ctx, chain_task, source.files(), langs, specs, shard_size)
        for number, (raw, result) in enumerate(results):
            final = stage.resolve(result)
            pairs_in += raw.count
            if ranked:  # written in a second pass, once every shard has its keys
                _save_verdicts(verdict_store, number, final, result, ranked)
                wanted = {i: v for i, v in result.rejected.items() if seen[i] < reject_samples}
                if wanted:
                    early[number] = _scored(wanted)
                seen += np.bincount(final[final != KEPT], minlength=len(specs))
            else:
                out.emit(raw, final, _scored(result.rejected))
            bar.update(raw.count)
        if ranked:
            finals, keyed, worst = _rank(verdict_store, specs, ranked, ctx.registry, reject_samples)
            cuts = {specs[i].label: value for i, value in worst.items()}
            shards = zip(BlockReader(source.files(), shard_size), finals, strict=True)
            for number, (raw, final) in enumerate(shards):
                scored = early.pop(number, {})
                for index, rows in keyed.get(number, {}).items():
                    scored[index] = {**rows, **scored.get(index, {})}  # a threshold's score first
                out.emit(raw, final, scored)
    return CleanResult(
        pairs_in,
        writer.lines,
        {spec.label: int(out.dropped[i]) for i, spec in enumerate(specs)},
        {spec.label: out.rejects[i] for i, spec in enumerate(specs)},
        {spec.label: out.scores[i] for i, spec in enumerate(specs)},
        cuts,
    )


def _scored(rejected: dict[int, tuple[np.ndarray, np.ndarray]]) -> Scored:
    return {
        i: dict(zip(rows.tolist(), values, strict=True)) for i, (rows, values) in rejected.items()
    }


def score_corpus(
    ctx: Any, source: Corpus, entries: Sequence[Any], shard_size: int
) -> Iterator[tuple[RawBlock, list[str], np.ndarray]]:
    """Score mode: every entry scores every pair of ``source``; per shard, in corpus order,
    the column names (``<label>`` or ``<label>.<lang>`` where an entry scores each side) and
    the (pairs, columns) table."""
    langs = source.langs
    specs = tuple(make_specs(entries))
    columns: list[str] | None = None
    for raw, result in map_chain(ctx, score_task, source.files(), langs, specs, shard_size):
        table = np.hstack([result.scores[i] for i in range(len(specs))])
        if columns is None:
            columns = _columns(specs, result.scores, langs)
        if table.shape != (raw.count, len(columns)):
            raise StepError(f"score: a shard has scores of shape {table.shape}")
        yield raw, columns, table


def _columns(
    specs: Sequence[ComponentSpec], scores: dict[int, np.ndarray], langs: tuple[str, ...]
) -> list[str]:
    names = []
    for i, spec in enumerate(specs):
        width = scores[i].shape[1]
        if width == 1:
            names.append(spec.label)
        elif width == len(langs):
            names += [f"{spec.label}.{lang}" for lang in langs]
        else:
            names += [f"{spec.label}.{j}" for j in range(width)]
    return names


class _Output:
    """Writes a shard's kept pairs; counts and samples what each entry dropped."""

    def __init__(self, writer: CorpusWriter, entries: int, samples: int) -> None:
        self.writer = writer
        self.dropped = np.zeros(entries, dtype=np.int64)
        self.rejects: dict[int, list[str]] = {i: [] for i in range(entries)}
        self.scores: dict[int, list[str]] = {i: [] for i in range(entries)}
        self.samples = samples

    def emit(self, raw: RawBlock, final: np.ndarray, scored: Scored) -> None:
        keep = final == KEPT
        self.writer.write_raw(
            [raw.kept_bytes(side, keep) for side in range(len(raw.raws))], int(keep.sum())
        )
        rejected = final[~keep]
        if not len(rejected):
            return
        self.dropped += np.bincount(rejected, minlength=len(self.dropped))
        for index, sample in self.rejects.items():
            room = self.samples - len(sample)
            if room <= 0:
                continue
            values = scored.get(index, {})
            for row in np.flatnonzero(final == index)[:room]:
                sample.append(raw.pair(int(row)))
                score = values.get(int(row))
                shown = "" if score is None else " ".join(f"{v:.4g}" for v in np.ravel(score))
                self.scores[index].append(shown)


def _save_verdicts(
    store: Path, number: int, final: np.ndarray, result: ShardResult, ranked: list[int]
) -> None:
    path = store / f"{number:08d}.npz"
    tmp = store / f"{number:08d}.tmp.npz"
    nothing = np.full(len(final), np.nan)  # a shard emptied before the ranked entries
    arrays: dict[str, np.ndarray] = {f"key{i}": result.keys.get(i, nothing) for i in ranked}
    np.savez(tmp, final=final, **arrays)  # type: ignore[arg-type]
    tmp.replace(path)


def _rank(
    store: Path,
    specs: tuple[ComponentSpec, ...],
    ranked: list[int],
    registry: Registry,
    samples: int,
) -> tuple[list[np.ndarray], dict[int, Scored], dict[int, float]]:
    """Applies the ranked entries in chain order to the survivors of everything before them;
    returns the final verdicts of every shard, the keys of the first ``samples`` pairs each
    ranked entry dropped (by shard number) and each entry's worst kept key."""
    files = sorted(store.glob("[0-9]*.npz"))
    loaded = [np.load(f) for f in files]
    finals = [data["final"].copy() for data in loaded]
    sizes = [len(f) for f in finals]
    final = np.concatenate(finals) if finals else np.zeros(0, dtype=np.int16)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    keyed: dict[int, Scored] = {}
    worst: dict[int, float] = {}
    for index in ranked:
        keys = np.concatenate([data[f"key{index}"] for data in loaded]) if loaded else final
        alive = np.flatnonzero(final == KEPT)
        spec = specs[index]
        keep = keep_of(spec)
        assert keep is not None
        higher = bool(registry.load("filters", spec.name).higher_is_better)
        kept = ranked_cut(keys[alive], keep, higher, len(final))
        final[alive[~kept]] = index
        kept_keys = keys[alive[kept]]
        kept_keys = kept_keys[~np.isnan(kept_keys)]
        if len(kept_keys):
            worst[index] = float(kept_keys.min() if higher else kept_keys.max())
        for row in np.flatnonzero(final == index)[:samples]:
            if not np.isnan(keys[row]):  # NaN: its own threshold dropped it, scored then
                shard = int(np.searchsorted(starts, row, side="right")) - 1
                by_row = keyed.setdefault(shard, {}).setdefault(index, {})
                by_row[int(row - starts[shard])] = keys[row : row + 1]
    return (np.split(final, np.cumsum(sizes)[:-1]) if sizes else []), keyed, worst
