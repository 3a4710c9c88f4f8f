"""Scores with reproducibility signatures, and the corpus evaluation the CLI and steps share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mtcore.contracts.components import entry_name, entry_settings
from mtcore.contracts.errors import DataError, PluginError
from mtcore.contracts.kinds import Metric
from mtcore.contracts.registry import Registry
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import STRICT, LineReader


@dataclass(frozen=True)
class Score:
    """One corpus-level score. ``signature`` is sacrebleu's, so the number can be reproduced."""

    metric: str
    score: float
    signature: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.metric} = {self.score:.2f}  ({self.signature})"


def read_segments(path: Path) -> list[str]:
    """Reads a hypothesis or reference file strictly: bad input is an error with file and line."""
    out: list[str] = []
    for _, text in LineReader(path, STRICT, Stats()):
        assert text is not None  # STRICT never drops
        out.append(text)
    return out


def check_lengths(hyps: Sequence[str], refs: Sequence[Sequence[str]], names: Sequence[str]) -> None:
    for name, ref in zip(names, refs, strict=True):
        if len(ref) != len(hyps):
            raise DataError(
                f"{name} has {len(ref)} lines but the hypotheses have {len(hyps)}: "
                "a reference must have one line per hypothesis"
            )


def build_metrics(registry: Registry, entries: Sequence[str | dict[str, Any]]) -> list[Metric]:
    metrics = []
    for entry in entries:
        name = str(entry_name(entry))
        plugin = registry.load("metrics", name).from_dict(entry_settings(entry))
        if not isinstance(plugin, Metric):
            raise PluginError(f"metric {name!r} is not a Metric")
        metrics.append(plugin)
    return metrics


def evaluate(
    metrics: Sequence[Metric], hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str
) -> list[Score]:
    return [metric.corpus_score(hyps, refs, lang) for metric in metrics]
