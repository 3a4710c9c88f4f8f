"""Score mode: every filter of a chain scores every pair, nothing is dropped. The output is a
tab-separated table aligned with the corpus, one column per filter (per side where the filter
scores each side), for selectors to rank by."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from mtcore.api import (
    Corpus,
    PluginConfig,
    PluginError,
    Registry,
    Step,
    StepContext,
    components,
    write_artifact_meta,
)
from mtcore.api.engine import entry_name, make_specs, score_corpus
from mtcore_plugins.steps._scores import SCORES_FILE


class ScoreConfig(PluginConfig):
    filters: list[dict[str, Any] | str] = Field(
        min_length=1,
        description="filters whose scores to write: {name: <filter>, <settings>}",
        json_schema_extra=components("filters"),
    )
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pairs per shard")


class ScoreStep(Step[ScoreConfig]):
    """Outputs ``scores/scores.tsv``: a header naming the columns (``<filter>`` or
    ``<filter>.<lang>``), then one row of numbers per pair of the input, in order."""

    parallel = True  # its shards go through ctx.executor

    name = "score"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "*": False}
    outputs: ClassVar[tuple[str, ...]] = ("scores",)

    def check(self, registry: Registry) -> list[tuple[str, str]]:
        problems = super().check(registry)
        for i, entry in enumerate(self.config.filters):
            name = entry_name(entry)
            try:
                stateful = registry.load("filters", str(name)).stateful
            except PluginError:  # reported by check_components
                continue
            if stateful:
                problems.append((f"filters.{i}.name", f"{name!r} is stateful: no per-pair score"))
        return problems

    def run(self, ctx: StepContext) -> None:
        source = Corpus.open(ctx.inputs["corpus"].path)
        out = ctx.output("scores")
        columns: list[str] = [spec.label for spec in make_specs(self.config.filters)]
        lines = 0
        with open(out / SCORES_FILE, "w", encoding="utf-8", newline="\n") as handle:
            shards = score_corpus(ctx, source, self.config.filters, self.config.shard_size)
            for number, (raw, columns, table) in enumerate(shards):
                if not number:
                    handle.write("\t".join(columns) + "\n")
                np.savetxt(handle, table, fmt="%.9g", delimiter="\t")
                lines += raw.count
            if not lines:
                handle.write("\t".join(columns) + "\n")
        ctx.stats.add("pairs", lines)
        langs = list(source.langs)
        write_artifact_meta(out, type="scores", columns=columns, lines=lines, langs=langs)
