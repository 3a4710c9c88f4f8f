"""Cleans a parallel corpus with a chain of filter plugins, sharded over the executor."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from mtcore.corpus import Corpus, CorpusWriter, batched
from mtcore.filtering import (
    KEPT,
    FilterSpec,
    StatefulStage,
    make_specs,
    stateless_verdicts,
)
from mtcore.plugin import Pair, PluginConfig
from mtcore.recipe import check_components
from mtcore.registry import Registry
from mtcore.shards import map_shards
from mtcore.step import Step, StepContext


class CleanConfig(PluginConfig):
    filters: list[dict[str, Any]] = Field(
        default_factory=list, description="filter chain: each entry {name: <filter>, <settings>}"
    )
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pairs per shard")
    reject_samples: int = Field(
        50, ge=0, le=100_000, description="rejected pairs kept per filter for audit"
    )


class CleanStep(Step):
    """Outputs the kept pairs (``corpus``) and, per filter, a sample of the pairs it dropped
    (``rejects/<filter>.tsv``); the manifest counts pairs in, out and dropped per filter."""

    name = "clean"
    Config = CleanConfig
    inputs: ClassVar[dict[str, bool]] = {"corpus": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "rejects")

    def check(self, registry: Registry) -> list[tuple[str, str]]:
        return check_components(registry, "filters", self.config.filters, "filters")

    def plugins_used(self) -> list[tuple[str, str]]:
        return [("filters", str(entry["name"])) for entry in self.config.filters]

    def run(self, ctx: StepContext) -> None:
        source = Corpus.open(ctx.inputs["corpus"].path)
        specs = tuple(make_specs(self.config.filters))
        stateful = StatefulStage(specs, ctx.registry, source.langs)
        rejects: dict[str, list[Pair]] = {spec.label: [] for spec in specs}
        for spec in specs:
            ctx.stats.add(f"dropped.{spec.label}", 0)
        total = source.count()
        shards = batched(source, self.config.shard_size)
        with (
            CorpusWriter(ctx.output("corpus"), source.langs) as writer,
            ctx.progress(total, "clean") as bar,
        ):
            for batch, verdicts in map_shards(
                ctx.executor,
                stateless_verdicts,
                shards,
                lambda batch: (specs, source.langs, batch),
                ctx.scratch("shards"),
            ):
                for pair, verdict in zip(batch, stateful.resolve(batch, verdicts), strict=True):
                    if verdict == KEPT:
                        writer.write(pair)
                        continue
                    label = specs[verdict].label
                    ctx.stats.add(f"dropped.{label}")
                    if len(rejects[label]) < self.config.reject_samples:
                        rejects[label].append(pair)
                ctx.stats.add("pairs_in", len(batch))
                bar.update(len(batch))
        ctx.stats.add("pairs_out", writer.lines)
        _write_rejects(ctx, specs, rejects)


def _write_rejects(
    ctx: StepContext, specs: tuple[FilterSpec, ...], rejects: dict[str, list[Pair]]
) -> None:
    folder = ctx.output("rejects")
    for spec in specs:
        with open(folder / f"{spec.label}.tsv", "w", encoding="utf-8", newline="\n") as handle:
            for pair in rejects[spec.label]:
                handle.write("\t".join(pair) + "\n")
