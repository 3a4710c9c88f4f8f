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

from mtcore.contracts.registry import load_registry
from mtcore.recipe.load import build_recipe
from mtcore.run.runner import Runner
from tests import probe_steps
from tests.slurm_cluster import slurm_cluster  # noqa: F401
from tests.test_scheduler import DIAMOND, overlap, probe_root, recipe  # noqa: F401

MTCORE = [sys.executable, "-m", "mtcore.cli"]


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
