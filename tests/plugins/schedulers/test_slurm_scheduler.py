"""The slurm scheduler against a real one-node Slurm (slurmctld, slurmd and munged started on
localhost by the ``slurm_cluster`` fixture): steps become sbatch jobs through submitit, run side
by side, give the local scheduler's outputs, and a driver killed while its jobs run is followed
by one that re-attaches to them and starts no step twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from mtcore.contracts.errors import StepError
from mtcore.contracts.registry import load_registry
from mtcore.contracts.resources import Resources
from mtcore.recipe.load import build_recipe
from mtcore.run.runner import Runner
from mtcore_plugins.schedulers.slurm import SlurmConfig, task_layout
from mtcore_plugins.steps._train_log import parse_curves
from tests.core.run.test_scheduler import DIAMOND, overlap, probe_root, recipe  # noqa: F401
from tests.support import probe_steps
from tests.support.data import clean_split_recipe, real_slice
from tests.support.slurm_cluster import slurm_cluster  # noqa: F401

MTCORE = [sys.executable, "-m", "mtcore.cli"]


@pytest.mark.parametrize(
    ("resources", "layout"),
    [
        # one task: the step's CPUs and GPUs in it
        (Resources(cpus=4, gpus=1), {"nodes": 1, "ntasks_per_node": 1, "cpus_per_task": 4,
                                     "gpus_per_node": 1}),
        # 2 CPU ranks of 1 thread: two tasks of one CPU
        (Resources(cpus=2, ranks=2, distributed=True),
         {"nodes": 1, "ntasks_per_node": 2, "cpus_per_task": 1}),
        # 16 GPU ranks on 2 nodes: 8 tasks and 8 GPUs a node
        (Resources(cpus=64, gpus=16, ranks=16, nodes=2, distributed=True),
         {"nodes": 2, "ntasks_per_node": 8, "cpus_per_task": 4, "gpus_per_node": 8}),
    ],
)  # fmt: skip
def test_a_step_of_n_ranks_is_one_job_of_nodes_by_tasks(resources, layout):
    assert task_layout(resources) == layout


def test_requeues_are_bounded_by_the_recipe():
    assert SlurmConfig().requeues == 20
    assert SlurmConfig(requeues=0).requeues == 0
    with pytest.raises(ValueError, match="requeues"):
        SlurmConfig(requeues=-1)


def test_settings_and_paths_that_would_add_lines_to_the_job_script_are_refused(tmp_path):
    """Issue 70: a newline in ``partition``, in an ``additional`` option or in the workdir path
    ran its second line as a command of the generated sbatch script."""
    from mtcore.contracts.scheduler import Job
    from mtcore_plugins.schedulers.slurm import SlurmScheduler

    for bad in ({"partition": "gpu\ntouch /tmp/owned"}, {"qos": "low\r"}, {"time": "1:00\n"}):
        with pytest.raises(ValueError, match="control character"):
            SlurmConfig(**bad)
    with pytest.raises(ValueError, match="control character"):
        SlurmConfig(additional={"constraint": "a100\ntouch /tmp/owned"})
    with pytest.raises(ValueError, match="not an sbatch option name"):
        SlurmConfig(additional={"exclusive\ntouch /tmp/owned": ""})
    assert SlurmConfig(partition="gpu", additional={"constraint": "a100"}).partition == "gpu"
    folder = tmp_path / "work\ntouch owned" / "job"
    job = Job("a", "probe_wait", Resources(), folder, folder / "a.log")
    with pytest.raises(StepError, match="control character"):
        SlurmScheduler(SlurmConfig()).submit(job)
    assert not folder.exists()


def test_the_display_says_how_often_a_step_was_requeued(tmp_path):
    import io

    from mtcore.report.display import Display

    stream = io.StringIO()
    display = Display(total=2, eta=lambda: 0.0, stream=stream, every=0.0)
    (tmp_path / "state.json").write_text(json.dumps({"state": "running", "requeues": 2}))
    display.started("train", "train", "slurm job 7", lambda: "update 5/10", folder=tmp_path)
    display.refresh()
    assert "update 5/10  (requeued 2x)  [slurm job 7]" in stream.getvalue()


def training_recipe(tmp_path, train, **head):
    """bitext -> clean -> split -> spm -> binarize -> ``train`` (a micro model, no dropout:
    trainings at different widths then compute the same updates up to float rounding)."""
    files = real_slice(tmp_path / "data", "train", 600)
    doc = clean_split_recipe("ranks", files, [{"name": "length", "max_length": 200}], 30)
    doc["steps"].update(
        {
            "spm": {"kind": "spm", "inputs": {"corpus": "split.train"}, "vocab_size": 1000,
                    "num_threads": 1},
            "binarize": {"kind": "binarize", "src": "en", "tgt": "ja",
                         "inputs": {"train": "split.train", "valid": "split.valid", "spm": "spm"}},
            "train": {"kind": "train", "inputs": {"data": "binarize"},
                      "arch": "mtcore_transformer_micro", "max_tokens": 256, "lr": 0.003,
                      "warmup_updates": 5, "dropout": 0.0, "log_interval": 1, "threads": 1,
                      **train},
        }
    )  # fmt: skip
    return {**doc, **head}


def run_recipe(doc, work):
    registry = load_registry()
    return Runner(build_recipe(doc, registry), registry, work, show_progress=False).run()


def train_folder(work):
    return next(p for p in (work / "steps").glob("train-*") if p.is_dir())


@pytest.mark.slow
@pytest.mark.usefixtures("slurm_cluster", "uncapped")
def test_a_training_of_two_ranks_is_one_slurm_job_of_two_tasks(tmp_path):
    """``ranks: 2`` on Slurm: one job of two tasks, task 0 the step and rank 0, task 1 rank 1
    (gloo); its loss curve is the one-rank training's with update_freq doubled (the same
    training stated with batch_tokens), up to float rounding."""
    train = {"batch_tokens": 512, "max_update": 12}
    slurm = {"name": "slurm", "poll_seconds": 0.5}
    two = training_recipe(tmp_path, train, scheduler=slurm, resources={"train": {"ranks": 2}})
    run_recipe(two, tmp_path / "two")
    one = training_recipe(tmp_path, train)
    run_recipe(one, tmp_path / "one")
    slurm_logs = next((tmp_path / "two" / "logs" / "steps").glob("train-*.slurm"))
    tasks = {p.name.split("_")[1] for p in slurm_logs.glob("*_log.out")}
    assert tasks == {"0", "1"}  # one job (one id), two tasks
    assert "distributed init (rank 1)" in (slurm_logs / "rank-1.log").read_text()
    text = (train_folder(tmp_path / "two") / "model" / "train.log").read_text()
    assert "distributed init (rank 0)" in text and "distributed init (rank 1)" not in text
    model2, model1 = (
        train_folder(tmp_path / "two") / "model",
        train_folder(tmp_path / "one") / "model",
    )
    manifest2 = json.loads((model2.parent / "manifest.json").read_text())
    assert (manifest2["metrics"]["ranks"], manifest2["metrics"]["update_freq"]) == (2, 1)
    manifest1 = json.loads((model1.parent / "manifest.json").read_text())
    assert (manifest1["metrics"]["ranks"], manifest1["metrics"]["update_freq"]) == (1, 2)
    curve2 = parse_curves(model2 / "train.log")["train/loss"]
    curve1 = parse_curves(model1 / "train.log")["train/loss"]
    assert [u for u, _ in curve2] == [u for u, _ in curve1] == list(range(1, 13))
    # fairseq logs 3 decimals; the ranks sum their gradients in another order than one process
    # accumulating two batches: 0.01 on a loss of ~9
    assert max(abs(a - b) for (_, a), (_, b) in zip(curve2, curve1, strict=True)) <= 0.01


@pytest.mark.usefixtures("slurm_cluster", "probe_root", "uncapped")
def test_steps_run_as_slurm_jobs_side_by_side_to_the_local_outputs(tmp_path):
    registry = load_registry()
    doc = recipe(DIAMOND, scheduler={"name": "slurm", "poll_seconds": 0.5})
    slurm = Runner(build_recipe(doc, registry), registry, tmp_path / "slurm", show_progress=False)
    result = slurm.run()
    local = Runner(
        build_recipe(recipe(DIAMOND), registry), registry, tmp_path / "local", show_progress=False
    ).run()
    found = probe_steps.records(tmp_path / "slurm")
    assert len({r["slurm_job"] for r in found.values()}) == 4 and None not in {
        r["slurm_job"] for r in found.values()
    }
    assert overlap(found["b"], found["c"])
    for step in DIAMOND:
        assert result.manifest(step)["outputs"] == local.manifest(step)["outputs"], step
    # submitit's files (the job's stdout and stderr) beside the step's log
    assert list((tmp_path / "slurm" / "logs" / "steps").glob("b-*.slurm/*_log.out"))


@pytest.mark.usefixtures("slurm_cluster", "probe_root", "uncapped")
def test_a_killed_driver_is_followed_by_one_that_reattaches(tmp_path):
    steps = {
        "a": {"kind": "probe_wait", "seconds": 0, "value": "a"},
        "b": {"kind": "probe_wait", "seconds": 12, "value": "b", "inputs": {"x": "a"}},
        "c": {"kind": "probe_wait", "seconds": 12, "value": "c", "inputs": {"x": "a"}},
        "d": {"kind": "probe_wait", "seconds": 0, "value": "d", "inputs": {"x": "b", "y": "c"}},
    }
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe(steps, scheduler={"name": "slurm", "poll_seconds": 0.5})))
    work = tmp_path / "w"
    command = [*MTCORE, "run", str(path), "-w", str(work)]
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    records = []
    while time.monotonic() < deadline and len(records) < 2:
        records = list(work.glob("steps/.partial/[bc]-*.job/job.json"))
        time.sleep(0.2)
    assert len(records) == 2, driver.stdout.read().decode() if driver.stdout else ""
    time.sleep(2)  # the jobs are running
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    ids = {json.loads(p.read_text())["id"] for p in records}
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    assert ids <= set(queued.split()), (ids, queued)  # they outlived the driver
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    found = probe_steps.records(work)
    assert {found["b"]["slurm_job"], found["c"]["slurm_job"]} == ids
    for step in "bc":  # each ran once: one record, one start in its log
        logs = list((work / "logs" / "steps").glob(f"{step}-*.log"))
        text = logs[0].read_text()
        assert text.count("started on") == 1 and "resumed on" not in text, text
        outputs = list(work.glob(f"steps/{step}-*/out/probe.log"))
        assert len(outputs[0].read_text().splitlines()) == 1
    run_logs = sorted((work / "logs").glob("run-*.log"))
    assert "re-attached to slurm job" in run_logs[-1].read_text()
    assert (next(work.glob("steps/d-*")) / "out" / "value.txt").read_text() == "d+b+a+c+a"
    assert os.environ.get("SLURM_CONF")


def model_hash(work):
    return json.loads((train_folder(work) / "manifest.json").read_text())["outputs"][
        "model/checkpoint.pt"
    ]


def wait_for(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"no {what} in {seconds} s"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.long  # CI's budget: make test-long (issue 67)
@pytest.mark.usefixtures("slurm_cluster", "uncapped")
def test_a_preempted_training_saves_is_requeued_and_resumes_to_the_same_model(tmp_path):
    """submitit's signal (what Slurm sends a job before its time limit or on preemption) sent
    mid-training: the training saves checkpoint_last.pt after its current update, the job is
    queued again with the same step and hash and resumes there, to the model an uninterrupted
    training gives."""
    train = {"max_update": 600, "save_interval_updates": 100, "keep_last": 2, "average_last": 2}
    slurm = {"name": "slurm", "poll_seconds": 0.5, "requeues": 3}
    doc = training_recipe(tmp_path, train, scheduler=slurm)
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    work = tmp_path / "w"
    driver = subprocess.Popen([*MTCORE, "run", str(path), "-w", str(work), "-q"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        log = lambda: next(work.glob("steps/.partial/train-*/model/train.log"), None)  # noqa: E731
        wait_for(lambda: log() is not None and '"num_updates": "3"' in log().read_text(), 240,
                 "third update")  # fmt: skip
        job_id = json.loads(next(work.glob("steps/.partial/train-*.job/job.json")).read_text())
        subprocess.run(["scancel", "--signal=USR2", job_id["id"]], check=True)
        out, _ = driver.communicate(timeout=300)
    finally:
        driver.kill()
    assert driver.returncode == 0, out.decode()
    text = (train_folder(work) / "model" / "train.log").read_text()
    assert "saved checkpoint_last.pt after update" in text and "exiting with status 75" in text
    assert text.count("Loaded checkpoint") == 1  # the requeued job resumed from it
    assert json.loads((train_folder(work) / "manifest.json").read_text())["requeues"] == 1
    run_log = next((work / "logs").glob("run-*.log")).read_text()
    assert "stopped and queued again (1 of at most 3 requeues)" in run_log
    run_recipe(training_recipe(tmp_path, train), tmp_path / "through")
    assert model_hash(work) == model_hash(tmp_path / "through")


@pytest.mark.slow
@pytest.mark.long  # CI's budget: make test-long (issue 67)
@pytest.mark.usefixtures("slurm_cluster", "uncapped")
def test_a_training_longer_than_its_time_limit_finishes_through_requeues(tmp_path):
    """``resources: {time: 2}`` (minutes) for a training of several minutes: Slurm signals the
    job 30 s before each limit (a quarter of it), the training saves, the job is queued again,
    as often as it takes; the model is the uninterrupted training's."""
    train = {"max_update": MANY_UPDATES, "save_interval_updates": 50, "keep_last": 2,
             "average_last": 2, "log_interval": 10}  # fmt: skip
    slurm = {"name": "slurm", "poll_seconds": 1, "requeues": 20}
    doc = training_recipe(tmp_path, train, scheduler=slurm, resources={"train": {"time": 2}})
    started = time.monotonic()
    run_recipe(doc, tmp_path / "w")
    print(f"through requeues in {time.monotonic() - started:.0f} s")
    manifest = json.loads((train_folder(tmp_path / "w") / "manifest.json").read_text())
    assert manifest["requeues"] >= 2, manifest
    started = time.monotonic()
    run_recipe(training_recipe(tmp_path, train), tmp_path / "through")
    print(f"uninterrupted in {time.monotonic() - started:.0f} s")
    assert model_hash(tmp_path / "w") == model_hash(tmp_path / "through")


# about 5 minutes of the micro model on one CPU (some 40 updates a second here); fewer through
# MTCORE_TEST_REQUEUE_UPDATES for a quicker look (each 2-minute job trains 30 to 90 s of it:
# Slurm sends the signal up to a minute before the 30 s it is asked for)
MANY_UPDATES = int(os.environ.get("MTCORE_TEST_REQUEUE_UPDATES", "12000"))
