"""Runs a plan: skips steps whose complete output exists, runs the others in a resume-safe
working directory and renames it into place with a manifest once the step has finished."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mtcore import __version__
from mtcore.cache import (
    MANIFEST,
    ContentIndex,
    adopt,
    content_key,
    is_complete,
    links_changed,
    read_manifest,
    write_manifest,
)
from mtcore.errors import MtcoreError, StepError
from mtcore.hashing import hash_tree, linked_files
from mtcore.plan import PlannedStep, make_plan, step_dir
from mtcore.plugin import Executor
from mtcore.recipe import Recipe, split_reference
from mtcore.registry import Registry
from mtcore.step import Artifact, StepContext, config_dict

__all__ = ["MANIFEST", "RunResult", "Runner", "StepResult", "is_complete", "read_manifest"]
log = logging.getLogger("mtcore")


@dataclass
class StepResult:
    planned: PlannedStep
    status: str  # "ran" or "cached" (also when reused by content: mtcore.cache)
    manifest: dict[str, Any]
    path: Path


@dataclass
class RunResult:
    workdir: Path
    results: list[StepResult] = field(default_factory=list)
    log_file: Path | None = None

    def manifest(self, step_id: str) -> dict[str, Any]:
        for result in self.results:
            if result.planned.id == step_id:
                return result.manifest
        raise KeyError(step_id)

    def path(self, step_id: str) -> Path:
        for result in self.results:
            if result.planned.id == step_id:
                return result.path
        raise KeyError(step_id)


@contextmanager
def workdir_lock(workdir: Path) -> Iterator[None]:
    """One run a workdir. The lock is the kernel's (``flock``), so a killed run holds none; the
    file keeps the holder's pid to name it, or, left by a killed run, to say whose lock a new run
    takes over."""
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / ".lock", "a+") as handle:
        handle.seek(0)
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


def make_executor(recipe: Recipe, registry: Registry) -> Executor:
    spec = recipe.head.executor
    cls = registry.load("executors", spec.name)
    executor = cls.from_dict(spec.settings())
    assert isinstance(executor, Executor)
    return executor


def run_plugin(plugin: Any, ctx: StepContext, on: str = "") -> None:
    """``plugin.run(ctx)``, an unexpected exception turned into a StepError naming the step,
    then the step's scratch directory removed."""
    try:
        plugin.run(ctx)
    except MtcoreError:
        raise
    except Exception as exc:
        raise StepError(
            f"step {ctx.step_id!r} ({ctx.kind}) failed{on}: {type(exc).__name__}: {exc}"
        ) from exc
    shutil.rmtree(ctx.work / ".scratch", ignore_errors=True)


class Runner:
    """Runs one recipe in one workdir. ``hooks`` is a pluggy manager (lifecycle events)."""

    def __init__(
        self,
        recipe: Recipe,
        registry: Registry,
        workdir: Path,
        hooks: Any = None,
        show_progress: bool = True,
        label: str | None = None,
    ) -> None:
        """``label`` names this run's report files (``report.<label>.md``) where several
        variants share one workdir (``mtcore compare``, ``--ablate``)."""
        self.recipe = recipe
        self.registry = registry
        self.workdir = workdir
        self.hooks = hooks
        self.show_progress = show_progress
        self.label = label

    def status(self, until: str | None = None) -> list[tuple[PlannedStep, bool]]:
        plan = make_plan(self.recipe, self.registry, until)
        return [(p, is_complete(step_dir(self.workdir, p))) for p in plan]

    def run(self, until: str | None = None) -> RunResult:
        plan = make_plan(self.recipe, self.registry, until)
        self._planned = {p.id: p for p in plan}
        self._index = ContentIndex(self.workdir / "steps")
        with workdir_lock(self.workdir), run_log(self.workdir) as log_file:
            self._write_resolved()
            result = RunResult(self.workdir, log_file=log_file)
            executor: Executor | None = None
            self.current: str | None = None
            try:
                for planned in plan:
                    final = step_dir(self.workdir, planned)
                    complete = is_complete(final)
                    if complete and not links_changed(planned.id, final):
                        log.info("step %s: cached (%s)", planned.id, final.name)
                        result.results.append(
                            StepResult(planned, "cached", read_manifest(final), final)
                        )
                        continue
                    key = content_key(planned.identity, self._input_manifests(planned))
                    reused = None if complete else self._reuse(planned, key)
                    if reused is not None:
                        result.results.append(StepResult(planned, "cached", reused, final))
                        continue
                    if executor is None:
                        executor = make_executor(self.recipe, self.registry)
                    self.current = planned.id
                    manifest = self._run_step(planned, executor, key)
                    self._index.add(key, final)
                    self.current = None
                    result.results.append(StepResult(planned, "ran", manifest, final))
            except KeyboardInterrupt:  # Ctrl-C, or SIGTERM through the CLI: stop now
                if executor is not None:
                    executor.abort()
                    executor = None
                raise
            finally:
                if executor is not None:
                    executor.close()
            from mtcore.report import write_report

            write_report(self.recipe, result, self.label)
            return result

    def _write_resolved(self) -> None:
        resolved = {k: v for k, v in self.recipe.resolved.items() if k != "profiles"}
        resolved["profile"] = self.recipe.profile
        if self.recipe.ablated:
            resolved["ablated"] = list(self.recipe.ablated)
        text = yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True)
        name = self.recipe.name if self.label is None else self.label
        (self.workdir / f"{name}.resolved.yaml").write_text(text, encoding="utf-8")

    def _inputs(self, planned: PlannedStep) -> tuple[dict[str, Artifact], dict[str, Any]]:
        artifacts: dict[str, Artifact] = {}
        described: dict[str, Any] = {}
        steps = self.recipe.steps
        for role, ref in planned.spec.inputs.items():
            target, output = split_reference(ref)
            dep = self._planned[target]
            output = output or steps[target].plugin.outputs[0]
            artifacts[role] = Artifact.open(step_dir(self.workdir, dep) / output)
            described[role] = {"step": target, "hash": dep.hash, "output": output}
        return artifacts, described

    def _input_manifests(self, planned: PlannedStep) -> dict[str, dict[str, Any]]:
        return {
            role: read_manifest(step_dir(self.workdir, self._planned[split_reference(ref)[0]]))
            for role, ref in planned.spec.inputs.items()
        }

    def _reuse(self, planned: PlannedStep, key: str) -> dict[str, Any] | None:
        """Early cutoff (:mod:`mtcore.cache`): the manifest of a complete step with content key
        ``key``, its files put in place as this step's output; None if there is none."""
        source = self._index.find(key, planned.id)
        if source is None:
            return None
        final = step_dir(self.workdir, planned)
        updates = {
            "id": planned.id,
            "hash": planned.hash,
            "recipe": self.recipe.name,
            "config": config_dict(planned.spec.plugin.config),
            "inputs": self._inputs(planned)[1],
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

    def _run_step(self, planned: PlannedStep, executor: Executor, key: str) -> dict[str, Any]:
        final = step_dir(self.workdir, planned)
        work = self.workdir / "steps" / ".partial" / planned.dirname
        resumed = work.exists()
        work.mkdir(parents=True, exist_ok=True)
        inputs, described = self._inputs(planned)
        ctx = StepContext(
            step_id=planned.id,
            kind=planned.spec.kind,
            step_hash=planned.hash,
            work=work,
            inputs=inputs,
            executor=executor,
            registry=self.registry,
            log=logging.getLogger(f"mtcore.step.{planned.id}"),
            show_progress=self.show_progress,
        )
        log.info(
            "step %s (%s): %s%s",
            planned.id,
            planned.spec.kind,
            "resuming in " if resumed else "running in ",
            work,
        )
        if self.hooks is not None:
            self.hooks.hook.mtcore_step_started(
                step_id=planned.id, kind=planned.spec.kind, step_hash=planned.hash
            )
        started = time.time()
        run_plugin(planned.spec.plugin, ctx)
        seconds = time.time() - started
        manifest = {
            "id": planned.id,
            "kind": planned.spec.kind,
            "hash": planned.hash,
            "recipe": self.recipe.name,
            "mtcore": __version__,
            "config": config_dict(planned.spec.plugin.config),
            "inputs": described,
            "counts": ctx.stats.as_dict(),
            "metrics": ctx.metrics,
            "outputs": hash_tree(work, skip=(MANIFEST,)),
            "linked": linked_files(work),
            "seconds": round(seconds, 3),
            "resumed": resumed,
            "content_key": key,
        }
        write_manifest(work, manifest)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():  # an incomplete leftover without manifest
            shutil.rmtree(final)
        os.rename(work, final)
        log.info("step %s: done in %.1fs", planned.id, seconds)
        if self.hooks is not None:
            self.hooks.hook.mtcore_step_finished(
                step_id=planned.id, kind=planned.spec.kind, manifest=manifest
            )
        return manifest
