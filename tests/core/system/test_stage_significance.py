"""The paired bootstrap test of mtcore.system.significance, which the run page and
scripts/stage_significance.py both use: each metric is built by the evaluate step's own metric
plugins from the config its manifest records, so that it scores what the recipe scored (a
lowercased BLEU stays lowercased, a chrF with another beta keeps it); on a finished run the
page and the script give the same p-values, and they are sacrebleu's. The full script also runs
on finished runs in test_recipes.py's end-to-end tests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sacrebleu
import yaml
from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.contracts.registry import load_registry
from mtcore.contracts.step import config_dict
from mtcore.report.page import collect, significance, write_page
from mtcore.system.metrics import build_metrics
from mtcore.system.significance import (
    SEGMENT_SCORES,
    paired_mean_bootstrap,
    paired_metrics,
    paired_test,
)
from mtcore_plugins.steps import evaluate
from tests.support import ROOT
from tests.support.data import SHARED, real_slice

SCRIPT = ROOT / "scripts" / "stage_significance.py"
REGISTRY = load_registry()


def recorded_metrics(metrics: list[Any]) -> list[Any]:
    """The metric entries as an evaluate step's manifest records its config."""
    plugin = REGISTRY.load("steps", "evaluate").from_dict({"metrics": metrics})
    return list(config_dict(plugin.config)["metrics"])


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
    paired = paired_metrics(REGISTRY, recorded_metrics([entry]), lang)
    assert list(paired) == [recorded.metric]
    rescored = paired[recorded.metric].corpus_score(hyps, [refs])
    assert rescored.score == pytest.approx(recorded.score, abs=1e-4)
    assert str(paired[recorded.metric].get_signature()) == recorded.signature


def test_beta_changes_chrf_but_not_its_signature(tmp_path: Path) -> None:
    """Why the signature is not enough to rebuild a metric: chrF's omits beta."""
    hyps, refs = lines(tmp_path, "en")
    default, recall_light = build_metrics(REGISTRY, ["chrf", {"name": "chrf", "beta": 1}])
    a, b = default.corpus_score(hyps, [refs], "en"), recall_light.corpus_score(hyps, [refs], "en")
    assert a.signature == b.signature and a.score != pytest.approx(b.score, abs=0.05)


def test_lowercase_in_the_step_config_changes_the_score(tmp_path: Path) -> None:
    _, refs = lines(tmp_path, "en")
    hyps = [line.upper() for line in refs]
    cased = paired_metrics(REGISTRY, recorded_metrics(["bleu"]), "en")["BLEU"]
    lowered = paired_metrics(
        REGISTRY, recorded_metrics([{"name": "bleu", "lowercase": True}]), "en"
    )
    lowered = lowered["BLEU"]
    assert lowered.corpus_score(hyps, [refs]).score == pytest.approx(100.0)
    assert cased.corpus_score(hyps, [refs]).score < 5.0


def test_metrics_without_a_paired_test_are_left_out() -> None:
    paired = paired_metrics(REGISTRY, recorded_metrics(["ter", "bleu"]), "en")
    assert list(paired) == ["BLEU"]


def test_a_second_metric_of_one_name_is_named_as_the_evaluate_step_names_it() -> None:
    entries = recorded_metrics(["bleu", "chrf", {"name": "bleu", "tokenize": "char"}])
    paired = paired_metrics(REGISTRY, entries, "en")
    assert list(paired) == ["BLEU", "chrF", "BLEU#2"]
    paired["BLEU#2"].corpus_score(["日本語"], [["日本語"]])
    assert "tok:char" in str(paired["BLEU#2"].get_signature())


def test_the_segment_scores_file_is_the_evaluate_steps() -> None:
    """The core names the file the evaluate plugin writes (the core imports no plugin)."""
    assert SEGMENT_SCORES == evaluate.SEGMENT_SCORES


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
    test = paired_mean_bootstrap
    a, b, p = test(first, better, 1000)
    assert (a, b) == pytest.approx((np.mean(first), np.mean(better)))
    assert p < 0.01
    assert test(first, first, 1000)[2] == 1.0
    assert test(first, noisy, 1000)[2] > 0.05
    assert test(first, better, 1000) == test(first, better, 1000)  # seeded


STAGES = ("raw", "fix", "low", "same")


@pytest.fixture(scope="module")
def staged_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A finished run of four stages on 200 real references: ``raw`` (differs from them in
    case and a word a line), ``fix`` (5 of its lines corrected: a small change), ``low``
    (lowercased: a large one), ``same`` (lowercased again: no change). Each evaluate step scores
    BLEU, chrF and a character BLEU (``BLEU#2``); then each gets a metric that is a mean of
    segment scores, kept as the evaluate step keeps COMET's (sentence chrF here). Returns the
    recipe and the workdir."""
    root = tmp_path_factory.mktemp("staged")
    test = real_slice(root / "data", "test", 200)
    refs = test["en"].read_text(encoding="utf-8").splitlines()
    raw = [line.capitalize().replace(" the ", " a ", 1) for line in refs]
    files = {
        "raw": raw,
        "fix": [r if i % 40 == 0 else h for i, (h, r) in enumerate(zip(raw, refs, strict=True))],
    }
    for name, lines in files.items():
        (root / f"{name}.en").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    metrics = ["bleu", "chrf", {"name": "bleu", "tokenize": "char"}]
    hyps = {"raw": "raw", "fix": "fix", "low": "lower", "same": "again"}
    doc = {
        "name": "stages",
        "executor": {"workers": 1},
        "data": {
            **{n: {"source": "local", "files": {"en": str(root / f"{n}.en")}} for n in files},
            "ref": {"source": "local", "files": {k: str(v) for k, v in test.items()}},
        },
        "steps": {
            "lower": {
                "kind": "normalize",
                "inputs": {"corpus": "fix"},
                "processors": ["lowercase"],
            },
            "again": {
                "kind": "normalize",
                "inputs": {"corpus": "lower"},
                "processors": ["lowercase"],
            },
            **{
                f"eval_{stage}_jaen": {
                    "kind": "evaluate",
                    "inputs": {"hyp": hyps[stage], "ref": "ref"},
                    "metrics": metrics,
                }
                for stage in STAGES
            },
        },
    }
    recipe = root / "stages.yaml"
    recipe.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    work = root / "w"
    ran = CliRunner().invoke(cli, ["run", str(recipe), "-w", str(work), "-q"])
    assert ran.exit_code == 0, ran.output
    lowered = [line.lower() for line in files["fix"]]
    for stage, output in {**files, "low": lowered, "same": lowered}.items():
        keep_segment_means(work, stage, output, refs)
    shutil.rmtree(work / ".page")  # the run's page tested before the segment scores were kept
    return recipe, work


def keep_segment_means(work: Path, stage: str, hyps: list[str], refs: list[str]) -> None:
    """Sentence chrF kept as the evaluate step keeps COMET's segment scores, and its mean in the
    step's manifest as its score."""
    (step,) = (work / "steps").glob(f"eval_{stage}_jaen-*")
    segments = [
        sacrebleu.sentence_chrf(h, [r]).score / 100 for h, r in zip(hyps, refs, strict=True)
    ]
    row = {"metric": "SentChrF", "signature": "sentence-chrf", "scores": segments}
    (step / "scores" / SEGMENT_SCORES).write_text(json.dumps(row) + "\n", encoding="utf-8")
    manifest = json.loads((step / "manifest.json").read_text(encoding="utf-8"))
    mean = sum(segments) / len(segments)
    manifest["metrics"]["SentChrF"] = {
        "score": mean,
        "signature": "sentence-chrf",
        "direction": "ja-en",
    }
    (step / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def script_table(recipe: Path, work: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """The script's run and its table: (stage before, stage after) -> metric -> (change, p)."""
    argv = [sys.executable, str(SCRIPT), str(recipe), "-w", str(work)]
    done = subprocess.run(argv, capture_output=True, text=True)
    lines = [line.strip("| ").split(" | ") for line in done.stdout.splitlines()]
    table = {}
    if lines:
        metrics = lines[0][2::2]
        for row in lines[2:]:
            before, after = row[1].split(" -> ")
            cells = zip(row[2::2], row[3::2], strict=True)
            table[(before, after)] = dict(zip(metrics, cells, strict=True))
    return done, table


def test_the_page_and_the_script_give_the_same_p_values(staged_run: tuple[Path, Path]) -> None:
    recipe, work = staged_run
    page = significance(collect(work, REGISTRY), REGISTRY)
    done, table = script_table(recipe, work)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(table) == [("raw", "fix"), ("fix", "low"), ("low", "same")]
    for (_, after), cells in table.items():
        assert list(cells) == ["SentChrF", "BLEU", "chrF", "BLEU#2"]
        for metric, (_, p_value) in cells.items():
            assert f"{page[(f'eval_{after}_jaen', metric)]:.3f}" == p_value, (after, metric)
    assert {p for (step, _), p in page.items() if step == "eval_same_jaen"} == {1.0}
    assert page[("eval_low_jaen", "BLEU")] < 0.01 < page[("eval_fix_jaen", "chrF")]
    text = write_page(work, REGISTRY).read_text(encoding="utf-8")  # the stage table shows them
    shown = re.findall(r'<span class="p">p=([0-9.]+)\*?</span>', text)
    assert sorted(shown) == sorted(p for cells in table.values() for _, p in cells.values())


def test_the_p_values_are_sacrebleus_paired_bootstrap(staged_run: tuple[Path, Path]) -> None:
    """BLEU, chrF and character BLEU of raw -> fix as sacrebleu's own paired test scores the
    two systems' files (BLEU and chrF in one test, as the script did before it tested a metric
    at a time: the resamples are the seed's in both), the scores as the evaluate steps
    recorded them."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    recipe, work = staged_run

    def read(path: Path) -> list[str]:
        return path.read_text(encoding="utf-8").splitlines()

    systems = [(name, read(recipe.parent / f"{name}.en")) for name in ("raw", "fix")]
    refs = read(recipe.parent / "data" / "test.en")

    def sacrebleus(metrics: dict[str, Any]) -> list[float]:
        _, results = PairedTest(systems, metrics, [refs], test_type="bs", n_samples=1000)()
        return [pair[1].p_value for name, pair in results.items() if name != "System"]

    manifests = [
        json.loads(read_manifest(next((work / "steps").glob(f"eval_{stage}_jaen-*"))))
        for stage in ("raw", "fix")
    ]
    changes = {c.metric: c for c in paired_test(work, REGISTRY, *manifests)}
    both = sacrebleus({"BLEU": BLEU(), "chrF": CHRF()})
    assert both == [changes["BLEU"].p_value, changes["chrF"].p_value]
    assert sacrebleus({"BLEU#2": BLEU(tokenize="char")}) == [changes["BLEU#2"].p_value]
    before, after = (manifest["metrics"] for manifest in manifests)
    for metric in ("BLEU", "chrF", "BLEU#2"):
        assert changes[metric].before == pytest.approx(before[metric]["score"], abs=0.01)
        assert changes[metric].after == pytest.approx(after[metric]["score"], abs=0.01)


def read_manifest(step: Path) -> str:
    return (step / "manifest.json").read_text(encoding="utf-8")


def test_a_system_that_does_not_rescore_as_recorded_has_no_p_value(
    staged_run: tuple[Path, Path], tmp_path: Path
) -> None:
    """A recorded score the rescored system does not match (the test would be of another
    number): the script stops naming it, the page leaves the changes to and from that step
    without a p-value."""
    recipe, original = staged_run
    work = shutil.copytree(original, tmp_path / "w", symlinks=True)
    shutil.rmtree(work / ".page", ignore_errors=True)  # p-values the page cached by step folder
    (step,) = (work / "steps").glob("eval_fix_jaen-*")
    manifest = json.loads((step / "manifest.json").read_text(encoding="utf-8"))
    manifest["metrics"]["chrF"]["score"] += 1.0
    (step / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    page = significance(collect(work, REGISTRY), REGISTRY)
    # fix's changes from raw and to low have no p-value, the others keep theirs
    assert {step for step, _ in page} == {"eval_same_jaen"}
    done, _ = script_table(recipe, work)
    assert done.returncode != 0
    assert "jaen raw -> fix: eval_fix_jaen: chrF rescored" in done.stderr
