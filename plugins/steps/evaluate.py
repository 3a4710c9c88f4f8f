"""Scores a hypothesis corpus against references with metric plugins."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import Field

from mtcore.corpus import Corpus
from mtcore.errors import StepError
from mtcore.metrics import build_metrics, check_lengths, evaluate
from mtcore.plugin import PluginConfig
from mtcore.recipe import check_components
from mtcore.registry import Registry
from mtcore.step import Step, StepContext, write_artifact_meta


class EvaluateConfig(PluginConfig):
    metrics: list[str | dict[str, Any]] = Field(
        default_factory=lambda: ["bleu", "chrf"], description="metric names or {name, settings}"
    )
    lang: str | None = Field(None, description="target language; default: the hypothesis language")


class EvaluateStep(Step):
    """``hyp`` is a monolingual corpus; each ``ref`` corpus contributes its column in the
    target language. Scores land in ``scores.json`` and in the manifest's metrics."""

    name = "evaluate"
    Config = EvaluateConfig
    inputs: ClassVar[dict[str, bool]] = {"hyp": True, "ref": True}
    outputs: ClassVar[tuple[str, ...]] = ("scores",)

    def check(self, registry: Registry) -> list[tuple[str, str]]:
        return check_components(registry, "metrics", self.config.metrics, "metrics")

    def plugins_used(self) -> list[tuple[str, str]]:
        return [
            ("metrics", e if isinstance(e, str) else str(e["name"])) for e in self.config.metrics
        ]

    def run(self, ctx: StepContext) -> None:
        hyp_corpus = Corpus.open(ctx.inputs["hyp"].path)
        lang = self.config.lang or hyp_corpus.langs[0]
        ref_corpus = Corpus.open(ctx.inputs["ref"].path)
        if lang not in ref_corpus.langs:
            raise StepError(
                f"{ctx.step_id}: reference corpus has languages {ref_corpus.langs}, not {lang!r}"
            )
        column = ref_corpus.langs.index(lang)
        hyps = [pair[0] for pair in hyp_corpus]
        refs = [[pair[column] for pair in ref_corpus]]
        check_lengths(hyps, refs, [str(ref_corpus.file(lang))])
        scores = evaluate(build_metrics(ctx.registry, self.config.metrics), hyps, refs, lang)
        out = ctx.output("scores")
        payload = {"lang": lang, "segments": len(hyps), "scores": [s.as_dict() for s in scores]}
        (out / "scores.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
        write_artifact_meta(out, type="scores", lang=lang)
        for score in scores:
            ctx.metrics[score.metric] = {"score": score.score, "signature": score.signature}
            ctx.log.info("%s", score)
        ctx.stats.add("segments", len(hyps))
