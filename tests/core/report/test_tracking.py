"""Experiment tracking (``mtcore run --track``) against a real MLflow tracking server started
on 127.0.0.1: a training killed mid-way and resumed leaves one continuous curve, logged while
it trained; cached steps are logged once. The smoke run's tracking is checked in
tests/e2e/test_recipes.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from mtcore.report.tracking import flat_params, metric_key, owner_only_store, redact, tracking_uri
from tests.e2e.test_e2e import MTCORE, tiny_recipe
from tests.support import ROOT
from tests.support.mlflow_server import mlflow_server  # noqa: F401 (fixture)


def test_settings_become_flat_parameters_and_keys_are_valid() -> None:
    params = flat_params({"a": {"b": 1, "c": [1, 2]}, "d": "x" * 7000, "e": None, "f": {}})
    assert params == {"a.b": "1", "a.c": "[1, 2]", "d": "x" * 6000, "f": "{}"}  # e: unset
    assert metric_key("stage/bt+ft/en-ja/BLEU") == "stage/bt_ft/en-ja/BLEU"


def test_secrets_stay_out_of_parameters_and_messages(tmp_path) -> None:
    """Issue 70: a data entry's URL with a token, or a setting named like a secret, went into
    the store's parameters as written; an error printed the tracking URI with its password."""
    params = flat_params({
        "source": "https://user:hunter2@example.org/corpus.tsv.gz?sig=abc123&part=1",
        "api_key": "sk-123", "hf": {"token": "hf_abc"}, "tokenize": "char", "max_tokens": 4096,
    })  # fmt: skip
    assert params == {
        "source": "https://example.org/corpus.tsv.gz?sig=<redacted>&part=1",
        "api_key": "<redacted>", "hf.token": "<redacted>", "tokenize": "char",
        "max_tokens": "4096",
    }  # fmt: skip
    assert "hunter2" not in redact("MLflow at http://me:hunter2@127.0.0.1:5000 failed")
    store = tmp_path / "runs" / "mlflow.db"
    owner_only_store(f"sqlite:///{store}")
    assert store.stat().st_mode & 0o777 == 0o600
    store.chmod(0o644)
    owner_only_store(f"sqlite:///{store}")
    assert store.stat().st_mode & 0o777 == 0o600


def test_the_default_store_is_a_database_in_the_workdir(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri(tmp_path, None) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    assert tracking_uri(tmp_path, None) == "http://127.0.0.1:1"
    assert tracking_uri(tmp_path, "sqlite:///x.db") == "sqlite:///x.db"


def test_an_unreachable_server_is_a_clear_error_before_any_step(tmp_path) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    recipe = ROOT / "recipes" / "nt5.yaml"
    work = tmp_path / "work"
    command = [*MTCORE, "run", str(recipe), "-p", "smoke", "-w", str(work), "-q",
               "--track", f"http://127.0.0.1:{port}"]  # fmt: skip
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 1 and time.time() - started < 60
    assert f"MLflow at http://127.0.0.1:{port} cannot be used" in done.stderr
    assert "start the server or run without --track" in done.stderr
    assert not list(work.glob("steps/*/manifest.json"))  # no step ran


def train_runs(client, experiment: str) -> list:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    runs = client.search_runs([found.experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get("mtcore.step") == "train"]


def logged_updates(client, experiment: str) -> list[int]:
    runs = train_runs(client, experiment)
    if not runs:
        return []
    return [m.step for m in client.get_metric_history(runs[0].info.run_id, "train/loss")]


@pytest.mark.slow
def test_a_killed_and_resumed_training_logs_one_continuous_curve(
    tmp_path: Path,
    mlflow_server: str,  # noqa: F811
) -> None:
    from mlflow import MlflowClient

    recipe = tiny_recipe(tmp_path)
    doc = yaml.safe_load(recipe.read_text())
    doc["steps"]["train"].update(max_update=200, save_interval_updates=50, log_interval=5)
    recipe.write_text(yaml.safe_dump(doc, allow_unicode=True))
    work = tmp_path / "work"
    command = [*MTCORE, "run", str(recipe), "-w", str(work), "-q", "--track", mlflow_server,
               "--experiment", "killed", "--tensorboard"]  # fmt: skip
    env = {**os.environ, "MTCORE_TRACKING_POLL": "0.3"}
    client = MlflowClient(tracking_uri=mlflow_server)
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    # Past the checkpoint at update 50 (and before the epoch's end, 77), the run's children (the
    # trainer) are paused until the tracker has logged the curve that far, then the run is
    # killed (-9): the resumed training replays the updates after 50, which must not be logged
    # twice.
    deadline = time.time() + 300
    trainer = None
    while time.time() < deadline and proc.poll() is None:
        log = list(work.glob("steps/.partial/train-*/model/train.log"))
        if log and '"num_updates": "55"' in log[0].read_text(errors="replace"):
            found = subprocess.run(
                ["pgrep", "-s", str(proc.pid)], capture_output=True, text=True
            )  # the run's children: the trainer (a fork of mtcore's zygote), pool workers
            trainer = [int(pid) for pid in found.stdout.split() if int(pid) != proc.pid]
            for pid in trainer:
                os.kill(pid, signal.SIGSTOP)
            break
        time.sleep(0.02)
    assert trainer, "the training was not caught running: " + proc.stderr.read().decode()[-2000:]
    while time.time() < deadline and max(logged_updates(client, "killed"), default=0) < 55:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = logged_updates(client, "killed")
    assert before == list(range(5, before[-1] + 1, 5)) and 55 <= before[-1] < 77
    again = subprocess.run(command, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]

    manifest = json.loads(next(work.glob("steps/train-*/manifest.json")).read_text())
    resumed_at = manifest["metrics"]["resumed_from_update"]
    assert manifest["resumed"] and resumed_at == 50 < before[-1]  # updates were replayed
    runs = train_runs(client, "killed")
    assert len(runs) == 1  # the resumed run continued the step's nested run
    assert runs[0].info.status == "FINISHED" and runs[0].data.tags["mtcore.resumed"] == "True"
    assert logged_updates(client, "killed") == list(range(5, 201, 5))  # no gap, no duplicate
    history = client.get_metric_history(runs[0].info.run_id, "train/loss")
    log = next(work.glob("steps/train-*/model/train.log")).read_text()
    assert log.count('"num_updates": "55"') == 2  # a replayed update, in the log twice
    assert len([m for m in history if m.step == 55]) == 1
    # the workdir's run: every step once, the stage's scores, nothing left running
    experiment = client.get_experiment_by_name("killed").experiment_id
    every = client.search_runs([experiment], max_results=1000)
    parents = [r for r in every if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    steps = [r.data.tags["mtcore.step"] for r in every if "mtcore.step" in r.data.tags]
    assert sorted(steps) == sorted(set(steps)) and len(steps) == len(doc["steps"]) + len(
        doc.get("data", {})
    )
    evaluate = next(r for r in every if r.data.tags.get("mtcore.step") == "evaluate")
    scores = json.loads(next(work.glob("steps/evaluate-*/manifest.json")).read_text())["metrics"]
    assert evaluate.data.metrics["score/BLEU"] == pytest.approx(scores["BLEU"]["score"])
    assert evaluate.data.tags["signature.BLEU"] == scores["BLEU"]["signature"]

    # fairseq's TensorBoard files, one folder per training, read back by TensorBoard's reader
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    boards = EventMultiplexer().AddRunsFromDirectory(str(work / "tensorboard")).Reload()
    scalars = {run: tags["scalars"] for run, tags in boards.Runs().items()}
    assert "train/train_inner" in scalars and "loss" in scalars["train/train_inner"], scalars
    steps = {e.step for e in boards.Scalars("train/train_inner", "loss")}
    assert steps >= set(range(5, 201, 5))

    # a third run finds every step complete: nothing is logged again
    third = subprocess.run(command, env=env, capture_output=True, text=True)
    assert third.returncode == 0, third.stderr[-3000:]
    assert len(client.search_runs([experiment], max_results=1000)) == len(every)
    assert logged_updates(client, "killed") == list(range(5, 201, 5))
