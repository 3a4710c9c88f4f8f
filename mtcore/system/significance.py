"""Is a change between two evaluate steps significant? Paired bootstrap resampling (Koehn 2004)
of the two systems the steps kept, on their shared references: sacrebleu's test for the metrics
it has (BLEU, chrF, built by the step's own metric plugins from its config), and the same test
on segment means for the metrics whose score is the mean of the segment scores the step kept
(COMET, MetricX). The run page and ``scripts/stage_significance.py`` both ask this module."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mtcore.contracts.errors import MtcoreError
from mtcore.contracts.registry import Registry
from mtcore.recipe.paths import finished_dir, step_dirname
from mtcore.system.metrics import build_metrics

SEGMENT_SCORES = "segments.jsonl"
"""The evaluate step's segment scores, in its ``scores`` output: a JSON line per metric
(``metric``, ``signature``, ``scores``). The evaluate plugin writes it under this name."""

REFERENCES = ("ref", "ref2", "ref3", "ref4")
"""The evaluate step's inputs that hold references (``ref2``..: more translators')."""

SAMPLES = 1000
SEED = 12345  # sacrebleu's default seed of its own bootstrap


@dataclass(frozen=True)
class Change:
    """One metric's change from the first system to the second and its p-value; ``places``:
    the decimals its scores are worth (2 for BLEU and chrF, 4 for a segment mean)."""

    metric: str
    before: float
    after: float
    p_value: float
    places: int

    @property
    def delta(self) -> float:
        return self.after - self.before


def texts(workdir: Path, reference: dict[str, str], lang: str | None = None) -> list[str]:
    """The ``lang`` column (the only one by default) of the corpus a manifest input names."""
    from mtcore.data.corpus import Corpus

    dirname = step_dirname(reference["step"], reference["hash"])
    corpus = Corpus.open(finished_dir(workdir, dirname) / reference["output"])
    column = corpus.langs.index(lang) if lang else 0
    return [pair[column] for pair in corpus]


def paired_metrics(
    registry: Registry, entries: Sequence[str | dict[str, Any]], lang: str
) -> dict[str, Any]:
    """Score name -> the sacrebleu metric an evaluate step with these metric ``entries`` scores
    ``lang`` with, built by the step's own metric plugins (those with a ``sacrebleu`` method:
    BLEU, chrF); a second metric of one name is named as the step names it (``BLEU#2``)."""
    found: dict[str, Any] = {}
    for metric in build_metrics(registry, entries):
        if not hasattr(metric, "sacrebleu"):
            continue
        name = str(metric.score_name)  # type: ignore[attr-defined]
        key = name
        for n in range(2, len(found) + 2):
            if key not in found:
                break
            key = f"{name}#{n}"
        found[key] = metric.sacrebleu(lang)
    return found


def segment_scores(workdir: Path, manifest: dict[str, Any]) -> dict[str, list[float]]:
    """Metric -> its segment scores, as the evaluate step kept them (``SEGMENT_SCORES``)."""
    dirname = step_dirname(manifest["id"], manifest["hash"])
    path = finished_dir(workdir, dirname) / "scores" / SEGMENT_SCORES
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return {row["metric"]: [float(x) for x in row["scores"]] for row in rows}


def paired_mean_bootstrap(
    first: Sequence[float], second: Sequence[float], samples: int = SAMPLES, seed: int = SEED
) -> tuple[float, float, float]:
    """(mean of first, mean of second, p-value) of sacrebleu's paired bootstrap resampling,
    for a metric whose corpus score is the mean of its segment scores: the same resampled
    segments for both systems, the deltas centred on their mean (the null hypothesis), and the
    share of them at least as far from zero as the observed delta (Koehn 2004)."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(a), size=(samples, len(a)))
    deltas = b[index].mean(axis=1) - a[index].mean(axis=1)
    observed = float(b.mean() - a.mean())
    extreme = np.abs(deltas - deltas.mean()) >= abs(observed)
    return float(a.mean()), float(b.mean()), float((extreme.sum() + 1) / (samples + 1))


def _means_test(
    workdir: Path, old: dict[str, Any], new: dict[str, Any], samples: int
) -> list[Change]:
    kept = segment_scores(workdir, old), segment_scores(workdir, new)
    changes = []
    for metric in kept[1]:
        if metric not in kept[0] or metric not in old["metrics"] or metric not in new["metrics"]:
            continue
        for manifest, segments in zip((old, new), kept, strict=True):
            mean = sum(segments[metric]) / max(1, len(segments[metric]))
            if abs(mean - manifest["metrics"][metric]["score"]) > 1e-3:
                raise MtcoreError(
                    f"{manifest['id']}: {metric}'s segment scores do not average to its score"
                )
        first, second, p_value = paired_mean_bootstrap(kept[0][metric], kept[1][metric], samples)
        changes.append(Change(metric, first, second, p_value, 4))
    return changes


def _sacrebleu_test(
    workdir: Path,
    metrics: dict[str, Any],
    old: dict[str, Any],
    new: dict[str, Any],
    lang: str,
    samples: int,
) -> list[Change]:
    from sacrebleu.significance import PairedTest

    refs = [texts(workdir, new["inputs"][r], lang) for r in REFERENCES if r in new["inputs"]]
    hyps = texts(workdir, old["inputs"]["hyp"]), texts(workdir, new["inputs"]["hyp"])
    systems: list[tuple[str, Sequence[str]]] = [("a", hyps[0]), ("b", hyps[1])]
    changes = []
    for metric, scorer in metrics.items():
        # a test per metric: sacrebleu names its results by the metric's own name, which two
        # BLEUs share; the resampled segments are the same in each test (drawn from the seed)
        _, results = PairedTest(
            systems, {metric: scorer}, refs, test_type="bs", n_samples=samples
        )()
        pair: list[Any] = next(pair for name, pair in results.items() if name != "System")
        first, second = pair
        for manifest, result in ((old, first), (new, second)):
            recorded = manifest["metrics"][metric]
            if abs(result.score - recorded["score"]) > 0.01:
                raise MtcoreError(
                    f"{manifest['id']}: {metric} rescored {result.score:.2f}, the evaluate step "
                    f"recorded {recorded['score']:.2f} ({recorded['signature']})"
                )
        # the same output (a stage that changed nothing) has no change to test; sacrebleu's
        # bootstrap gives it its smallest p-value, 1/(samples + 1)
        p_value = 1.0 if hyps[0] == hyps[1] else float(second.p_value)
        changes.append(Change(metric, first.score, second.score, p_value, 2))
    return changes


def paired_test(
    workdir: Path,
    registry: Registry,
    old: dict[str, Any],
    new: dict[str, Any],
    samples: int = SAMPLES,
) -> list[Change]:
    """The paired bootstrap test of two finished evaluate steps (their manifests): a change per
    metric that has a test, the segment means first (COMET, MetricX), then BLEU and chrF as the
    newer step's config builds them. Raises :class:`MtcoreError` when the steps do not share
    their references, no metric has a test, or a rescored system does not match its recorded
    score (the test would be of another number than the one shown)."""
    if "hyp" not in old["inputs"] or "hyp" not in new["inputs"]:
        raise MtcoreError(f"{old['id']}, {new['id']}: not both evaluate steps with a hypothesis")
    if any(old["inputs"].get(r) != new["inputs"].get(r) for r in REFERENCES):
        raise MtcoreError(f"{old['id']} and {new['id']} do not score the same references")
    scored = [v for v in new["metrics"].values() if isinstance(v, dict) and "direction" in v]
    if not scored:
        raise MtcoreError(f"{new['id']}: no score with a direction")
    lang = str(scored[0]["direction"]).split("-")[-1]
    entries = new.get("config", {}).get("metrics", [])
    metrics = {
        name: metric
        for name, metric in paired_metrics(registry, entries, lang).items()
        if name in new["metrics"] and name in old["metrics"]
    }
    changes = _means_test(workdir, old, new, samples)
    if metrics:
        changes += _sacrebleu_test(workdir, metrics, old, new, lang, samples)
    if not changes:
        raise MtcoreError(
            f"{new['id']}: no metric with a paired test (BLEU, chrF, and those with kept segment "
            "scores: COMET, MetricX)"
        )
    return changes
