"""The two-node Ray cluster of tests/support/ray_cluster.py: GPU tasks run on the second node with a
device each, a custom resource and node affinity place tasks, nothing it starts listens beyond
127.0.0.1, and a detached named actor outlives the driver that created it until it exits itself.

This process is one driver of the cluster (``driver``); drivers that must come and go run in
subprocesses.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ray_cluster import (  # noqa: F401
    DRIVER_ENV,
    RayCluster,
    listening_sockets,
    ray_two_nodes,
)

HAS_RAY = importlib.util.find_spec("ray") is not None
NO_RAY = "ray is not installed (pip install 'mtcore[ray]')"
needs_ray = pytest.mark.skipif(not HAS_RAY, reason=NO_RAY)

WAIT_S = 30  # for a task's or a marker's wait

CREATOR = """
import pathlib, sys, time

import ray

address, marks, name, namespace, seconds = sys.argv[1:]
marks = pathlib.Path(marks)


@ray.remote(num_cpus=0)
class Holder:
    def hold(self, seconds):
        (marks / "started").write_text(str(time.time()))
        time.sleep(seconds)
        (marks / "finished").write_text(str(time.time()))
        ray.actor.exit_actor()


ray.init(address=address)
holder = Holder.options(name=name, namespace=namespace, lifetime="detached").remote()
holder.hold.remote(float(seconds))  # its result is never asked for
deadline = time.monotonic() + 30
while not (marks / "started").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(0 if (marks / "started").exists() else "the call never started")
"""
"""A driver that creates a detached named actor, starts a long call on it and exits."""


@pytest.fixture(scope="module")
def driver(ray_two_nodes: RayCluster) -> Iterator[RayCluster]:  # noqa: F811
    """This process connected to the cluster as a driver, for the module (ray.init holds per
    process)."""
    import ray

    ray.init(address=ray_two_nodes.address)
    yield ray_two_nodes
    ray.shutdown()


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


@needs_ray
def test_gpu_tasks_run_on_the_second_node_one_device_each(
    driver: RayCluster, tmp_path: Path
) -> None:
    import ray

    def placement() -> tuple[str, str | None]:
        return ray.get_runtime_context().get_node_id(), os.environ.get("CUDA_VISIBLE_DEVICES")

    def side_by_side(rendezvous: str) -> str:
        """Its device, once two tasks have checked in: the two run at the same time."""
        (Path(rendezvous) / str(os.getpid())).touch()
        deadline = time.monotonic() + WAIT_S
        while len(list(Path(rendezvous).iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        return os.environ["CUDA_VISIBLE_DEVICES"]

    one = ray.remote(num_gpus=1)(placement).remote()
    assert ray.get(one, timeout=WAIT_S) in [
        (driver.worker_node_id, "0"),
        (driver.worker_node_id, "1"),
    ]
    # No CPU each: the second node has one, so two 1-CPU tasks would run one after the other
    # (and might both get device 0); the rendezvous proves these two overlap.
    pair = ray.remote(num_gpus=1, num_cpus=0)(side_by_side)
    devices = ray.get([pair.remote(str(tmp_path)), pair.remote(str(tmp_path))], timeout=WAIT_S)
    assert sorted(devices) == ["0", "1"]


@needs_ray
def test_a_custom_resource_and_node_affinity_place_tasks(driver: RayCluster) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def node_id() -> str:
        return ray.get_runtime_context().get_node_id()

    node = ray.remote(node_id)
    second = node.options(num_cpus=1, num_gpus=0, resources={"second_node": 0.01}).remote()
    head = node.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(driver.head_node_id, soft=False)
    ).remote()
    assert ray.get([second, head], timeout=WAIT_S) == [driver.worker_node_id, driver.head_node_id]
    assert ray.get_runtime_context().get_node_id() == driver.head_node_id  # where drivers attach


@needs_ray
def test_nothing_the_cluster_starts_listens_beyond_loopback(
    driver: RayCluster, tmp_path: Path
) -> None:
    """Checked with a task in flight on each node, so their busy workers' servers count too."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def hold(marks: str) -> None:
        (Path(marks) / str(os.getpid())).touch()
        deadline = time.monotonic() + WAIT_S
        while not (Path(marks) / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    task = ray.remote(num_cpus=0)(hold)
    held = [
        task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
            str(tmp_path)
        )
        for node in (driver.head_node_id, driver.worker_node_id)
    ]
    try:
        deadline = time.monotonic() + WAIT_S
        while len(list(tmp_path.iterdir())) < 2:
            assert time.monotonic() < deadline, "the held tasks never started"
            time.sleep(0.05)
        sockets = listening_sockets(driver.pids)
    finally:
        (tmp_path / "release").touch()
    ray.get(held, timeout=WAIT_S)
    gcs_port = int(driver.address.rsplit(":", 1)[1])
    assert gcs_port in {port for _, port, _ in sockets}  # the listing sees the cluster
    assert {address for address, _, _ in sockets} == {"127.0.0.1"}, sockets


@needs_ray
def test_detached_actor_outlives_its_driver_until_it_exits(
    driver: RayCluster, tmp_path: Path
) -> None:
    """Observed with Ray 2.58: the actor survives its creator's exit, and so does the call the
    creator started on it, which runs to its end although nobody will read its result. The name
    resolves until the actor exits (``ray.actor.exit_actor()``), and is gone from the first
    lookup after that (about 0.05 s after the call's last line here); a new actor may then take
    it."""
    import ray

    name, namespace = "holder", "test_ray_cluster"
    creator = subprocess.run(
        [sys.executable, "-c", CREATOR, driver.address, str(tmp_path), name, namespace, "8"],
        capture_output=True,
        text=True,
        timeout=WAIT_S + 15,
        env={**os.environ, **DRIVER_ENV},
    )
    assert creator.returncode == 0, creator.stderr[-3000:]
    creator_gone = time.time()

    ray.get_actor(name, namespace=namespace)  # found by this, another driver
    _wait_for(tmp_path / "finished")
    finished = float((tmp_path / "finished").read_text())
    assert finished > creator_gone  # the call ran on after its caller's exit

    deadline = time.monotonic() + 10
    while True:
        try:
            ray.get_actor(name, namespace=namespace)
        except ValueError:
            break
        assert time.monotonic() < deadline, "the name outlived the actor by 10 s"
        time.sleep(0.05)
    with pytest.raises(ValueError):
        ray.get_actor(name, namespace=namespace)

    class Named:
        def ping(self) -> str:
            return "pong"

    reused = ray.remote(num_cpus=0)(Named).options(name=name, namespace=namespace).remote()
    assert ray.get(reused.ping.remote(), timeout=WAIT_S) == "pong"
    ray.kill(reused)
