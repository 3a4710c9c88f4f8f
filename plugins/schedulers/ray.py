"""Steps on a Ray cluster: each step a detached, named Ray actor holding the step's CPUs, GPUs
and memory, which runs ``mtcore.run.jobs.run_job`` on the workdir (a file system that every node
shares, at the same path) and ends itself. Detached, so it outlives the driver: a new driver
finds it by its name (recorded in the step's job folder) and waits for it instead of starting
the step a second time. Ray sets the actor's ``CUDA_VISIBLE_DEVICES`` to the GPUs it holds.
Data steps inside keep the executor the recipe configures.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from mtcore.api import (
    Ended,
    Job,
    PluginConfig,
    PluginError,
    Resources,
    Scheduler,
    StepError,
    job_state,
    largest,
    total,
)
from mtcore_plugins.common.ray_local import restore, start_private

INSTALL_HINT = "scheduler 'ray' needs Ray: pip install 'mtcore[ray]' (or 'ray[default]')"


class RaySchedulerConfig(PluginConfig):
    address: str | None = Field(
        None,
        max_length=500,
        description="a running cluster ('auto', or host:port of its head); default: a cluster "
        "of this machine started for the run (its steps end with the run)",
    )
    namespace: str = Field("mtcore", max_length=100, description="Ray namespace of the actors")
    poll_seconds: float = Field(0.5, gt=0, le=600, description="how often jobs are looked at")


class StepActor:
    """One step's job; ``run`` runs it and ends the actor (freeing its resources)."""

    def run(self, folder: str) -> str:
        import ray

        from mtcore.api import run_job

        try:
            return run_job(folder)
        finally:
            ray.actor.exit_actor()


class RayScheduler(Scheduler[RaySchedulerConfig]):
    name = "ray"
    remote: ClassVar[bool] = True

    def __init__(self, config: RaySchedulerConfig | None = None) -> None:
        super().__init__(config)
        self._watched: dict[str, tuple[str, Any, Path]] = {}  # step -> (name, call ref, folder)
        self._started_here = False
        self._auth_env: dict[str, str | None] | None = None  # what start_private replaced
        self._prefix = "mtcore"

    def open(self, workdir: Path) -> None:
        try:
            import ray
        except ImportError as exc:
            raise PluginError(INSTALL_HINT) from exc
        if not ray.is_initialized():
            address = self.config.address
            try:
                if address is None:  # a cluster of this machine, private to it: ray_local.py
                    self._auth_env = start_private(ray, namespace=self.config.namespace)
                else:
                    ray.init(
                        address=address,
                        namespace=self.config.namespace,
                        logging_level=logging.WARNING,
                    )
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise PluginError(
                    f"scheduler 'ray': cannot connect to the Ray cluster at {address!r}: {exc}"
                ) from exc
            self._started_here = True
        digest = hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:10]
        self._prefix = f"mtcore-{digest}"  # actor names unique per workdir

    def _nodes(self) -> list[Resources]:
        import ray

        out = []
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            have = node.get("Resources", {})
            out.append(
                Resources(
                    cpus=int(have.get("CPU", 0)),
                    gpus=int(have.get("GPU", 0)),
                    memory_gb=float(have.get("memory", 0)) / 1024**3,
                )
            )
        if not out:
            raise PluginError("scheduler 'ray': the cluster has no live node")
        return out

    def capacity(self) -> Resources:
        return largest(self._nodes())

    def slots(self) -> Resources:
        return total(self._nodes())

    def submit(self, job: Job) -> str:
        import ray

        name = f"{self._prefix}-{job.folder.name.removesuffix('.job')}"
        res = job.resources
        options: dict[str, Any] = {
            "name": name,
            "namespace": self.config.namespace,
            "lifetime": "detached",
            "num_cpus": res.cpus,
            "num_gpus": res.gpus,
            "max_restarts": 0,
        }
        if res.memory_gb:
            options["memory"] = int(res.memory_gb * 1024**3)
        actor: Any = ray.remote(StepActor).options(**options).remote()
        self._watched[job.step_id] = (name, actor.run.remote(str(job.folder)), job.folder)
        return name

    def attach(self, job: Job, record: dict[str, Any]) -> bool:
        name = str(record.get("id", ""))
        if not name or not self._alive(name):
            return False
        self._watched[job.step_id] = (name, None, job.folder)
        return True

    def _alive(self, name: str) -> bool:
        import ray

        try:
            ray.get_actor(name, namespace=self.config.namespace)
        except ValueError:
            return False
        return True

    def wait(self, timeout: float) -> list[Ended]:
        deadline = time.monotonic() + timeout
        while True:
            ended = self._poll()
            if ended or time.monotonic() >= deadline:
                return ended
            time.sleep(min(self.config.poll_seconds, max(0.0, deadline - time.monotonic())))

    def _poll(self) -> list[Ended]:
        import ray

        out = []
        for step_id, (name, ref, folder) in list(self._watched.items()):
            if ref is not None:
                ready, _ = ray.wait([ref], timeout=0)
                if not ready:
                    continue
            elif self._alive(name):
                continue
            del self._watched[step_id]
            state = job_state(folder)
            error = None
            if state["state"] == "failed":
                error = StepError(
                    f"step {step_id!r} failed in Ray actor {name}: {state.get('error')}"
                )
            out.append(Ended(step_id, error=error))
        return out

    def close(self) -> None:
        if self._started_here:
            import ray

            ray.shutdown()
            self._started_here = False
            if self._auth_env is not None:
                restore(self._auth_env)
                self._auth_env = None

    def describe(self, job_id: str) -> str:
        return f"ray actor {job_id}"
