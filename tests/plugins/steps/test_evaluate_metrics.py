"""The evaluate step with heavy (neural) metrics: each runs in its own worker process, so a
crash or the memory bound names the metric and loses no other score; every score is kept as
soon as it exists and a rerun scores only what is missing; segment scores are kept for paired
bootstrap; the copy guard is reported. The metrics here are real plugins' subclasses whose
scoring does something a neural metric can do to a process (abort, allocate too much)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from mtcore.api import Score, StepError
from mtcore.contracts.registry import load_registry
from mtcore.data.corpus import Corpus
from mtcore_plugins.metrics.chrf import ChrfMetric
from mtcore_plugins.steps import evaluate
from mtcore_plugins.steps.evaluate import SEGMENT_SCORES, EvaluateStep, score_one
from tests.plugins.augmenters.test_augmentation import real_lines, write_corpus
from tests.support.steps import make_ctx

REGISTRY = load_registry()


class SourceLength(ChrfMetric):
    """A heavy metric that reads the source: the hypothesis-to-source length ratio per
    segment. ``crash_flag`` (a file) makes the worker abort while it exists; ``allocate`` makes
    it ask for that many bytes."""

    name = "source_length"
    needs_source: ClassVar[bool] = True
    heavy: ClassVar[bool] = True
    crash_flag = ""
    allocate = 0

    def segment_scores(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        sources: Sequence[str] | None = None,
    ) -> list[float]:
        assert sources is not None
        return [len(h) / max(1, len(s)) for h, s in zip(hyps, sources, strict=True)]

    def corpus_score(self, hyps, refs, lang, sources=None):  # type: ignore[no-untyped-def, override]
        if self.crash_flag and Path(self.crash_flag).exists():
            os.abort()
        if self.allocate:
            bytearray(self.allocate)
        scores = self.segment_scores(hyps, refs, lang, sources)
        return Score("SrcLen", float(np.mean(scores)), "srclen|pid:" + str(os.getpid()),
                     {"segments": scores})  # fmt: skip


class Crashing(SourceLength):
    pass


class Greedy(SourceLength):
    allocate = 3 << 30


SETUPS = 0
"""Set-ups of :class:`Loading` in this process (in a worker: that worker's)."""


class Loading(SourceLength):
    """Counts its set-ups (a model's load) per process and its scores per instance."""

    scored = 0

    def setup(self, resources=None):  # type: ignore[no-untyped-def]
        global SETUPS
        SETUPS += 1
        super().setup(resources)

    def corpus_score(self, hyps, refs, lang, sources=None):  # type: ignore[no-untyped-def]
        self.scored += 1
        score = super().corpus_score(hyps, refs, lang, sources)
        return Score(score.metric, score.score,
                     f"{score.signature}|setups:{SETUPS}|scored:{self.scored}")  # fmt: skip


class Batched(SourceLength):
    """Scores in batches of 8 segments and reports each (``isolated.report``), as COMET's and
    MetricX's batch loops do."""

    def corpus_score(self, hyps, refs, lang, sources=None):  # type: ignore[no-untyped-def]
        from mtcore_plugins.common.runtime.isolated import report

        for done in range(8, len(hyps) + 8, 8):
            time.sleep(0.2)
            report(min(done, len(hyps)), len(hyps))
        return super().corpus_score(hyps, refs, lang, sources)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval")
    en, ja = real_lines("test", "en", 60), real_lines("test", "ja", 60)
    hyps = [*ja[:50], *en[50:55], *ja[55:]]  # five hypotheses copy their English source
    return {
        "hyp": write_corpus(root / "hyp", {"ja": hyps}),
        "ref": write_corpus(root / "ref", {"en": en, "ja": ja}),
    }


def step(**config: object) -> EvaluateStep:
    plugin = REGISTRY.load("steps", "evaluate").from_dict(config)
    assert isinstance(plugin, EvaluateStep)
    return plugin


def chrf() -> ChrfMetric:
    return ChrfMetric.from_dict({})  # type: ignore[return-value]


def test_a_crashing_metric_is_named_and_the_rerun_scores_only_what_is_missing(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    flag = tmp_path / "crash"
    flag.touch()
    crashing = Crashing.from_dict({})
    crashing.crash_flag = str(flag)  # type: ignore[misc]  # the instance is what the worker gets
    ctx = make_ctx(tmp_path / "work", "step", REGISTRY, **corpora)
    hyps = [row[0] for row in Corpus.open(corpora["hyp"])]
    ref = Corpus.open(corpora["ref"])
    refs = [[row[1] for row in ref]]
    sources = [row[0] for row in ref]
    metrics = [chrf(), crashing]
    with pytest.raises(StepError, match=r"metric 'source_length'.*killed by SIGABRT") as raised:
        step()._score(ctx, metrics, hyps, refs, "ja", sources, {})  # type: ignore[arg-type]
    assert "scores kept for the rerun: chrF" in str(raised.value)
    kept = sorted((ctx.work / ".scratch" / "scores").glob("*.json"))
    assert len(kept) == 1 and "chrf" in kept[0].name
    kept[0].write_text(kept[0].read_text().replace('"chrF"', '"chrF-kept"'))
    flag.unlink()
    scored = step()._score(ctx, metrics, hyps, refs, "ja", sources, {})  # type: ignore[arg-type]
    assert [s.metric for _, s in scored] == ["chrF-kept", "SrcLen"]  # chrF was not rescored
    assert f"pid:{os.getpid()}" not in scored[1][1].signature  # scored in another process


def test_the_memory_bound_fails_the_metric_not_the_process(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    ctx = make_ctx(tmp_path / "work", "step", REGISTRY, **corpora)
    with pytest.raises(StepError, match=r"source_length'.*out of memory above .*0.5 GB"):
        step(metric_memory_gb=0.5)._score(ctx, [Greedy.from_dict({})], ["a"], [["a"]], "ja",
                                          ["b"], {})  # type: ignore[list-item]  # fmt: skip


def test_segment_scores_and_the_copy_guard_are_kept(
    corpora: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metric = SourceLength.from_dict({})
    monkeypatch.setattr(
        "mtcore_plugins.steps.evaluate.build_metrics", lambda registry, entries: [chrf(), metric]
    )
    ctx = make_ctx(tmp_path / "work", "step", REGISTRY, **corpora)
    step().run(ctx)
    out = ctx.work / "scores"
    payload = json.loads((out / "scores.json").read_text())
    assert [s["metric"] for s in payload["scores"]] == ["chrF", "SrcLen"]
    assert all("segments" not in s["details"] for s in payload["scores"])
    (row,) = [json.loads(line) for line in (out / SEGMENT_SCORES).read_text().splitlines()]
    assert row["metric"] == "SrcLen" and len(row["scores"]) == 60
    assert np.mean(row["scores"]) == pytest.approx(payload["scores"][1]["score"])
    copies = payload["copies"]
    assert copies["copies"]["examples"] == [51, 52, 53, 54, 55]
    assert copies["wrong_language"]["examples"] == [51, 52, 53, 54, 55]
    assert copies["wrong_language"]["found"] == {"en": 5}
    assert ctx.metrics["Copies%"]["score"] == pytest.approx(100 * 5 / 60, abs=0.01)
    assert ctx.metrics["Copies%"]["higher_is_better"] is False
    assert ctx.metrics["WrongLang%"]["signature"].startswith("langid|")


def test_a_heavy_metric_shows_its_progress_in_the_step_bar(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    from mtcore.report.display import LiveBar

    bars: list[LiveBar] = []

    def sink(step_id: str, total: int | None, desc: str) -> LiveBar:
        bars.append(LiveBar(total, desc))
        return bars[-1]

    ctx = make_ctx(tmp_path / "work", "step", REGISTRY, **corpora)
    ctx.progress_sink = sink
    hyps = [f"line {i}" for i in range(30)]
    step()._score(ctx, [Batched.from_dict({})], hyps, [hyps], "ja", hyps, {})
    (bar,) = bars
    assert bar.desc == "source_length" and (bar.n, bar.total) == (30, 30)


def test_later_steps_reuse_the_worker_and_its_set_up_metric(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    """Each evaluate step pickles its own metric instance to the worker of the metric's
    identity; the worker keeps the first one set up (its model loaded once) for the others."""
    signatures, setups = [], SETUPS
    for n, settings in enumerate([{}, {}, {"char_order": 5}]):
        ctx = make_ctx(tmp_path / f"work{n}", "step", REGISTRY, **corpora)
        metrics: list = [Loading.from_dict(settings)]
        ((_, score),) = step()._score(ctx, metrics, ["a"], [["a"]], "ja", ["b"], {})
        signatures.append(dict(part.split(":") for part in score.signature.split("|")[1:]))
    first, second, other = signatures
    assert first["pid"] == second["pid"] != str(os.getpid())
    assert (first["setups"], first["scored"]) == ("1", "1")
    assert (second["setups"], second["scored"]) == ("1", "2")  # the same instance, set up once
    assert other["pid"] != first["pid"] and other["setups"] == "1"  # other settings: own worker
    assert setups == SETUPS  # nothing was set up in this process


def test_a_worker_keeps_two_set_up_metrics_the_least_recently_used_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(evaluate, "in_worker", lambda: True)
    monkeypatch.setattr(evaluate, "_SET_UP", type(evaluate._SET_UP)())

    def scored(order: int) -> int:
        metric: Any = Loading.from_dict({"char_order": order})
        score = score_one(metric, ["a"], [["a"]], "ja", ["b"], {})
        return int(score.signature.rsplit("scored:", 1)[1])

    assert [scored(n) for n in (1, 2, 1, 3, 1, 2)] == [1, 1, 2, 1, 3, 1]  # 2 was dropped for 3
    assert len(evaluate._SET_UP) == 2
    light = chrf()
    assert score_one(light, ["a"], [["a"]], "ja", None, {}).metric == "chrF"
    assert len(evaluate._SET_UP) == 2  # light metrics are not kept
