"""The scheduler contract: where whole steps run (plugins of kind ``schedulers``: local, ray,
slurm). The runner keeps the graph and decides what starts when; a scheduler only starts the
jobs it is given, reports the ones that ended, and finds again the ones a dead driver left
running.

Executors (:class:`mtcore.contracts.kinds.Executor`) are the other level: they spread the shards
inside
one data step, wherever that step runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from mtcore.contracts.plugin import ConfigT, Plugin
from mtcore.contracts.resources import Resources


@dataclass
class Job:
    """One step to run. ``call`` runs it in this process and returns its manifest (the
    local scheduler uses it for steps without GPUs); ``folder`` holds its ``spec.json`` for
    ``python -m mtcore.run.jobs FOLDER`` anywhere else (:mod:`mtcore.run.jobs`)."""

    step_id: str
    kind: str
    resources: Resources
    folder: Path
    log: Path
    call: Callable[[], dict[str, Any]] | None = None


@dataclass
class Ended:
    """A job that ended: ``error`` is None when it finished (its step directory is complete),
    else why it did not (the job's own error, or that it died)."""

    step_id: str
    error: BaseException | None = None
    manifest: dict[str, Any] | None = None


class Scheduler(Plugin[ConfigT]):
    """Starts jobs somewhere and reports when they end."""

    remote: ClassVar[bool] = False
    """Jobs outlive the driver (a Ray actor, a Slurm job): the runner records each job's id
    (``job.json``) and a new driver re-attaches instead of starting a step twice."""

    def open(self, workdir: Path) -> None:
        """Called once before the first job (connect to the cluster, start a local one)."""

    def capacity(self) -> Resources:
        """The most one place (a node) can give one step; validation refuses a step asking
        more. The local scheduler's capacity is also everything it has."""
        raise NotImplementedError

    def slots(self) -> Resources:
        """What all places together can run at once (the runner's list schedule fills it)."""
        return self.capacity()

    def submit(self, job: Job) -> str:
        """Starts ``job``; returns its id where it runs (recorded for re-attaching)."""
        raise NotImplementedError

    def attach(self, job: Job, record: dict[str, Any]) -> bool:
        """A job that a previous driver submitted (``record``: its ``job.json``): True if it
        is still alive here and is now watched like a submitted one, False if it is gone."""
        return False

    def wait(self, timeout: float) -> list[Ended]:
        """The jobs that ended since the last call, waiting up to ``timeout`` seconds for one."""
        raise NotImplementedError

    def stop(self) -> None:
        """The run was interrupted: stop what runs in this process at once. Jobs that outlive
        the driver are left running (a rerun re-attaches to them)."""

    def close(self) -> None:
        """The run is over: release connections and workers."""

    def describe(self, job_id: str) -> str:
        """Where a job runs, for the display (``slurm job 42``)."""
        return job_id
