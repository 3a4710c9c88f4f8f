"""The ray scheduler on a real two-node Ray cluster on one host (a head and a second raylet
with two declared GPUs, tests/ray_cluster.py): steps become detached Ray actors, GPU steps are
placed on the node with GPUs with devices of their own, outputs equal the local scheduler's,
and a driver killed while its actors run is followed by one that re-attaches to them and
starts no step twice."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mtcore.contracts.registry import load_registry
from mtcore.recipe.load import build_recipe
from mtcore.run.runner import Runner
from tests import probe_steps
from tests.ray_cluster import DRIVER_ENV, RayCluster, two_node_cluster
from tests.test_scheduler import DIAMOND, overlap, recipe

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed"
)
pytestmark = [needs_ray, pytest.mark.usefixtures("uncapped")]
MTCORE = [sys.executable, "-m", "mtcore.cli"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """The probe plugin on PYTHONPATH first, so that the nodes' workers import it too."""
    root = probe_steps.install(tmp_path_factory.mktemp("probe"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        )
        with two_node_cluster(
            tmp_path_factory.mktemp("ray"), head_cpus=1, worker_cpus=4, worker_gpus=2
        ) as running:
            yield running
    import ray

    if ray.is_initialized():
        ray.shutdown()


def scheduler(cluster: RayCluster) -> dict[str, object]:
    return {"name": "ray", "address": cluster.address, "poll_seconds": 0.2}


def test_steps_run_as_ray_actors_placed_by_their_resources(cluster, tmp_path):
    registry = load_registry()
    steps = {
        **DIAMOND,
        "g1": {**probe_steps_wait(1.5, "g1"), "gpus": 1, "inputs": {"x": "a"}},
        "g2": {**probe_steps_wait(1.5, "g2"), "gpus": 1, "inputs": {"x": "a"}},
    }
    doc = recipe(steps, scheduler=scheduler(cluster))
    result = Runner(
        build_recipe(doc, registry), registry, tmp_path / "ray", show_progress=False
    ).run()
    on_local = recipe(steps, scheduler={"name": "local", "gpus": 2})
    local = Runner(
        build_recipe(on_local, registry), registry, tmp_path / "local", show_progress=False
    ).run()
    found = probe_steps.records(tmp_path / "ray")
    assert {found["g1"]["ray_node"], found["g2"]["ray_node"]} == {cluster.worker_node_id}
    assert sorted([found["g1"]["cuda"], found["g2"]["cuda"]]) == ["0", "1"]
    assert overlap(found["g1"], found["g2"])
    assert all(r["pid"] != os.getpid() for r in found.values())
    for step in steps:
        assert result.manifest(step)["outputs"] == local.manifest(step)["outputs"], step


def probe_steps_wait(seconds: float, value: str) -> dict[str, object]:
    return {"kind": "probe_wait", "seconds": seconds, "value": value}


def test_a_killed_driver_is_followed_by_one_that_reattaches(cluster, tmp_path):
    steps = {
        "a": probe_steps_wait(0, "a"),
        "b": {**probe_steps_wait(10, "b"), "inputs": {"x": "a"}},
        "c": {**probe_steps_wait(10, "c"), "inputs": {"x": "a"}},
        "d": {**probe_steps_wait(0, "d"), "inputs": {"x": "b", "y": "c"}},
    }
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe(steps, scheduler=scheduler(cluster))))
    work = tmp_path / "w"
    command = [*MTCORE, "run", str(path), "-w", str(work)]
    env = {**os.environ, **DRIVER_ENV}
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 90
    records: list[Path] = []
    while time.monotonic() < deadline and len(records) < 2:
        records = list(work.glob("steps/.partial/[bc]-*.job/job.json"))
        time.sleep(0.2)
    assert len(records) == 2, driver.stdout.read().decode() if driver.stdout else ""
    time.sleep(3)  # the actors are running the steps
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    names = {json.loads(p.read_text())["id"] for p in records}
    import ray

    if not ray.is_initialized():
        ray.init(address=cluster.address, log_to_driver=False)
    for name in names:  # they outlived the driver
        ray.get_actor(name, namespace="mtcore")
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    for step in "bc":  # each ran once: one record, one start in its log
        text = next((work / "logs" / "steps").glob(f"{step}-*.log")).read_text()
        assert text.count("started on") == 1 and "resumed on" not in text, text
        assert len(next(work.glob(f"steps/{step}-*/out/probe.log")).read_text().splitlines()) == 1
    run_logs = sorted((work / "logs").glob("run-*.log"))
    assert run_logs[-1].read_text().count("re-attached to ray actor") == 2
    assert (next(work.glob("steps/d-*")) / "out" / "value.txt").read_text() == "d+b+a+c+a"
    for name in names:  # the actors ended themselves
        with pytest.raises(ValueError):
            ray.get_actor(name, namespace="mtcore")
