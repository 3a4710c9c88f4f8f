"""Scores a hypothesis corpus against references with metric plugins."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, ClassVar

from pydantic import Field

from mtcore.api import (
    Corpus,
    Metric,
    PluginConfig,
    Score,
    Step,
    StepContext,
    StepError,
    build_metrics,
    check_lengths,
    components,
    write_artifact_meta,
)


class EvaluateConfig(PluginConfig):
    metrics: list[str | dict[str, Any]] = Field(
        default_factory=lambda: list[str | dict[str, Any]](["bleu", "chrf"]),
        description="metric names or {name, settings}",
        json_schema_extra=components("metrics"),
    )
    lang: str | None = Field(None, description="target language; default: the hypothesis language")
    src: str | None = Field(
        None,
        description="source language (names the direction in the report; its column feeds "
        "metrics that read the source, COMET); default: the reference corpus' other language",
    )


def score_all(
    metrics: list[Metric], hyps: list[str], refs: list[list[str]], lang: str, sources: Any
) -> list[tuple[Metric, Score]]:
    """Each metric's score; metrics that declare ``needs_source`` also get the sources."""
    out = []
    for metric in metrics:
        if getattr(metric, "needs_source", False):
            score = metric.corpus_score(hyps, refs, lang, sources=sources)  # type: ignore[call-arg]
        else:
            score = metric.corpus_score(hyps, refs, lang)
        out.append((metric, score))
    return out


STAGE_ID = re.compile(r"^eval_(?P<stage>[A-Za-z0-9]+)_(?P<direction>[A-Za-z0-9]+)$")
"""The shipped recipes' convention: the evaluate step of a stage is ``eval_<stage>_<direction>``."""


EXTRA_REFS = ("ref2", "ref3", "ref4")
"""More references of the same segments (other translators), line for line with ``ref``."""


class EvaluateStep(Step[EvaluateConfig]):
    """``hyp`` is a monolingual corpus; ``ref`` and each of ``ref2``..``ref4`` (more
    translators' references, line for line) contribute their column in the target language, as
    sacrebleu's multi-reference scoring takes them. Scores land in ``scores.json`` and in the
    manifest's metrics, each with its signature and the direction (``en-ja``) the report groups
    by; a reference fetched by id (``{sacrebleu: {test_set: wmt22, ...}}``) names its test set in
    the signature (``|test:sacrebleu:wmt22:en-ja``), as sacrebleu 1.x's signatures did."""

    name = "evaluate"
    inputs: ClassVar[dict[str, bool]] = {
        "hyp": True,
        "ref": True,
        **dict.fromkeys(EXTRA_REFS, False),
    }
    outputs: ClassVar[tuple[str, ...]] = ("scores",)

    def stage(self, step_id: str) -> tuple[str, str] | None:
        match = STAGE_ID.match(step_id)
        return None if match is None else (match["stage"], match["direction"])

    def _source_lang(self, ctx: StepContext, ref_langs: tuple[str, ...], lang: str) -> str | None:
        if self.config.src is not None:
            if self.config.src not in ref_langs:
                raise StepError(
                    f"{ctx.step_id}: src {self.config.src!r} is not a language of the reference "
                    f"corpus {list(ref_langs)}"
                )
            return self.config.src
        others = [x for x in ref_langs if x != lang]
        return others[0] if len(others) == 1 else None

    def run(self, ctx: StepContext) -> None:
        hyp_corpus = Corpus.open(ctx.inputs["hyp"].path)
        lang = self.config.lang or hyp_corpus.langs[0]
        ref_corpus = Corpus.open(ctx.inputs["ref"].path)
        if lang not in ref_corpus.langs:
            raise StepError(
                f"{ctx.step_id}: reference corpus has languages {ref_corpus.langs}, not {lang!r}"
            )
        src = self._source_lang(ctx, ref_corpus.langs, lang)
        column = ref_corpus.langs.index(lang)
        pairs = list(ref_corpus)
        hyps = [pair[0] for pair in hyp_corpus]
        refs = [[pair[column] for pair in pairs]]
        names = [str(ref_corpus.file(lang))]
        for role in (r for r in EXTRA_REFS if r in ctx.inputs):
            extra = Corpus.open(ctx.inputs[role].path)
            if lang not in extra.langs:
                raise StepError(f"{ctx.step_id}: {role} has languages {extra.langs}, not {lang!r}")
            refs.append([pair[extra.langs.index(lang)] for pair in extra])
            names.append(str(extra.file(lang)))
        check_lengths(hyps, refs, names)
        sources = None if src is None else [p[ref_corpus.langs.index(src)] for p in pairs]
        metrics = build_metrics(ctx.registry, self.config.metrics)
        scored = score_all(metrics, hyps, refs, lang, sources)
        test_set = ctx.inputs["ref"].meta.get("dataset")
        if test_set:
            named = f"|test:{test_set}"
            scored = [(m, replace(s, signature=s.signature + named)) for m, s in scored]
        direction = f"{src}-{lang}" if src else lang
        out = ctx.output("scores")
        payload = {
            "lang": lang,
            "direction": direction,
            "segments": len(hyps),
            "references": len(refs),
            **({"test_set": test_set} if test_set else {}),
            "scores": [s.as_dict() for _, s in scored],
        }
        (out / "scores.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
        write_artifact_meta(out, type="scores", lang=lang, direction=direction)
        for metric, score in scored:
            key = score.metric
            for n in range(2, len(scored) + 2):  # two BLEU entries (char, ja-mecab): BLEU#2
                if key not in ctx.metrics:
                    break
                key = f"{score.metric}#{n}"
            ctx.metrics[key] = {
                "score": score.score,
                "signature": score.signature,
                "direction": direction,
                "higher_is_better": getattr(metric, "higher_is_better", True),
            }
            ctx.log.info("%s %s", direction, score)
        ctx.stats.add("segments", len(hyps))
