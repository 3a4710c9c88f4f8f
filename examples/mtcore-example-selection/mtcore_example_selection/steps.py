"""A step a recipe can name once this package is installed: ``length_report``, the length
profile of a corpus per language (characters per line: mean, median, 95th percentile, longest),
written as ``report/lengths.json`` and reported as the step's metrics, so that a recipe shows
how a cleaning or selection step changed the shape of its data."""

from __future__ import annotations

import json
from typing import ClassVar

import numpy as np
from pydantic import Field

from mtcore.api import Corpus, PluginConfig, Step, StepContext, write_artifact_meta


class LengthReportConfig(PluginConfig):
    percentile: float = Field(95, gt=0, le=100, description="the high percentile reported")


class LengthReportStep(Step[LengthReportConfig]):
    """Input ``corpus``; output ``report`` (``lengths.json``: per language, in characters)."""

    name = "length_report"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True}
    outputs: ClassVar[tuple[str, ...]] = ("report",)

    def run(self, ctx: StepContext) -> None:
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        lengths: list[list[int]] = [[] for _ in corpus.langs]
        for pair in corpus:
            for side, text in enumerate(pair):
                lengths[side].append(len(text))
        found = {}
        for lang, values in zip(corpus.langs, lengths, strict=True):
            array = np.asarray(values or [0])
            found[lang] = {
                "lines": len(values),
                "mean": round(float(array.mean()), 3),
                "median": float(np.median(array)),
                f"p{self.config.percentile:g}": float(np.percentile(array, self.config.percentile)),
                "max": int(array.max()),
            }
            ctx.metrics[f"mean_chars.{lang}"] = found[lang]["mean"]
        out = ctx.output("report")
        (out / "lengths.json").write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")
        write_artifact_meta(out, type="length_report", langs=list(corpus.langs))
        ctx.stats.add("pairs_in", len(lengths[0]))
