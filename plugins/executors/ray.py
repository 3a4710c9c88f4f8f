"""Runs data-step shards on Ray, an existing distributed engine (no cluster code of our own).

Tasks run on a pool of long-lived Ray actors, one process each, so what a worker caches at
module level (the built filter chain of :mod:`mtcore.chain.filtering`, and with it any model a
filter
loaded) is built once per worker, not once per shard. Results come back in task order with a
bounded number in flight, exactly like the local executor, so :func:`mtcore.exec.shards.map_shards`
saves each finished shard on the driver as it arrives: a worker or driver that dies loses only
the shards in flight. A shard whose worker died is retried on the restarted worker
(``max_retries``); past that the step fails with a :class:`~mtcore.contracts.errors.StepError` and a
rerun submits only the missing shards.

Ray is optional (``pip install 'mtcore[ray]'``) and imported only when workers start.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pydantic import Field, model_validator

from mtcore.api import Executor, PluginConfig, PluginError, StepError
from mtcore_plugins.common.runtime.ray_local import restore, start_private

INSTALL_HINT = "executor 'ray' needs Ray, which is not installed: pip install 'mtcore[ray]'"
log = logging.getLogger("mtcore.executors.ray")
_NONE = object()


class RayConfig(PluginConfig):
    address: str | None = Field(
        None,
        min_length=1,
        description="cluster to connect to: 'auto' (the cluster this node belongs to), "
        "'host:port' of the head node, or 'ray://host:port' (Ray client); unset starts a "
        "local cluster for the run and stops it afterwards",
    )
    num_cpus: int | None = Field(
        None, ge=1, le=4096, description="CPUs of the local cluster (unset: all cores)"
    )
    workers: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="worker actors (one process each); unset: the cluster's CPUs divided by "
        "cpus_per_worker",
    )
    cpus_per_worker: float = Field(1.0, gt=0, le=256, description="CPUs Ray reserves per worker")
    gpus_per_worker: float = Field(
        0.0, ge=0, le=16, description="GPUs Ray reserves per worker (translation shards)"
    )
    max_in_flight: int = Field(
        0,
        ge=0,
        le=100_000,
        description="shards submitted ahead of the one the driver waits for; 0 means twice "
        "the workers (bounds the driver's and the object store's memory)",
    )
    max_retries: int = Field(
        3,
        ge=0,
        le=100,
        description="times a shard is rerun on a restarted worker after its worker process "
        "died; 0 fails the step at once (finished shards are kept for the rerun)",
    )
    runtime_env: dict[str, Any] | None = Field(
        None,
        description="Ray runtime_env of the workers (env_vars, py_modules, pip, ...), "
        "passed through as given",
    )
    start_timeout_s: float = Field(
        300.0, gt=0, le=86_400, description="seconds to wait for the workers to be placed"
    )

    @model_validator(mode="after")
    def _local_only(self) -> RayConfig:
        if self.num_cpus is not None and self.address is not None:
            raise ValueError(
                "num_cpus sizes a local cluster; a cluster given by address has its own size "
                "(use workers to choose how many workers run)"
            )
        cpus = self.num_cpus
        if cpus is not None and self.workers and self.workers * self.cpus_per_worker > cpus:
            raise ValueError(
                f"{self.workers} workers of {self.cpus_per_worker:g} CPU do not fit in a "
                f"local cluster of num_cpus={cpus}"
            )
        return self


class ShardWorker:
    """One long-lived worker process (a Ray actor): its module-level caches persist across the
    shards it runs."""

    def __init__(self) -> None:
        self.tasks = 0

    def run(self, fn: Callable[[Any], Any], task: Any) -> Any:
        self.tasks += 1
        return fn(task)

    def call(self, fn: Callable[[], Any]) -> Any:
        return fn()

    def pid(self) -> int:
        return os.getpid()


class RayExecutor(Executor[RayConfig]):
    """Runs a data step's shards on Ray worker actors (a local or a multi-node cluster).

    ``map(fn, tasks)`` yields results in task order with at most ``max_in_flight`` tasks
    pending. The cluster is joined or started on first use; ``close`` stops the workers, and
    the cluster only when this executor started it."""

    name = "ray"

    def __init__(self, config: RayConfig | None = None) -> None:
        super().__init__(config)
        require_ray()
        self._initialized = False  # whether this executor called ray.init
        self._local = False  # whether that started a local cluster
        self._auth_env: dict[str, str | None] | None = None  # what start_private replaced
        self._workers: list[Any] = []
        self._lock = threading.Lock()  # steps running side by side share the workers

    @property
    def shares_files(self) -> bool:
        """Only a local cluster's workers surely see the driver's files."""
        return self.config.address in (None, "local")

    def map(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        tasks = iter(tasks)
        first = next(tasks, _NONE)
        if first is _NONE:  # nothing to do: start nothing
            return
        with self._lock:
            ray = self._connect()
            workers = self._start_workers(ray)
        limit = self.config.max_in_flight or 2 * len(workers)
        pending: deque[tuple[Any, int]] = deque()  # (result ref, worker index) in task order
        for task in itertools.chain([first], tasks):
            index = _least_busy(ray, pending, len(workers))
            pending.append((workers[index].run.remote(fn, task), index))
            if len(pending) >= limit:
                yield self._result(ray, pending.popleft()[0])
        while pending:
            yield self._result(ray, pending.popleft()[0])

    def run_on_workers(self, fn: Callable[[], Any]) -> list[Any]:
        """``fn()`` once in every worker process, in worker order (starting them if needed):
        for warming up, or reading what a worker holds."""
        with self._lock:
            ray = self._connect()
            workers = self._start_workers(ray)
        return [self._result(ray, ref) for ref in [w.call.remote(fn) for w in workers]]

    def close(self) -> None:
        if self._workers:
            import ray

            for worker in self._workers:
                ray.kill(worker)
            self._workers = []
        if self._initialized:
            import ray

            ray.shutdown()  # stops a local cluster; only disconnects from one given by address
            self._initialized = False
            if self._auth_env is not None:
                restore(self._auth_env)
                self._auth_env = None

    def _connect(self) -> Any:
        try:
            import ray
        except ImportError as exc:
            raise PluginError(INSTALL_HINT) from exc
        if ray.is_initialized():  # this process already joined a cluster: use it, keep it
            return ray
        address = self.config.address or "local"
        try:
            if address == "local":  # private to this machine: ray_local.py
                self._auth_env = start_private(ray, num_cpus=self.config.num_cpus)
            else:
                ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise PluginError(
                f"executor 'ray': cannot connect to the Ray cluster at {address!r}: {exc} "
                "(start one with `ray start --head`, or leave executor.address unset for a "
                "local cluster)"
            ) from exc
        self._initialized = True
        self._local = address == "local"
        return ray

    def _start_workers(self, ray: Any) -> list[Any]:
        if self._workers:
            return self._workers
        count = self.config.workers or self._cluster_workers(ray)
        self._check_fits(ray, count)
        retries = self.config.max_retries
        options: dict[str, Any] = {
            "num_cpus": self.config.cpus_per_worker,
            "num_gpus": self.config.gpus_per_worker,
            "max_restarts": -1 if retries else 0,  # each shard's own retries bound the restarts
            "max_task_retries": retries,
        }
        if self.config.runtime_env is not None:
            options["runtime_env"] = self.config.runtime_env
        actor = ray.remote(ShardWorker).options(**options)
        self._workers = [actor.remote() for _ in range(count)]
        ready = [w.pid.remote() for w in self._workers]
        try:
            pids = ray.get(ready, timeout=self.config.start_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            self.close()
            raise PluginError(
                f"executor 'ray': {count} workers of {self.config.cpus_per_worker} CPU and "
                f"{self.config.gpus_per_worker} GPU were not placed within "
                f"{self.config.start_timeout_s:g} s; the cluster has "
                f"{_resources(ray)} (lower executor.workers or add nodes)"
            ) from exc
        log.info("ray: %d workers started (pids %s)", count, pids)
        return self._workers

    def _cluster_workers(self, ray: Any) -> int:
        cpus = float(ray.cluster_resources().get("CPU", 0))
        return max(1, int(cpus // self.config.cpus_per_worker))

    def _check_fits(self, ray: Any, count: int) -> None:
        """A local cluster cannot grow: refuse at once what it cannot place (a cluster given by
        address may autoscale, so there the start timeout decides)."""
        if not self._local:
            return
        total = ray.cluster_resources()
        needs = {"CPU": count * self.config.cpus_per_worker}
        if self.config.gpus_per_worker:
            needs["GPU"] = count * self.config.gpus_per_worker
        for resource, amount in needs.items():
            if amount > float(total.get(resource, 0)) + 1e-9:
                self.close()
                raise PluginError(
                    f"executor 'ray': {count} workers need {amount:g} {resource} but the local "
                    f"cluster has {_resources(ray, total)} (lower executor.workers or raise "
                    "executor.num_cpus)"
                )

    def _result(self, ray: Any, ref: Any) -> Any:
        """The task's value; a worker's own exception is raised as itself (as the local pool
        does), a worker that died past its retries becomes a StepError."""
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, Exception):
                raise cause from exc
            raise
        except ray.exceptions.RayError as exc:
            raise StepError(
                f"a Ray worker died while running a shard ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}), after "
                f"executor.max_retries={self.config.max_retries} retries. Shards finished "
                "so far are saved: run the step again to redo only the missing ones."
            ) from exc


def require_ray() -> None:
    """A PluginError with the install command when ``ray`` cannot be imported (checked without
    importing it, so validating a recipe stays fast)."""
    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise PluginError(INSTALL_HINT)


def _least_busy(ray: Any, pending: deque[tuple[Any, int]], workers: int) -> int:
    """The worker with the fewest unfinished tasks (ties: the lowest index), so that a slow
    shard does not hold back the tasks queued behind it on the same worker."""
    busy = [0] * workers
    if pending:
        refs = [ref for ref, _ in pending]
        _, unfinished = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        waiting = set(unfinished)
        for ref, index in pending:
            if ref in waiting:
                busy[index] += 1
    return min(range(workers), key=busy.__getitem__)


def _resources(ray: Any, total: dict[str, Any] | None = None) -> str:
    total = total if total is not None else ray.cluster_resources()
    return ", ".join(f"{total.get(k, 0):g} {k}" for k in ("CPU", "GPU"))
