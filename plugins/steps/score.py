"""Score mode: every filter of a chain scores every pair, nothing is dropped. The output is a
tab-separated table aligned with the corpus, one column per filter (per side where the filter
scores each side), for selectors to rank by."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from mtcore.api import (
    Corpus,
    DataError,
    PluginConfig,
    PluginError,
    Registry,
    Step,
    StepContext,
    components,
    make_specs,
    score_corpus,
    write_artifact_meta,
)

SCORES_FILE = "scores.tsv"


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

    name = "score"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "*": False}
    outputs: ClassVar[tuple[str, ...]] = ("scores",)

    def check(self, registry: Registry) -> list[tuple[str, str]]:
        problems = super().check(registry)
        for i, entry in enumerate(self.config.filters):
            name = entry if isinstance(entry, str) else entry.get("name")
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


def read_scores(path: Path) -> tuple[list[str], np.ndarray]:
    """The columns and the (pairs, columns) table of a score step's output directory."""
    with open(path / SCORES_FILE, encoding="utf-8") as handle:
        header = handle.readline().rstrip("\n").split("\t")
        table = np.loadtxt(handle, delimiter="\t", ndmin=2, dtype=np.float64)
    return header, table.reshape(-1, len(header))


def scores_input(
    ctx: StepContext, column: str | None, total: int
) -> tuple[list[str] | None, np.ndarray | None, np.ndarray | None]:
    """The optional ``scores`` input of a step that keeps one pair of a group by score: its
    header and table (checked to have ``total`` rows) and the values of ``column``; Nones
    where the step has no such input. ``column`` without the input, a column the table lacks
    or a table of another length are errors naming the file."""
    artifact = ctx.inputs.get("scores")
    if artifact is None:
        if column is not None:
            raise DataError(
                f"{ctx.step_id}: column {column!r} names a score column, but the step has no "
                f"`scores` input (a score step's output for the same corpus)"
            )
        return None, None, None
    if artifact.type != "scores":
        raise DataError(
            f"{ctx.step_id}: input scores ({artifact.path}) is not a score step's output "
            f"(artifact type {artifact.type!r})"
        )
    header, table = read_scores(artifact.path)
    if len(table) != total:
        raise DataError(
            f"{ctx.step_id}: {artifact.path / SCORES_FILE} has {len(table)} rows but the "
            f"corpus has {total} pairs: score the same corpus you deduplicate"
        )
    if column is None:
        return header, table, None
    if column not in header:
        raise DataError(
            f"{ctx.step_id}: score column {column!r} is not in {artifact.path / SCORES_FILE} "
            f"(columns: {', '.join(header)})"
        )
    return header, table, table[:, header.index(column)]
