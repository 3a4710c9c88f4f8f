"""Issue 71: trackers say what they did. ``--track`` prints its store and run id, keeps a
signature tag per direction and metric on the workdir's run and the artifacts in the workdir
(a server keeps its own); a cached training is logged with clean metric names and set
parameters only, and ``--tensorboard`` writes its curves from its log, once. Read back with
MLflow's client from a real store and with TensorBoard's own event reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.contracts.registry import load_registry
from mtcore.contracts.step import config_dict
from mtcore.recipe.load import load_recipe
from mtcore.recipe.plan import make_plan
from mtcore.report.mlflow_store import RAW_TRAINING, flat_params
from mtcore.report.tensorboard import TensorboardWriter
from mtcore.report.tracking import MlflowTracker
from mtcore.run.results import RunResult, StepResult
from mtcore_plugins.steps._train_log import parse_curves, parse_train_log
from tests.support import ROOT
from tests.support.data import SHARED
from tests.support.mlflow_server import mlflow_server  # noqa: F401 (fixture)

WMT22 = SHARED / "{pair}" / "wmt-conference+wmt22-news-systems" / "txt"


def wmt22(pair: str, kind: str, name: str) -> Path:
    return Path(str(WMT22).format(pair=pair)) / kind / f"generaltest2022.{pair}.{name}"


def head(path: Path, folder: Path, lines: int = 300) -> str:
    """The first ``lines`` lines of ``path`` in a file of ``folder`` (a quicker scoring)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(path, encoding="utf-8") as handle:
        text = "".join(line for _, line in zip(range(lines), handle, strict=False))
    (folder / path.name).write_text(text, encoding="utf-8")
    return str(folder / path.name)


pytestmark = pytest.mark.skipif(
    not wmt22("en-ja", "references", "ref.A.ja").exists(), reason="WMT22 data not found"
)


def scored_recipe(tmp_path: Path) -> Path:
    """NT5's WMT22 outputs scored in both directions: stage ``wmt`` of en-ja and ja-en."""
    doc: dict[str, Any] = {"name": "tracked", "directions": ["en-ja", "ja-en"]}
    doc["executor"] = {"workers": 1}
    doc["data"], doc["steps"] = {}, {}
    data = tmp_path / "data"
    for src, tgt in (("en", "ja"), ("ja", "en")):
        pair = f"{src}-{tgt}"
        hyp = head(wmt22(pair, "system-outputs", f"hyp.NT5.{tgt}"), data)
        doc["data"][f"hyp_{src}{tgt}"] = {"source": "local", "files": {tgt: hyp}}
        doc["data"][f"ref_{src}{tgt}"] = {"source": "local", "files": {
            src: head(wmt22(pair, "sources", f"src.{src}"), data),
            tgt: head(wmt22(pair, "references", f"ref.A.{tgt}"), data),
        }}  # fmt: skip
        doc["steps"][f"eval_wmt_{src}{tgt}"] = {
            "kind": "evaluate", "inputs": {"hyp": f"hyp_{src}{tgt}", "ref": f"ref_{src}{tgt}"},
            "metrics": ["bleu", "chrf"], "src": src,
        }  # fmt: skip
    path = tmp_path / "tracked.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def test_track_says_where_and_keeps_a_signature_per_direction(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mlflow_server: str,  # noqa: F811
) -> None:
    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MTCORE_TENSORBOARD", "")  # the CLI sets it; restored afterwards
    monkeypatch.chdir(tmp_path)  # MLflow's own artifact default would be ./mlruns here
    recipe, work = scored_recipe(tmp_path), tmp_path / "work"
    store = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    command = ["run", str(recipe), "-w", str(work), "-q", "--track", store, "--tensorboard"]
    first = CliRunner().invoke(cli, command)
    assert first.exit_code == 0, first.output
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("tracked")
    assert experiment.artifact_location == (work / "mlartifacts").resolve().as_uri()
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    said = f"tracking: MLflow run {parent.info.run_id} (experiment 'tracked') at {store}"
    assert said in first.output.splitlines()
    assert parent.info.artifact_uri.startswith((work / "mlartifacts").resolve().as_uri())
    assert not (tmp_path / "mlruns").exists()
    signatures = {k: v for k, v in parent.data.tags.items() if k.startswith("signature.")}
    assert sorted(signatures) == [
        "signature.BLEU.enja", "signature.BLEU.jaen", "signature.chrF.enja", "signature.chrF.jaen"
    ]  # fmt: skip
    assert "tok:ja-mecab" in signatures["signature.BLEU.enja"]  # Japanese: on MeCab's words
    assert "tok:13a" in signatures["signature.BLEU.jaen"]
    board = f"tensorboard: 0 trainings in {(work / 'tensorboard').resolve()}"
    assert board in first.output.splitlines()

    again = CliRunner().invoke(cli, command)  # every step cached: the same run, nothing new
    assert again.exit_code == 0, again.output
    assert said in again.output.splitlines()
    assert len(client.search_runs([experiment.experiment_id], max_results=100)) == len(runs)

    # a tracking server chooses where artifacts go: not the workdir
    served = [*command[:-3], "--track", mlflow_server, "--experiment", "tracked_served"]
    third = CliRunner().invoke(cli, served)
    assert third.exit_code == 0, third.output
    remote = MlflowClient(tracking_uri=mlflow_server).get_experiment_by_name("tracked_served")
    assert "work" not in remote.artifact_location
    assert f"(experiment 'tracked_served') at {mlflow_server}" in third.output


LOG = """\
2026-12-03 08:17:42 | INFO | train_inner | {{"epoch": 1, "loss": "9.513", "nll_loss": "9.136", "ppl": "562.66", "wps": "16398.6", "ups": "9.64", "num_updates": "{a}", "lr": "0.00447", "gnorm": "0.793", "train_wall": "5", "wall": "6"}}
2026-12-03 08:17:48 | INFO | valid | {{"epoch": 1, "valid_loss": "8.162", "valid_nll_loss": "7.574", "valid_ppl": "190.49", "valid_wps": "36957.9", "valid_num_updates": "{a}"}}
2026-12-03 08:17:54 | INFO | train_inner | {{"epoch": 1, "loss": "7.849", "nll_loss": "7.22", "ppl": "149.09", "wps": "14159.7", "ups": "8.54", "num_updates": "{b}", "lr": "0.00258", "gnorm": "0.599", "train_wall": "6", "wall": "18"}}
2026-12-03 08:17:59 | INFO | train | {{"epoch": 1, "train_loss": "8.268", "train_nll_loss": "7.701", "train_ppl": "208.05", "train_wps": "15111.3", "train_ups": "8.98", "train_num_updates": "{b}", "train_wall": "24"}}
2026-12-03 08:17:59 | INFO | valid | {{"epoch": 1, "valid_loss": "7.198", "valid_nll_loss": "6.459", "valid_ppl": "88", "valid_num_updates": "{b}"}}
2026-12-03 08:18:00 | INFO | fairseq_cli.train | done training in 24.0 seconds
"""  # noqa: E501 (fairseq's lines as it writes them)


def test_a_cached_training_is_logged_clean_and_written_for_tensorboard_once(
    tmp_path: Path,
) -> None:
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    registry = load_registry()
    recipe = load_recipe(ROOT / "recipes" / "nt5.yaml", registry)
    trains = [p for p in make_plan(recipe, registry) if p.spec.kind == "train"][:2]
    folder = tmp_path / "steps" / trains[0].dirname
    (folder / "model").mkdir(parents=True)
    log = folder / "model" / "train.log"
    log.write_text(LOG.format(a=50, b=100), encoding="utf-8")
    manifest = {"metrics": parse_train_log(log), "counts": {"train.updates": 100}, "seconds": 3.0}
    assert any(RAW_TRAINING.match(key) for key in manifest["metrics"])  # fairseq's names
    empty = tmp_path / "steps" / trains[1].dirname  # a training whose log is gone
    empty.mkdir(parents=True)
    cached = [StepResult(trains[0], "cached", manifest, folder)]
    result = RunResult(tmp_path, [*cached, StepResult(trains[1], "cached", {}, empty)])

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(store, "cached", poll_seconds=600, registry=registry)
    tracker.mtcore_run_started(recipe=recipe, workdir=tmp_path, plan=trains, label=None)
    tracker.mtcore_run_finished(recipe=recipe, result=result, label=None)
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("cached").experiment_id
    (run,) = client.search_runs([experiment], f"tags.`mtcore.step` = '{trains[0].id}'")
    curves = parse_curves(log)
    assert sorted(run.data.metrics) == sorted(
        [*curves, "counts/train.updates", "seconds", "tokens_per_second", "updates"]
    )
    config = config_dict(trains[0].spec.plugin.config)
    unset = [key for key, value in config.items() if value is None]
    assert unset and not set(unset) & set(run.data.params)
    assert run.data.params == flat_params(config) and "null" not in run.data.params.values()

    board = tmp_path / "tb"
    writer = TensorboardWriter(board, registry)
    writer.mtcore_run_finished(recipe=recipe, result=result, label=None)
    events = EventAccumulator(str(board / trains[0].id)).Reload()
    assert sorted(events.Tags()["scalars"]) == sorted(curves)
    for name, line in curves.items():
        read = [(e.step, e.value) for e in events.Scalars(name)]
        assert read == [(step, pytest.approx(value)) for step, value in line]
    assert writer.summary() == [
        f"tensorboard: 2 trainings in {board}: 1 written from their logs",
        f"tensorboard: no curves in the training log of {trains[1].id}",
    ]
    files = sorted(board.rglob("events.out.tfevents.*"))
    again = TensorboardWriter(board, registry)  # a second run writes nothing twice
    again.mtcore_run_finished(recipe=recipe, result=result, label=None)
    assert sorted(board.rglob("events.out.tfevents.*")) == files and len(files) == 1
    assert "1 with event files from an earlier run, left as they are" in again.summary()[0]
