"""Neural metrics in a recipe, end to end: COMET-22, CometKiwi and MetricX-24 models named by
hub id in the ``models`` section (tiny random ones built here, served at hub addresses through
``$MTCORE_MIRROR``, each with its encoder's tokenizer from another repository), fetched by
``fetch_model`` as data, and used by the ``evaluate`` steps of two stages that score real WMT22
En-Ja system outputs. The run's stage table carries the neural scores and the copy guard, the
signatures name the hub id and revision, the scores equal the metrics' own on the original
directories, and the paired bootstrap of scripts/stage_significance.py reads the kept segment
scores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.contracts.registry import load_registry
from tests.plugins.sources.test_sources import LoopbackServer
from tests.plugins.sources.test_sources_ids import loopback  # noqa: F401 (a fixture)
from tests.support import ROOT
from tests.support.tiny_comet import SOURCE, WMT22, build_all, wmt22_lines
from tests.support.tiny_metricx import build as build_metricx

pytestmark = pytest.mark.skipif(not SOURCE.is_file(), reason=f"real data not found at {WMT22}")

REVISION = "fedcba9876543210fedcba9876543210fedcba98"
LINES = 40
REPOS = {
    "comet22": "tiny-org/wmt22-comet-da",
    "kiwi": "tiny-org/wmt22-cometkiwi-da",
    "metricx": "tiny-org/metricx-24-hybrid",
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-metrics")
    models = build_all(root / "comet")
    models["metricx"] = build_metricx(root / "metricx", described=False)
    return models


def serve(server: LoopbackServer, tiny: dict[str, Path]) -> None:
    """Each model at its hub address; the COMET encoder's tokenizer at tiny-org/xlmr's and
    mT5's at tiny-org/mt5's, the COMET hparams naming tiny-org/xlmr as the hub models name
    xlm-roberta-large."""
    hub = "/huggingface.co"
    for role, kind in (("comet22", "comet"), ("kiwi", "cometkiwi")):
        hparams = yaml.safe_load((tiny[kind] / "hparams.yaml").read_text())
        hparams["pretrained_model"] = "tiny-org/xlmr"
        base = f"{hub}/{REPOS[role]}/resolve/{REVISION}"
        server.files[f"{base}/hparams.yaml"] = yaml.safe_dump(hparams).encode()
        ckpt = (tiny[kind] / "checkpoints" / "model.ckpt").read_bytes()
        server.files[f"{base}/checkpoints/model.ckpt"] = ckpt
    for name in ("config.json", "sentencepiece.bpe.model"):
        body = (tiny["encoder"] / name).read_bytes()
        server.files[f"{hub}/tiny-org/xlmr/resolve/main/{name}"] = body
    base = f"{hub}/{REPOS['metricx']}/resolve/{REVISION}"
    for name in ("config.json", "model.safetensors"):
        server.files[f"{base}/{name}"] = (tiny["metricx"] / name).read_bytes()
    spiece = (tiny["metricx"] / "tokenizer" / "spiece.model").read_bytes()
    server.files[f"{hub}/tiny-org/mt5/resolve/main/spiece.model"] = spiece


def recipe(tmp_path: Path) -> dict[str, Any]:
    """Two stages (two real WMT22 En-Ja systems) scored with BLEU and the three models."""
    lines = wmt22_lines(400, LINES)
    lines["NT5"][3] = lines["src"][3]  # one untranslated copy: the guard must see it
    files = {}
    for key in ("src", "ref", "Online-A", "NT5"):
        path = tmp_path / f"{key}.txt"
        path.write_text("\n".join(lines[key]) + "\n", encoding="utf-8")
        files[key] = str(path)
    evaluate = {
        "kind": "evaluate",
        "metrics": [
            {"name": "bleu", "tokenize": "ja-mecab"},
            {"name": "comet", "model": "comet22"},
            {"name": "cometkiwi", "model": "kiwi"},
            {"name": "metricx", "model": "metricx"},
        ],
    }
    models = {"comet22": "comet22", "kiwi": "kiwi", "metricx": "metricx"}
    return {
        "name": "neural",
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": {
            "test": {"source": "local", "files": {"en": files["src"], "ja": files["ref"]}},
            "online": {"source": "local", "files": {"ja": files["Online-A"]}},
            "nt5": {"source": "local", "files": {"ja": files["NT5"]}},
        },
        "models": {
            "comet22": {
                "hf": REPOS["comet22"],
                "revision": REVISION,
                "metric": "comet",
                "encoder": "hf:tiny-org/xlmr",
            },
            "kiwi": {
                "hf": REPOS["kiwi"],
                "revision": REVISION,
                "metric": "comet",
                "encoder": "hf:tiny-org/xlmr",
            },
            "metricx": {
                "hf": REPOS["metricx"],
                "revision": REVISION,
                "metric": "metricx",
                "encoder": "hf:tiny-org/mt5",
            },
        },  # fmt: skip
        "steps": {
            "eval_online_enja": {**evaluate, "inputs": {"hyp": "online", "ref": "test", **models}},
            "eval_nt5_enja": {**evaluate, "inputs": {"hyp": "nt5", "ref": "test", **models}},
        },
    }


def test_a_recipe_scores_stages_with_neural_metrics_fetched_by_id(
    tiny: dict[str, Path],
    tmp_path: Path,
    write_recipe,
    monkeypatch: pytest.MonkeyPatch,
    loopback,  # noqa: F811
) -> None:
    server = LoopbackServer()
    serve(server, tiny)
    monkeypatch.setenv("MTCORE_MIRROR", server.url(""))
    work = tmp_path / "w"
    doc = recipe(tmp_path)
    path = write_recipe(doc, "neural.yaml")
    try:
        done = CliRunner().invoke(cli, ["run", "-q", str(path), "-w", str(work)])
        assert done.exit_code == 0, done.output
    finally:
        server.close()
    (fetched,) = (work / "steps").glob("comet22-*/model")
    assert (fetched / "checkpoints" / "model.ckpt").is_file()
    assert sorted(p.name for p in (fetched / "encoder").iterdir()) == [
        "config.json", "sentencepiece.bpe.model"
    ]  # fmt: skip
    (step,) = (work / "steps").glob("eval_nt5_enja-*")
    manifest = json.loads((step / "manifest.json").read_text())
    metrics = manifest["metrics"]
    assert set(metrics) >= {"BLEU", "COMET", "CometKiwi", "MetricX-24", "Copies%", "WrongLang%"}
    assert f"model:{REPOS['comet22']}|rev:{REVISION}|" in metrics["COMET"]["signature"]
    assert metrics["CometKiwi"]["signature"].startswith("nrefs:0|")
    assert metrics["MetricX-24"]["higher_is_better"] is False
    assert metrics["Copies%"]["score"] == pytest.approx(100 / LINES, abs=0.01)

    # the fetched models score as the original directories do
    lines = wmt22_lines(400, LINES)
    lines["NT5"][3] = lines["src"][3]
    registry = load_registry()
    for name, settings, label in (
        ("comet", {"model": str(tiny["comet"])}, "COMET"),
        ("cometkiwi", {"model": str(tiny["cometkiwi"])}, "CometKiwi"),
        ("metricx", {"model": str(tiny["metricx"])}, "MetricX-24"),
    ):
        metric = registry.load("metrics", name).from_dict(settings)
        metric.setup({})
        direct = metric.corpus_score(lines["NT5"], [lines["ref"]], "ja", sources=lines["src"])
        assert direct.score == pytest.approx(metrics[label]["score"], abs=1e-4), name
    kept = [json.loads(x) for x in (step / "scores" / "segments.jsonl").read_text().splitlines()]
    assert [row["metric"] for row in kept] == ["COMET", "CometKiwi", "MetricX-24"]
    assert all(len(row["scores"]) == LINES for row in kept)

    report = (work / "report.md").read_text(encoding="utf-8")
    assert "COMET" in report and "MetricX-24" in report
    significance = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "stage_significance.py"), str(path), "-w",
         str(work)],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert significance.returncode == 0, significance.stderr
    header, _, row = significance.stdout.splitlines()[:3]
    assert "| COMET | p | CometKiwi | p | MetricX-24 | p | BLEU | p |" in header
    assert row.startswith("| enja | online -> nt5 |")
