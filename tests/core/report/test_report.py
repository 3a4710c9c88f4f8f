"""The evaluate step on real WMT22 outputs through the runner, and the report's scores by
direction: a markdown table with signatures and a PNG plot (tables only without matplotlib)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pytest

from mtcore.recipe.load import build_recipe
from mtcore.report.hooks import make_plugin_manager
from mtcore.report.markdown import PLOT_FILE, write_report
from mtcore.run.runner import Runner
from tests.support.data import SHARED

WMT22 = "wmt-conference+wmt22-news-systems/txt"
N = 40  # segments per direction: enough for real scores, cheap for TER


def wmt22_slice(dest: Path, pair: str) -> dict[str, Path]:
    """NT5's first ``N`` outputs of ``pair`` and the matching source and reference lines."""
    src, tgt = pair.split("-")
    base = SHARED / pair / WMT22
    files = {
        "hyp": base / "system-outputs" / f"generaltest2022.{pair}.hyp.NT5.{tgt}",
        "src": base / "sources" / f"generaltest2022.{pair}.src.{src}",
        "ref": base / "references" / f"generaltest2022.{pair}.ref.A.{tgt}",
    }
    for path in files.values():
        if not path.exists():
            if os.environ.get("CI"):
                pytest.fail(f"real data not found at {path}")
            pytest.skip(f"real data not found at {path}")
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for role, path in files.items():
        with open(path, encoding="utf-8") as handle:
            lines = [next(handle) for _ in range(N)]
        out[role] = dest / f"{pair}.{role}"
        out[role].write_text("".join(lines), encoding="utf-8")
    return out


def evaluation_recipe(tmp_path: Path) -> dict:
    data, steps = {}, {}
    metrics = {
        "en-ja": [{"name": "bleu", "tokenize": "wmt"}, {"name": "bleu", "tokenize": "ja-mecab"}],
        "ja-en": ["bleu", "chrf", "ter"],
    }
    for pair in ("en-ja", "ja-en"):
        src, tgt = pair.split("-")
        files = wmt22_slice(tmp_path / "data", pair)
        key = pair.replace("-", "")
        data[f"hyp_{key}"] = {"source": "local", "files": {tgt: str(files["hyp"])}}
        data[f"test_{key}"] = {
            "source": "local",
            "files": {src: str(files["src"]), tgt: str(files["ref"])},
        }
        steps[f"evaluate_{key}"] = {
            "kind": "evaluate",
            "inputs": {"hyp": f"hyp_{key}", "ref": f"test_{key}"},
            "metrics": metrics[pair],
        }
    return {"name": "wmt22-nt5", "directions": ["en-ja", "ja-en"], "data": data, "steps": steps}


def reporting():
    """The hook manager the CLI gives a run, entry points left out: its hook writes the report."""
    return make_plugin_manager(load_entrypoints=False)


@pytest.fixture
def evaluated(tmp_path, registry):
    recipe = build_recipe(evaluation_recipe(tmp_path), registry)
    result = Runner(recipe, registry, tmp_path / "work", reporting(), show_progress=False).run()
    return recipe, result


def test_evaluate_step_records_direction_and_signatures(evaluated, registry):
    _, result = evaluated
    enja = result.manifest("evaluate_enja")["metrics"]
    assert list(enja) == ["BLEU", "BLEU#2"]  # a second BLEU entry does not overwrite the first
    assert "|tok:char|" in enja["BLEU"]["signature"]
    assert "|tok:ja-mecab" in enja["BLEU#2"]["signature"]
    assert {v["direction"] for v in enja.values()} == {"en-ja"}  # from the reference corpus
    jaen = result.manifest("evaluate_jaen")["metrics"]
    assert jaen["TER"]["higher_is_better"] is False and jaen["BLEU"]["higher_is_better"] is True
    scores = json.loads((result.path("evaluate_jaen") / "scores" / "scores.json").read_text())
    assert scores["direction"] == "ja-en" and scores["segments"] == N
    hyps = [
        line.rstrip("\n")
        for line in (result.workdir.parent / "data" / "ja-en.hyp").open(encoding="utf-8")
    ]
    refs = [[line.rstrip("\n") for line in (result.workdir.parent / "data" / "ja-en.ref").open()]]
    direct = registry.load("metrics", "bleu").from_dict({}).corpus_score(hyps, refs, "en")
    assert jaen["BLEU"]["score"] == direct.score  # the step scores exactly its inputs


def test_report_has_a_table_per_direction_and_a_plot(evaluated):
    _, result = evaluated
    report = (result.workdir / "report.md").read_text(encoding="utf-8")
    assert "## Scores by direction" in report
    assert "| direction | step | BLEU | BLEU#2 | chrF | TER |" in report
    enja = result.manifest("evaluate_enja")["metrics"]
    bleu, mecab = enja["BLEU"]["score"], enja["BLEU#2"]["score"]
    assert f"| en-ja | evaluate_enja | {bleu:.2f} | {mecab:.2f} |  |  |" in report
    escaped = enja["BLEU"]["signature"].replace("|", "\\|")  # a pipe would split the cell
    assert f"| BLEU | en-ja | `{escaped}` |" in report  # signatures listed
    assert f"![scores by direction]({PLOT_FILE})" in report
    assert (result.workdir / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_tables_stages_with_their_changes(tmp_path, registry):
    """Evaluate steps named eval_<stage>_<direction> make a stage-by-direction table: two real
    WMT22 en-ja systems stand for two stages of one system."""
    files = wmt22_slice(tmp_path / "data", "en-ja")
    other = SHARED / "en-ja" / WMT22 / "system-outputs" / "generaltest2022.en-ja.hyp.Online-A.ja"
    with open(other, encoding="utf-8") as handle:
        (tmp_path / "data" / "online.ja").write_text("".join(next(handle) for _ in range(N)))
    test = {"source": "local", "files": {"en": str(files["src"]), "ja": str(files["ref"])}}
    evaluate = {"kind": "evaluate", "metrics": ["bleu", "chrf"]}
    document = {
        "name": "stages",
        "directions": ["en-ja"],
        "data": {
            "test": test,
            "online": {"source": "local", "files": {"ja": str(tmp_path / "data" / "online.ja")}},
            "nt5": {"source": "local", "files": {"ja": str(files["hyp"])}},
        },
        "steps": {
            "eval_baseline_enja": {**evaluate, "inputs": {"hyp": "online", "ref": "test"}},
            "eval_ensemble_enja": {**evaluate, "inputs": {"hyp": "nt5", "ref": "test"}},
        },
        "submitted": {"en-ja": "baseline"},
        "stage_notes": {"ensemble": "after the submission"},
    }
    recipe = build_recipe(document, registry)
    result = Runner(recipe, registry, tmp_path / "work", reporting(), show_progress=False).run()
    report = (result.workdir / "report.md").read_text(encoding="utf-8")
    base = result.manifest("eval_baseline_enja")["metrics"]
    ens = result.manifest("eval_ensemble_enja")["metrics"]
    assert "| stage | en-ja BLEU | en-ja chrF |" in report
    # the submitted stage and a stage's note are marked by its name
    row = f"| baseline (submitted) | {base['BLEU']['score']:.2f} | {base['chrF']['score']:.2f} |"
    assert row in report
    change = ens["BLEU"]["score"] - base["BLEU"]["score"]
    row = f"| ensemble (after the submission) | {ens['BLEU']['score']:.2f} ({change:+.2f}) |"
    assert row in report
    assert abs(change) > 0.01  # two different systems


def test_report_without_matplotlib_keeps_the_tables(evaluated, monkeypatch, caplog):
    recipe, result = evaluated
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with caplog.at_level(logging.INFO, logger="mtcore.report.markdown"):
        write_report(recipe, result)
    report = (result.workdir / "report.md").read_text(encoding="utf-8")
    assert "| direction | step | BLEU | BLEU#2 | chrF | TER |" in report
    assert "(No plot: matplotlib is not installed.)" in report
    assert not (result.workdir / PLOT_FILE).exists()  # the earlier run's plot is gone
    assert "matplotlib is not installed" in caplog.text
