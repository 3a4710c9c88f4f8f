"""scripts/stage_significance.py builds each paired test's metric with the evaluate step's own
metric plugins, from the step's config, so that it scores what the recipe scored (a lowercased
BLEU stays lowercased, a chrF with another beta keeps it). The full script runs on finished
runs in test_recipes.py's end-to-end tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sacrebleu
import yaml
from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.contracts.registry import load_registry
from mtcore.recipe.load import StepSpec
from mtcore.system.metrics import build_metrics
from tests.conftest import SHARED, real_slice

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "stage_significance.py"
REGISTRY = load_registry()


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stage_significance", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate_step(metrics: list[Any]) -> StepSpec:
    plugin = REGISTRY.load("steps", "evaluate").from_dict({"metrics": metrics})
    return StepSpec("eval_x", "evaluate", plugin)


def lines(tmp_path: Path, lang: str) -> tuple[list[str], list[str]]:
    """Real Tanaka references and a system that differs in case and in one word a sentence."""
    refs = real_slice(tmp_path, "test", 200)[lang].read_text(encoding="utf-8").splitlines()
    return [line.capitalize().replace(" the ", " a ", 1) for line in refs], refs


@pytest.mark.parametrize(
    ("entry", "lang"),
    [
        ({"name": "bleu", "tokenize": "13a", "lowercase": True}, "en"),
        ("bleu", "ja"),  # auto: ja-mecab
        ({"name": "bleu", "tokenize": "wmt"}, "ja"),  # char into Japanese
        ({"name": "bleu", "smooth_method": "floor"}, "en"),
        ("chrf", "en"),
        ({"name": "chrf", "word_order": 2, "lowercase": True}, "en"),
        ({"name": "chrf", "beta": 3}, "en"),
    ],
    ids=["bleu-13a-lc", "bleu-auto-ja", "bleu-wmt-ja", "bleu-floor", "chrf", "chrf++-lc", "beta3"],
)
def test_paired_metric_scores_as_the_evaluate_step(entry: Any, lang: str, tmp_path: Path) -> None:
    hyps, refs = lines(tmp_path, lang)
    (recorded,) = [m.corpus_score(hyps, [refs], lang) for m in build_metrics(REGISTRY, [entry])]
    paired = script().paired_metrics(REGISTRY, evaluate_step([entry]), lang)
    assert list(paired) == [recorded.metric]
    rescored = paired[recorded.metric].corpus_score(hyps, [refs])
    assert rescored.score == pytest.approx(recorded.score, abs=1e-4)
    assert str(paired[recorded.metric].get_signature()) == recorded.signature


def test_beta_changes_chrf_but_not_its_signature(tmp_path: Path) -> None:
    """Why the signature is not enough to rebuild a metric: chrF's omits beta."""
    hyps, refs = lines(tmp_path, "en")
    step = evaluate_step(["chrf", {"name": "chrf", "beta": 1}])
    default, recall_light = build_metrics(REGISTRY, step.plugin.config.metrics)
    a, b = default.corpus_score(hyps, [refs], "en"), recall_light.corpus_score(hyps, [refs], "en")
    assert a.signature == b.signature and a.score != pytest.approx(b.score, abs=0.05)


def test_lowercase_in_the_step_config_changes_the_score(tmp_path: Path) -> None:
    _, refs = lines(tmp_path, "en")
    hyps = [line.upper() for line in refs]
    pair = script().paired_metrics
    cased = pair(REGISTRY, evaluate_step(["bleu"]), "en")["BLEU"]
    lowered = pair(REGISTRY, evaluate_step([{"name": "bleu", "lowercase": True}]), "en")["BLEU"]
    assert lowered.corpus_score(hyps, [refs]).score == pytest.approx(100.0)
    assert cased.corpus_score(hyps, [refs]).score < 5.0


def test_metrics_without_a_paired_test_are_left_out() -> None:
    paired = script().paired_metrics(REGISTRY, evaluate_step(["ter", "bleu"]), "en")
    assert list(paired) == ["BLEU"]


WMT22 = SHARED / "ja-en" / "wmt-conference+wmt22-news-systems" / "txt"
NT5_HYP = WMT22 / "system-outputs" / "generaltest2022.ja-en.hyp.NT5.en"
WMT22_REF = WMT22 / "references" / "generaltest2022.ja-en.ref.A.en"


@pytest.mark.skipif(not NT5_HYP.exists(), reason=f"WMT22 data not found at {WMT22}")
def test_ablate_compares_each_stage_with_the_variant(tmp_path: Path) -> None:
    """NT5's real WMT22 Ja->En output, lowercased by a `lower` step before the `sys` stage is
    scored (`raw` scores it as is). With --ablate lower, the script compares each stage with
    the variant's: `sys` changes by the cased BLEU that lowercasing cost (significant over
    2,008 lines), `raw` is the same step in both and is left out."""
    doc = {
        "name": "sig",
        "executor": {"workers": 1},
        "data": {
            "hyp": {"source": "local", "files": {"en": str(NT5_HYP)}},
            "ref": {"source": "local", "files": {"en": str(WMT22_REF)}},
        },
        "steps": {
            "lower": {
                "kind": "normalize",
                "inputs": {"corpus": "hyp"},
                "processors": ["lowercase"],
            },
            "eval_raw_jaen": {"kind": "evaluate", "inputs": {"hyp": "hyp", "ref": "ref"}},
            "eval_sys_jaen": {"kind": "evaluate", "inputs": {"hyp": "lower", "ref": "ref"}},
        },
    }
    path = tmp_path / "sig.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    work = tmp_path / "w"
    ran = CliRunner().invoke(cli, ["run", str(path), "-w", str(work), "-q", "--ablate", "lower"])
    assert ran.exit_code == 0, ran.output

    def run(*extra: str) -> list[list[str]]:
        argv = [sys.executable, str(SCRIPT), str(path), "-w", str(work), "--samples", "200"]
        done = subprocess.run([*argv, *extra], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        return [line.strip("| ").split(" | ") for line in done.stdout.splitlines()[2:]]

    refs = [WMT22_REF.read_text(encoding="utf-8").splitlines()]
    hyps = NT5_HYP.read_text(encoding="utf-8").splitlines()
    cost = sacrebleu.corpus_bleu(hyps, refs).score
    cost -= sacrebleu.corpus_bleu([h.lower() for h in hyps], refs).score
    (row,) = run("--ablate", "lower")
    assert row[:2] == ["jaen", "sys: full -> -lower"]
    assert float(row[2]) == pytest.approx(cost, abs=0.011) and cost > 1
    assert float(row[3]) < 0.05  # BLEU p-value
    (consecutive,) = run()  # without --ablate: the stage above, in the full recipe
    assert consecutive[1] == "raw -> sys"
    assert float(consecutive[2]) == pytest.approx(-cost, abs=0.011)


def test_the_paired_bootstrap_of_segment_means_is_sacrebleus_test() -> None:
    """For a metric whose score is a mean of segment scores (COMET, MetricX), the test is
    sacrebleu's paired bootstrap (resampled segments shared by both systems, deltas centred
    on their mean) on the means: p is 1 for the same system, small for a clear gain, large for
    noise, and the same on every call (seeded)."""
    import numpy as np

    rng = np.random.default_rng(0)
    first = rng.uniform(0.4, 0.9, size=300).tolist()
    better = [x + 0.05 + rng.normal(0, 0.02) for x in first]
    noisy = [x + rng.normal(0, 0.05) for x in first]
    test = script().paired_mean_bootstrap
    a, b, p = test(first, better, 1000)
    assert (a, b) == pytest.approx((np.mean(first), np.mean(better)))
    assert p < 0.01
    assert test(first, first, 1000)[2] == 1.0
    assert test(first, noisy, 1000)[2] > 0.05
    assert test(first, better, 1000) == test(first, better, 1000)  # seeded
