"""Recipe comparison and ablation on real WMT22 Ja->En system outputs: one workdir, shared
steps run once, the side-by-side table, the PNG, score differences against the full recipe, and
the rewiring rules of --ablate (same-role stand-in, declared bypass, optional inputs dropped,
clear errors)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import sacrebleu
import yaml
from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.contracts.errors import RecipeError
from mtcore.recipe.ablation import ablate_document, parse_ablations
from mtcore.recipe.load import build_recipe
from tests.support.data import SHARED

WMT22 = SHARED / "ja-en" / "wmt-conference+wmt22-news-systems" / "txt"
REF = WMT22 / "references" / "generaltest2022.ja-en.ref.A.en"
pytestmark = pytest.mark.skipif(not REF.exists(), reason=f"WMT22 data not found at {WMT22}")


def system(team: str) -> Path:
    return WMT22 / "system-outputs" / f"generaltest2022.ja-en.hyp.{team}.en"


def recipe(name: str, team: str) -> dict[str, Any]:
    """A team's output, lowercased by a normalize step, scored against the reference."""
    return {
        "name": name,
        "directions": ["ja-en"],
        "executor": {"workers": 1},
        "data": {
            "hyp": {"source": "local", "files": {"en": str(system(team))}},
            "ref": {
                "source": "local",
                "files": {
                    "ja": str(REF.parent.parent / "sources/generaltest2022.ja-en.src.ja"),
                    "en": str(REF),
                },
            },  # fmt: skip
        },
        "steps": {
            "lower": {
                "kind": "normalize",
                "inputs": {"corpus": "hyp"},
                "processors": ["lowercase"],
            },
            "evaluate": {
                "kind": "evaluate",
                "inputs": {"hyp": "lower", "ref": "ref"},
                "metrics": ["bleu", "chrf"],
                "src": "ja",
            },
        },
    }


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def bleu(hyps: list[str]) -> float:
    return round(sacrebleu.corpus_bleu(hyps, [lines(REF)]).score, 2)


def write(tmp_path: Path, doc: dict[str, Any], name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def test_ablation_runs_the_recipe_without_the_step(tmp_path: Path) -> None:
    path = write(tmp_path, recipe("nt5_eval", "NT5"), "nt5")
    work = tmp_path / "w"
    result = CliRunner().invoke(cli, ["run", str(path), "-w", str(work), "-q", "--ablate", "lower"])
    assert result.exit_code == 0, result.output
    full = bleu([line.lower() for line in lines(system("NT5"))])
    ablated = bleu(lines(system("NT5")))  # the team's own output: its official cased score
    table = (work / "ablation.md").read_text(encoding="utf-8")
    row = next(line for line in table.splitlines() if line.startswith("| ja-en | evaluate | BLEU"))
    assert row.startswith(f"| ja-en | evaluate | BLEU | {full:.2f} | {ablated:.2f} (+")
    assert float(row.split("(")[1].split(")")[0]) == pytest.approx(ablated - full, abs=0.011)
    assert ablated > full  # lowercasing costs cased BLEU
    assert "| `full` | nt5_eval | — | — |" in table
    assert "| `-lower` | nt5_eval | — | lower |" in table
    assert "nrefs:1|case:mixed" in table.replace("\\|", "|")
    assert (work / "ablation.png").stat().st_size > 1000
    assert (work / "report.full.md").exists() and (work / "report.no-lower.md").exists()
    assert "Ablated: `lower` removed." in (work / "report.no-lower.md").read_text(encoding="utf-8")
    # The data entries are shared: one fetch directory each; the evaluate ran once per variant.
    names = sorted(p.name.rsplit("-", 1)[0] for p in (work / "steps").iterdir() if p.name[0] != ".")
    assert names == ["evaluate", "evaluate", "hyp", "lower", "ref"]


def test_compare_runs_recipes_side_by_side(tmp_path: Path) -> None:
    a = write(tmp_path, recipe("nt5_eval", "NT5"), "a")
    b = write(tmp_path, recipe("jdexplore_eval", "JDExploreAcademy"), "b")
    work = tmp_path / "w"
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "-w", str(work), "-q"])
    assert result.exit_code == 0, result.output
    table = (work / "compare.md").read_text(encoding="utf-8")
    expected = [bleu([x.lower() for x in lines(system(t))]) for t in ("NT5", "JDExploreAcademy")]
    assert f"| ja-en | evaluate | BLEU | {expected[0]:.2f} | {expected[1]:.2f} |" in table
    assert "| lower | 2,008 | 2,008 |" in table  # pairs after the data step, both recipes
    assert (work / "compare.png").stat().st_size > 1000
    # The reference is one data entry in both recipes: fetched once.
    assert len(list((work / "steps").glob("ref-*"))) == 1
    again = CliRunner().invoke(cli, ["compare", str(a), str(b), "-w", str(work), "-q"])
    assert again.exit_code == 0 and (work / "compare.md").read_text(encoding="utf-8") == table


def test_bypass_and_optional_inputs(registry: Any) -> None:
    doc: dict[str, Any] = {
        "name": "r",
        "data": {"bitext": {"source": "local", "files": {"en": "/x.en", "ja": "/x.ja"}}},
        "steps": {
            "clean": {"kind": "clean", "inputs": {"corpus": "bitext"}, "filters": ["length"]},
            "spm": {"kind": "spm", "inputs": {"corpus": "clean"}},
            "bin": {
                "kind": "binarize",
                "inputs": {"train": "clean", "valid": "clean", "spm": "spm"},
                "src": "en",
                "tgt": "ja",
            },
            "base": {"kind": "train", "inputs": {"data": "bin"}},
            "tuned": {
                "kind": "train",
                "inputs": {"data": "bin", "init": "base"},
                "bypass": {"model": "init"},
            },
            "other": {"kind": "train", "inputs": {"data": "bin"}, "seed": 2},
            "hyp": {
                "kind": "translate",
                "inputs": {"model": "tuned", "model2": "other", "corpus": "clean", "spm": "spm"},
                "src": "en",
                "tgt": "ja",
            },
        },  # fmt: skip
    }
    out = ablate_document(doc, ("clean",), registry)
    assert out["steps"]["spm"]["inputs"] == {"corpus": "bitext"}  # same-role stand-in
    assert out["steps"]["hyp"]["inputs"]["corpus"] == "bitext"
    out = ablate_document(doc, ("tuned", "other"), registry)
    assert out["steps"]["hyp"]["inputs"] == {"model": "base", "corpus": "clean", "spm": "spm"}
    assert "tuned" in doc["steps"]  # the document itself is left alone
    build_recipe(out, registry)  # the ablated recipe validates
    with pytest.raises(
        RecipeError, match=r"steps.hyp.inputs.model reads tuned.model, which has no"
    ):
        ablate_document(doc, ("base", "tuned"), registry)
    with pytest.raises(RecipeError, match="'bitext' is a data entry"):
        ablate_document(doc, ("bitext",), registry)
    with pytest.raises(RecipeError, match="unknown step 'tunde'. Did you mean 'tuned'"):
        ablate_document(doc, ("tunde",), registry)
    bad = copy.deepcopy(doc)
    bad["steps"]["tuned"]["bypass"] = {"modle": "init"}
    with pytest.raises(RecipeError, match="steps.tuned.bypass.modle: step kind 'train' has no"):
        build_recipe(bad, registry)
    assert parse_ablations(["a", "b, c"]) == [("a",), ("b", "c")]
    with pytest.raises(RecipeError, match="name one or more steps"):
        parse_ablations([","])
