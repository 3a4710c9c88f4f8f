"""Cleans a parallel corpus with a chain of filter plugins, sharded over the executor.

The driver cuts the input files into shards of bytes at newlines; workers decode, check and
score them (:func:`mtcore.filtering.chain_task`) and send back one small verdict array per
shard; the driver applies stateful filters in corpus order and appends the kept lines, cut
out of the input bytes, to the output. No pair is ever re-encoded, so the output bytes of a
kept pair are exactly its input bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from mtcore.corpus import Corpus, CorpusWriter
from mtcore.filtering import (
    ENGINE_KEYS,
    KEPT,
    FilterSpec,
    ShardResult,
    StatefulStage,
    chain_resources,
    chain_task,
    check_chain,
    make_specs,
    map_chain,
)
from mtcore.plugin import PluginConfig, components
from mtcore.ranking import ranked_cut
from mtcore.recipe import check_components
from mtcore.registry import Registry
from mtcore.step import Step, StepContext
from mtcore.textblock import BlockReader, RawBlock


class CleanConfig(PluginConfig):
    filters: list[dict[str, Any] | str] = Field(
        default_factory=list,
        description="filter chain: each entry {name: <filter>, <settings>} and optionally "
        "keep: {top_fraction | top_k | percentile} to rank instead of using the threshold",
        json_schema_extra=components("filters"),
    )
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pairs per shard")
    reject_samples: int = Field(
        50, ge=0, le=100_000, description="rejected pairs kept per filter for audit"
    )


class CleanStep(Step):
    """Outputs the kept pairs (``corpus``) and, per filter, a sample of the pairs it dropped
    (``rejects/<filter>.tsv``); the manifest counts pairs in, out and dropped per filter.
    Inputs other than ``corpus`` are resources for filters (a language model, a test set to
    exclude), which name the input role in their settings."""

    name = "clean"
    Config = CleanConfig
    config: CleanConfig
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "*": False}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "rejects")

    def check(self, registry: Registry) -> list[tuple[str, str]]:
        entries = list(self.config.filters)
        return check_components(
            registry, "filters", entries, "filters", reserved=ENGINE_KEYS[1:]
        ) + check_chain(registry, entries, "filters")

    def plugins_used(self) -> list[tuple[str, str]]:
        return [("filters", _name(entry)) for entry in self.config.filters]

    def run(self, ctx: StepContext) -> None:
        source = Corpus.open(ctx.inputs["corpus"].path)
        langs = source.langs
        specs = tuple(make_specs(self.config.filters))
        resources = {role: Path(path) for role, path in chain_resources(ctx.inputs)}
        stage = StatefulStage(specs, ctx.registry, langs, resources)
        ranked = [i for i, spec in enumerate(specs) if spec.keep is not None]
        dropped = np.zeros(len(specs), dtype=np.int64)
        rejects: dict[int, list[str]] = {i: [] for i in range(len(specs))}
        verdict_store = ctx.scratch("verdicts")

        total = source.count()
        with (
            CorpusWriter(ctx.output("corpus"), langs) as writer,
            ctx.progress(total, "clean") as bar,
        ):
            results = map_chain(
                ctx, chain_task, source.files(), langs, specs, self.config.shard_size
            )
            for number, (raw, result) in enumerate(results):
                final = stage.resolve(result)
                ctx.stats.add("pairs_in", raw.count)
                if ranked:  # written in a second pass, once every shard has its keys
                    _save_verdicts(verdict_store, number, final, result, ranked)
                else:
                    self._emit(raw, final, writer, dropped, rejects)
                bar.update(raw.count)
            if ranked:
                finals = _rank(verdict_store, specs, ranked, ctx.registry)
                for raw, final in zip(
                    BlockReader(source.files(), self.config.shard_size), finals, strict=True
                ):
                    self._emit(raw, final, writer, dropped, rejects)
        for index, spec in enumerate(specs):
            ctx.stats.add(f"dropped.{spec.label}", int(dropped[index]))
        ctx.stats.add("pairs_out", writer.lines)
        _write_rejects(ctx, specs, rejects)

    def _emit(
        self,
        raw: RawBlock,
        final: np.ndarray,
        writer: CorpusWriter,
        dropped: np.ndarray,
        rejects: dict[int, list[str]],
    ) -> None:
        keep = final == KEPT
        writer.write_raw(
            [raw.kept_bytes(side, keep) for side in range(len(raw.raws))], int(keep.sum())
        )
        rejected = final[~keep]
        if not len(rejected):
            return
        dropped += np.bincount(rejected, minlength=len(dropped))
        for index, sample in rejects.items():
            room = self.config.reject_samples - len(sample)
            if room <= 0:
                continue
            for row in np.flatnonzero(final == index)[:room]:
                sample.append(
                    "\t".join(_line(raw, side, int(row)) for side in range(len(raw.raws)))
                )


def _name(entry: dict[str, Any] | str) -> str:
    return entry if isinstance(entry, str) else str(entry["name"])


def _line(raw: RawBlock, side: int, row: int) -> str:
    ends = raw.ends[side]
    start = int(ends[row - 1]) + 1 if row else 0
    return raw.raws[side][start : int(ends[row])].decode("utf-8")


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
    store: Path, specs: tuple[FilterSpec, ...], ranked: list[int], registry: Registry
) -> list[np.ndarray]:
    """Applies the ranked entries in chain order to the survivors of everything before them;
    returns the final verdicts of every shard."""
    files = sorted(store.glob("[0-9]*.npz"))
    loaded = [np.load(f) for f in files]
    finals = [data["final"].copy() for data in loaded]
    sizes = [len(f) for f in finals]
    final = np.concatenate(finals) if finals else np.zeros(0, dtype=np.int16)
    for index in ranked:
        keys = np.concatenate([data[f"key{index}"] for data in loaded]) if loaded else final
        alive = np.flatnonzero(final == KEPT)
        spec = specs[index]
        keep_spec = spec.keep_spec
        assert keep_spec is not None
        higher = bool(registry.load("filters", spec.name).higher_is_better)
        kept = ranked_cut(keys[alive], keep_spec, higher, len(final))
        final[alive[~kept]] = index
    return np.split(final, np.cumsum(sizes)[:-1]) if sizes else []


def _write_rejects(
    ctx: StepContext, specs: tuple[FilterSpec, ...], rejects: dict[int, list[str]]
) -> None:
    folder = ctx.output("rejects")
    for index, spec in enumerate(specs):
        with open(folder / f"{spec.label}.tsv", "w", encoding="utf-8", newline="\n") as handle:
            for line in rejects[index]:
                handle.write(line + "\n")
