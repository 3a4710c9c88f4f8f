"""Scores a hypothesis corpus against references with metric plugins."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import sys
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from mtcore.api import (
    NOT_IDENTITY,
    Corpus,
    Metric,
    PluginConfig,
    PluginError,
    Score,
    Step,
    StepContext,
    StepError,
    components,
    write_artifact_meta,
)
from mtcore.api.engine import build_metrics, check_lengths
from mtcore_plugins.common.runtime.isolated import in_worker, run_in_worker
from mtcore_plugins.steps._copies import copy_report


class EvaluateConfig(PluginConfig):
    metrics: list[str | dict[str, Any]] = Field(
        default_factory=lambda: list[str | dict[str, Any]](["bleu", "chrf"]),
        description="metric names or {name, settings}",
        json_schema_extra=components("metrics"),
    )
    lang: str | None = Field(None, description="target language; default: the hypothesis language")
    metric_memory_gb: float = Field(
        0.0,
        ge=0,
        le=4096,
        description="memory bound of each heavy (neural) metric's worker process, GB; 0: none",
        json_schema_extra=NOT_IDENTITY,
    )
    copies: bool = Field(
        True,
        description="report the share of hypotheses that copy their source or are in the wrong "
        "language (neural metrics reward both)",
    )
    src: str | None = Field(
        None,
        description="source language (names the direction in the report; its column feeds "
        "metrics that read the source, COMET); default: the reference corpus' other language",
    )


def metric_identity(metric: Metric, resources: dict[str, str]) -> str:
    """What makes two metric instances score alike: the class, the settings and the resources
    (models by path). Heavy metrics of one identity share a worker process and its loaded model."""
    kind = type(metric)
    return json.dumps(
        [f"{kind.__module__}.{kind.__qualname__}", metric.config.model_dump_json(), resources],
        sort_keys=True,
    )


SET_UP_KEPT = 2
"""Heavy metric instances (each may hold a loaded model) a worker process keeps set up."""

_SET_UP: OrderedDict[str, Metric] = OrderedDict()


def _set_up(metric: Metric, resources: dict[str, str]) -> Metric:
    """``metric`` set up with ``resources``; in a worker process, a heavy metric of an identity
    already set up there is that earlier instance (its model loaded once, on its first score,
    and kept), the least recently used past :data:`SET_UP_KEPT` being dropped."""
    if not (metric.heavy and in_worker()):
        metric.setup({role: Path(path) for role, path in resources.items()})
        return metric
    key = metric_identity(metric, resources)
    kept = _SET_UP.get(key)
    if kept is not None:
        _SET_UP.move_to_end(key)
        return kept
    metric.setup({role: Path(path) for role, path in resources.items()})
    _SET_UP[key] = metric
    if len(_SET_UP) > SET_UP_KEPT:
        while len(_SET_UP) > SET_UP_KEPT:
            _SET_UP.popitem(last=False)
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()  # the dropped model's memory back to the device
    return metric


def follow(bar: Any, done: int, total: int) -> None:
    """A progress bar (tqdm's, or the run display's) set to what a worker reported: the
    batches of one phase of a neural metric (COMET-22 embeds the distinct texts, then scores)."""
    bar.total = total
    bar.n = done
    refresh = getattr(bar, "refresh", None)
    if refresh is not None:
        refresh()


def score_one(
    metric: Metric,
    hyps: list[str],
    refs: list[list[str]],
    lang: str,
    sources: list[str] | None,
    resources: dict[str, str],
) -> Score:
    """One metric's score (run in a worker process for heavy metrics: module level, picklable;
    the worker keeps the metric set up for its later calls, see :func:`_set_up`)."""
    metric = _set_up(metric, resources)
    if metric.needs_source:
        if sources is None:
            raise PluginError(
                f"metric {metric.name!r} reads the source: the reference corpus needs a column in "
                "the source language (set the step's `src`)"
            )
        return metric.corpus_score(hyps, refs, lang, sources=sources)  # type: ignore[call-arg]
    return metric.corpus_score(hyps, refs, lang)


STAGE_ID = re.compile(r"^eval_(?P<stage>[A-Za-z0-9]+)_(?P<direction>[A-Za-z0-9]+)$")
"""The shipped recipes' convention: the evaluate step of a stage is ``eval_<stage>_<direction>``."""


EXTRA_REFS = ("ref2", "ref3", "ref4")
"""More references of the same segments (other translators), line for line with ``ref``."""

SEGMENT_SCORES = "segments.jsonl"
"""One line per metric that has segment scores: {metric, signature, scores}, for paired
bootstrap (scripts/stage_significance.py)."""

OWN_INPUTS = ("hyp", "ref", *EXTRA_REFS)
"""Every other input is a resource of the metrics (a model fetched by id)."""


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
        "*": False,
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

    def _score(
        self,
        ctx: StepContext,
        metrics: list[Metric],
        hyps: list[str],
        refs: list[list[str]],
        lang: str,
        sources: list[str] | None,
        resources: dict[str, str],
    ) -> list[tuple[Metric, Score]]:
        """Every metric's score. A heavy metric runs in a worker process of its own identity
        (kept for later steps' calls, its model loaded once: see ``isolated``); each score is
        kept in the step's scratch as soon as it exists, so a metric that fails (a crash, the
        memory bound) fails the step naming it, and the rerun scores only what is missing."""
        done = ctx.scratch("scores")
        scored: list[tuple[Metric, Score]] = []
        failed: list[str] = []
        for index, metric in enumerate(metrics):
            settings = metric.config.model_dump_json().encode()
            key = f"{index}-{metric.name}-{hashlib.sha256(settings).hexdigest()[:16]}"
            kept = done / f"{key}.json"
            if kept.is_file():
                scored.append((metric, Score(**json.loads(kept.read_text()))))
                continue
            what = f"{ctx.step_id}: metric {metric.name!r}"
            args = (metric, hyps, refs, lang, sources, resources)
            try:
                if metric.heavy:
                    with ctx.progress(None, metric.name) as bar:
                        score = run_in_worker(
                            metric_identity(metric, resources),
                            what,
                            score_one,
                            *args,
                            memory_gb=self.config.metric_memory_gb,
                            progress=lambda done, total, bar=bar: follow(bar, done, total),
                        )
                else:
                    score = score_one(*args)
            except PluginError as error:
                ctx.log.error("%s", error)
                failed.append(str(error) if str(error).startswith(what) else f"{what}: {error}")
                continue
            partial = kept.with_suffix(".part")
            partial.write_text(json.dumps(score.as_dict(), ensure_ascii=False))
            os.replace(partial, kept)
            scored.append((metric, score))
        if failed:
            kept_names = ", ".join(s.metric for _, s in scored) or "none"
            raise StepError("\n".join(failed) + f"\n(scores kept for the rerun: {kept_names})")
        return scored

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
        resources = {r: str(a.path) for r, a in ctx.inputs.items() if r not in OWN_INPUTS}
        scored = self._score(ctx, metrics, hyps, refs, lang, sources, resources)
        test_set = ctx.inputs["ref"].meta.get("dataset")
        if test_set:
            named = f"|test:{test_set}"
            scored = [(m, replace(s, signature=s.signature + named)) for m, s in scored]
        direction = f"{src}-{lang}" if src else lang
        out = ctx.output("scores")
        segments = [
            {"metric": s.metric, "signature": s.signature, "scores": s.details["segments"]}
            for _, s in scored
            if isinstance(s.details.get("segments"), list)
        ]
        scored = [
            (m, replace(s, details={k: v for k, v in s.details.items() if k != "segments"}))
            for m, s in scored
        ]
        copies = None
        if self.config.copies:
            copies = copy_report(hyps, sources, lang, registry=ctx.registry)
        payload = {
            "lang": lang,
            "direction": direction,
            "segments": len(hyps),
            "references": len(refs),
            **({"test_set": test_set} if test_set else {}),
            "scores": [s.as_dict() for _, s in scored],
            **({"copies": copies} if copies is not None else {}),
        }
        (out / "scores.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
        if segments:
            with (out / SEGMENT_SCORES).open("w", encoding="utf-8") as stream:
                for row in segments:
                    stream.write(json.dumps(row, ensure_ascii=False) + "\n")
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
        if copies is not None and any(metric.heavy for metric, _ in scored):
            self._guard_metrics(ctx, copies, direction)
        ctx.stats.add("segments", len(hyps))

    def _guard_metrics(self, ctx: StepContext, copies: dict[str, Any], direction: str) -> None:
        """The copy guard's shares beside a neural metric's score (percent, lower is better), so
        the stage table shows a score bought with untranslated or wrong-language output (every
        step keeps them in ``scores.json``)."""
        settings = copies["settings"]
        guards = {
            "copies": f"copy|chrf>={settings['copy_chrf']}|min:{settings['min_letters']}",
            "wrong_language": f"langid|{settings['backend']}|odds:{settings['max_odds']:g}"
            f"|min:{settings['min_letters']}",
        }
        for key, signature in guards.items():
            found = copies.get(key)
            if not isinstance(found, dict) or "share" not in found:
                continue
            label = {"copies": "Copies%", "wrong_language": "WrongLang%"}[key]
            ctx.metrics[label] = {
                "score": round(100 * found["share"], 2),
                "signature": signature,
                "direction": direction,
                "higher_is_better": False,
            }
            if found["count"]:
                ctx.log.warning(
                    "%s: %d of %d hypotheses %s (lines %s)",
                    direction,
                    found["count"],
                    copies["lines"],
                    "copy their source" if key == "copies" else "are in another language",
                    ", ".join(map(str, found["examples"])),
                )
