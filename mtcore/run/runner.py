"""Runs a plan: skips steps whose complete output exists and runs the others, side by side
where their resources allow, each in a resume-safe working directory renamed into place with a
manifest once the step has finished (:mod:`mtcore.run.jobs`).

The schedule: a step whose inputs are complete is ready; ready steps start as soon as their
resources (:mod:`mtcore.contracts.resources`) are free on the scheduler (a ``schedulers`` plugin:
local, ray, slurm), longest remaining path first (:mod:`mtcore.run.schedule`). A failing step stops
new starts and lets the running ones finish; with ``keep_going`` every step that does not
depend on a failure still runs. A step's outputs never depend on what ran beside it."""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from mtcore.contracts.errors import MtcoreError
from mtcore.contracts.hooks import lifecycle_manager
from mtcore.contracts.registry import Registry
from mtcore.contracts.resources import default_slots
from mtcore.contracts.step import config_dict
from mtcore.recipe.hashing import owner_only
from mtcore.recipe.load import Recipe
from mtcore.recipe.paths import steps_root
from mtcore.recipe.plan import PlannedStep, make_plan, step_dir
from mtcore.run.cache import (
    MANIFEST,
    ContentIndex,
    adopt,
    is_complete,
    links_changed,
    open_lock,
    read_manifest,
)
from mtcore.run.jobs import make_executor, run_plugin
from mtcore.run.progress import DisplayFactory
from mtcore.run.results import RunResult, StepResult

__all__ = [
    "MANIFEST",
    "RunResult",
    "Runner",
    "StepResult",
    "is_complete",
    "make_executor",
    "read_manifest",
    "run_plugin",
]
log = logging.getLogger("mtcore")


@contextmanager
def workdir_lock(workdir: Path) -> Iterator[None]:
    """One run a workdir. The lock is the kernel's (``flock``), so a killed run holds none; the
    file keeps the holder's pid to name it, or, left by a killed run, to say whose lock a new run
    takes over."""
    workdir.mkdir(parents=True, exist_ok=True)
    owner_only(workdir, "workdir")
    with open_lock(workdir / ".lock") as handle:
        holder = handle.read().strip()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise MtcoreError(
                f"workdir {workdir} is in use by another mtcore run (pid {holder or 'unknown'}); "
                "wait for it to finish, or stop it, or use another --workdir"
            ) from exc
        if holder and holder != str(os.getpid()):
            log.info("workdir %s: taking over the lock of run %s, which has ended", workdir, holder)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:  # a run that ends (even by an exception) leaves no pid behind; a killed one does
            handle.seek(0)
            handle.truncate()


@contextmanager
def run_log(workdir: Path) -> Iterator[Path]:
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("mtcore")
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()


class Runner:
    """Runs one recipe in one workdir and returns what happened (a ``RunResult``); the end of a
    run is an event (``mtcore_run_finished``) on ``hooks``, a pluggy manager, and what presents
    a run listens for it: the CLI passes :func:`mtcore.report.hooks.make_plugin_manager`'s,
    whose report writer writes ``report.md`` and the run page. Without ``hooks``, a manager
    with no implementation: the run writes no report."""

    def __init__(
        self,
        recipe: Recipe,
        registry: Registry,
        workdir: Path,
        hooks: Any = None,
        show_progress: bool = True,
        label: str | None = None,
        scheduler: str | None = None,
        slots: dict[str, int] | None = None,
        keep_going: bool = False,
        display: DisplayFactory | None = None,
    ) -> None:
        """``label`` names this run's report files (``report.<label>.md``) where several
        variants share one workdir (``mtcore compare``, ``--ablate``). ``scheduler`` replaces
        the recipe's (``local``, ``ray``, ``slurm``); ``slots`` caps what steps hold at once
        (``{"cpu": 1}``: one step at a time; default: ``MTCORE_SLOTS``). ``display``: makes what
        shows the run's progress on stderr (:class:`mtcore.report.display.Display`, as the CLI
        passes: a terminal gets the live block while ``show_progress``, anything else plain
        lines); none by default."""
        self.recipe = recipe
        self.registry = registry
        self.workdir = workdir
        self.hooks = hooks if hooks is not None else lifecycle_manager()
        self.show_progress = show_progress
        self.label = label
        self.scheduler_name = scheduler
        self.slots = slots if slots is not None else default_slots()
        self.keep_going = keep_going
        self.display = display
        self.running: list[str] = []

    @property
    def current(self) -> str | None:
        """The steps running now, for a message about an interrupted run."""
        return ", ".join(self.running) or None

    def status(self, until: str | None = None) -> list[tuple[PlannedStep, bool]]:
        plan = make_plan(self.recipe, self.registry, until)
        return [(p, is_complete(step_dir(self.workdir, p))) for p in plan]

    def run(self, until: str | None = None) -> RunResult:
        from mtcore.run.driver import Driver

        plan = make_plan(self.recipe, self.registry, until)
        self.planned = {p.id: p for p in plan}
        self._index = ContentIndex(steps_root(self.workdir))
        with workdir_lock(self.workdir), run_log(self.workdir) as log_file:
            self._write_resolved()
            self._write_plan(plan)
            self.hooks.hook.mtcore_run_started(
                recipe=self.recipe, workdir=self.workdir, plan=plan, label=self.label
            )
            result = RunResult(self.workdir, log_file=log_file)
            Driver(self, plan, result).run()
            order = {p.id: i for i, p in enumerate(plan)}
            result.results.sort(key=lambda r: order[r.planned.id])
            self.hooks.hook.mtcore_run_finished(recipe=self.recipe, result=result, label=self.label)
            return result

    def cached(self, planned: PlannedStep, key: str | None) -> dict[str, Any] | None:
        """The manifest of the step's complete output, or of a complete step with the same
        content key reused as its output (early cutoff); None when the step must run.
        ``key``: the step's content key, needed only when its directory is not complete."""
        final = step_dir(self.workdir, planned)
        complete = is_complete(final)
        if complete and not links_changed(planned.id, final):
            log.info("step %s: cached (%s)", planned.id, final.name)
            return read_manifest(final)
        if complete or key is None:
            return None
        return self._reuse(planned, key)

    def _write_resolved(self) -> None:
        resolved = {k: v for k, v in self.recipe.resolved.items() if k != "profiles"}
        resolved["profile"] = self.recipe.profile
        if self.recipe.ablated:
            resolved["ablated"] = list(self.recipe.ablated)
        text = yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True)
        name = self.recipe.name if self.label is None else self.label
        (self.workdir / f"{name}.resolved.yaml").write_text(text, encoding="utf-8")

    def _write_plan(self, plan: list[PlannedStep]) -> None:
        """``plan.json`` (:mod:`mtcore.run.plan_file`), what the run page and ``mtcore report``
        read to show every step of the run, those not yet run included."""
        from mtcore.run.driver import step_needs
        from mtcore.run.plan_file import write_plan

        needs = {p.id: step_needs(self, p).describe() for p in plan}
        write_plan(self.workdir, self.recipe, plan, needs, self.label)

    def _reuse(self, planned: PlannedStep, key: str) -> dict[str, Any] | None:
        """Early cutoff (:mod:`mtcore.run.cache`): the manifest of a complete step with content key
        ``key``, its files put in place as this step's output; None if there is none."""
        from mtcore.run.jobs import step_inputs

        source = self._index.find(key, planned.id)
        if source is None:
            return None
        final = step_dir(self.workdir, planned)
        updates = {
            "id": planned.id,
            "hash": planned.hash,
            "recipe": self.recipe.name,
            "config": config_dict(planned.spec.plugin.config),
            "inputs": step_inputs(self.workdir, self.recipe, self.planned, planned)[1],
        }
        manifest = adopt(source, final, updates)
        self._index.add(key, final)
        log.info(
            "step %s: cached (%s): its inputs have the same content as those of %s, which it "
            "reuses",
            planned.id,
            final.name,
            source.name,
        )
        return manifest

    def indexed(self, key: str, final: Path) -> None:
        self._index.add(key, final)
