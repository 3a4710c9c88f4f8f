"""The runner's schedule loop: which steps start when, on a scheduler plugin, and what their
end means for the rest of the graph (:mod:`mtcore.run.runner` has the contract)."""

from __future__ import annotations

import functools
import heapq
import logging
import os
import shutil
import socket
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mtcore.contracts.errors import RecipeError, StepError
from mtcore.contracts.kinds import Executor
from mtcore.contracts.resources import Resources, step_resources
from mtcore.contracts.scheduler import Ended, Job, Scheduler
from mtcore.recipe.plan import PlannedStep, step_dir
from mtcore.run.jobs import (
    StepRun,
    execute,
    input_key,
    job_dir,
    job_state,
    make_executor,
    partial_dir,
    read_json,
    step_inputs,
    step_log,
    write_json,
    write_spec,
)
from mtcore.run.progress import DisplayFactory, Progress
from mtcore.run.results import RunResult, StepResult
from mtcore.run.scaling import Scaling
from mtcore.run.schedule import CostModel, fitted, remaining_paths
from mtcore.run.widths import choose_widths

if TYPE_CHECKING:
    from mtcore.contracts.registry import Registry
    from mtcore.recipe.load import Recipe

log = logging.getLogger("mtcore")


class Runner(Protocol):
    """What the driver reads and calls of its :class:`mtcore.run.runner.Runner` (a protocol, so
    that the runner may import the driver and not the other way round)."""

    recipe: Recipe
    registry: Registry
    workdir: Path
    hooks: Any
    show_progress: bool
    scheduler_name: str | None
    slots: dict[str, int]
    keep_going: bool
    display: DisplayFactory | None
    running: list[str]

    def cached(self, planned: PlannedStep, key: str | None) -> dict[str, Any] | None: ...

    def indexed(self, key: str, final: Path) -> None: ...


TICK = 1.0  # seconds between display refreshes while steps run


def make_scheduler(runner: Runner) -> Scheduler:
    spec = runner.recipe.head.scheduler
    name = runner.scheduler_name or spec.name
    settings = spec.settings() if name == spec.name else {}
    cls = runner.registry.load("schedulers", name)
    scheduler = cls.from_dict(settings)
    assert isinstance(scheduler, Scheduler)
    return scheduler


def step_needs(runner: Runner, planned: PlannedStep) -> Resources:
    """The step's resources (:func:`step_resources`). A width (ranks, a GPU range) given to a
    step that cannot run at any width is refused: it would hold what it never uses."""
    table = runner.recipe.head.resources
    declared = planned.spec.plugin.resources()
    need = step_resources(declared, planned.id, planned.spec.kind, table)
    widened = need.ranks != declared.ranks or need.moldable or need.nodes > 1
    if widened and not widens(planned):
        what = "a GPU range" if need.moldable else f"{need.ranks} ranks on {need.nodes} node(s)"
        hint = (
            "state its batch as batch_tokens (tokens per update) so that it runs at any width"
            if declared.distributed
            else "only a training or a step that widens by shards runs as several ranks"
        )
        raise RecipeError(
            [f"resources.{planned.id}: gives {what}, but step {planned.id!r} runs at the width "
             f"of its own settings ({declared.ranks}); {hint}"],
            "resources",
        )  # fmt: skip
    return need


def widens(planned: PlannedStep) -> bool:
    """Whether the step runs at any width: a training that shares the batches of an update
    (``work()``'s ``batches``), or a step of independent shards (``Step.widens_by_shards``)."""
    plugin = planned.spec.plugin
    return type(plugin).widens_by_shards or "batches" in plugin.work()


def with_tasks(runner: Runner, planned: PlannedStep, need: Resources, workers: int) -> Resources:
    """A step that spreads its work over the executor (``Step.parallel``) holds its threads
    for each of the executor's ``workers``, and may be given fewer of them; a recipe that sets
    its ``cpus`` fixes them."""
    table = runner.recipe.head.resources
    fixed = any(
        spec is not None and spec.cpus is not None
        for spec in (table.get(k) for k in ("default", planned.spec.kind, planned.id))
    )
    wide = need.ranks > 1 or need.moldable  # its ranks, not the executor, spread its work
    if fixed or workers < 2 or wide or not type(planned.spec.plugin).parallel:
        return need
    return replace(need, cpus=need.cpus * workers, cpus_min=need.cpus)


def capped(slots: Resources, caps: dict[str, int]) -> Resources:
    return Resources(
        cpus=min(slots.cpus, caps.get("cpu", slots.cpus)),
        gpus=min(slots.gpus, caps.get("gpu", slots.gpus)),
        memory_gb=slots.memory_gb,
    )


def check_fit(needs: dict[str, Resources], place: Resources, slots: Resources, where: str) -> None:
    """Every step fits a place (its CPUs may exceed it: it then runs alone with its own
    threads); refuses the others, all at once."""
    problems = []
    for step_id, need in needs.items():
        per_node = -(-need.gpus // need.nodes)  # a step of several nodes asks this of each
        if per_node > min(place.gpus, slots.gpus) or need.gpus > slots.gpus:
            most = min(place.gpus, slots.gpus)
            problems.append(
                f"resources.{step_id}: asks {need.gpus} GPUs"
                + (f" on {need.nodes} nodes" if need.nodes > 1 else "")
                + f"; {where} gives a step at most {most} a node and {slots.gpus} in all (set "
                f"resources: {{{step_id}: {{gpus: N}}}} or nodes: N, or run where there are more)"
            )
        if need.memory_gb and place.memory_gb and need.memory_gb > place.memory_gb:
            problems.append(
                f"resources.{step_id}: asks {need.memory_gb:g} GiB of memory; {where} gives a "
                f"step at most {place.memory_gb:.0f}"
            )
    if problems:
        raise RecipeError(problems, f"scheduler ({where})")


class Driver:
    """Runs ``plan`` for ``runner``, appending to ``result``."""

    def __init__(self, runner: Runner, plan: list[PlannedStep], result: RunResult) -> None:
        self.runner = runner
        self.plan = plan
        self.result = result
        self.by_id = {p.id: p for p in plan}
        self.order = {p.id: i for i, p in enumerate(plan)}
        self.children: dict[str, list[str]] = {p.id: [] for p in plan}
        for planned in plan:
            for dep in planned.deps:
                self.children[dep].append(planned.id)
        self._executor: Executor | None = None
        self._executor_lock = threading.Lock()
        self.display: Progress | None = None

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        runner = self.runner
        scheduler = make_scheduler(runner)
        scheduler.open(runner.workdir)
        try:
            place = scheduler.capacity()
            self.slots = capped(scheduler.slots(), runner.slots)
            # a step asking more CPU threads than a place has runs with all of one place's
            self.most = Resources(min(place.cpus, self.slots.cpus), self.slots.gpus)
            self.needs = {p.id: step_needs(runner, p) for p in self.plan}
            executor = self._shared_executor()
            if not scheduler.remote and executor.narrowed(1) is not executor:
                # its workers run on these CPUs: a step holds those its tasks use
                self.needs = {
                    p.id: with_tasks(runner, p, self.needs[p.id], executor.workers)
                    for p in self.plan
                }
            check_fit(self.needs, place, self.slots, f"{scheduler.name} scheduler")
            costs = CostModel.from_workdir(runner.workdir, self.plan)
            if self.slots.gpus and any(n.moldable for n in self.needs.values()):
                # trainings given a GPU range run at the widths CPA chooses for these GPUs
                at_1 = {
                    p.id: costs.seconds(p, n.at_width(1) if n.moldable else n)
                    for p in self.plan
                    for n in (self.needs[p.id],)
                }
                # widths up to all the GPUs, across whole nodes of the largest node's GPUs
                scaling = Scaling(gpus_per_node=max(1, min(place.gpus, self.slots.gpus)))
                gpus = Resources(self.slots.cpus, self.slots.gpus)
                self.needs = choose_widths(self.plan, at_1, self.needs, gpus, scaling)
            self.cost = {p.id: costs.seconds(p, self.needs[p.id]) for p in self.plan}
            self.priority = remaining_paths(self.plan, self.cost)
            if runner.display is not None:
                self.display = runner.display(
                    len(self.plan), self._eta, tty=sys.stderr.isatty() and runner.show_progress
                )
            self._loop(scheduler)
        except KeyboardInterrupt:
            scheduler.stop()
            self._abort()
            raise
        finally:
            if self._executor is not None:  # before the threads whose pool workers it has
                self._executor.close()
            scheduler.close()
            if self.display is not None:
                self.display.close()

    def _loop(self, scheduler: Scheduler) -> None:
        self.waiting = {p.id: set(p.deps) for p in self.plan}
        self.ready: list[tuple[float, int, str]] = []
        self.running: dict[str, tuple[Resources, float]] = {}
        self.failed: dict[str, BaseException] = {}
        self.skipped: set[str] = set()
        self.done: set[str] = set()
        self.keys: dict[str, str] = {}
        free = self.slots
        for planned in self.plan:
            if not planned.deps:
                self._push(planned.id)
        while True:
            if not (self.failed and not self.runner.keep_going):
                free = self._start_ready(scheduler, free)
            if not self.running:
                break
            for ended in scheduler.wait(TICK):
                if isinstance(ended.error, KeyboardInterrupt):  # a signal stopped its tool:
                    raise ended.error  # stop the run, the step still named as running
                need, _ = self.running.pop(ended.step_id)
                free = free.plus(need)
                self.runner.running = list(self.running)
                self._ended(ended)
            if self.display is not None:
                self.display.refresh()
        self._raise_failures()

    def _push(self, step_id: str) -> None:
        heapq.heappush(self.ready, (-self.priority[step_id], self.order[step_id], step_id))

    def _start_ready(self, scheduler: Scheduler, free: Resources) -> Resources:
        held = []
        while self.ready:
            item = heapq.heappop(self.ready)
            planned = self.by_id[item[2]]
            if planned.id in self.skipped:
                continue
            if planned.id not in self.keys:  # a held step is looked at again each tick
                self.keys[planned.id] = input_key(self.runner.workdir, self.by_id, planned)
            key = self.keys[planned.id]
            manifest = self.runner.cached(planned, key)  # again: a step beside may match it
            if manifest is not None:
                self._finished(planned, "cached", manifest)
                continue
            if self._at_cap(len(self.running)):
                held.append(item)
                continue
            need = fitted(self.needs[planned.id], self.most)
            if need.narrowable:  # as many tasks as leave a CPU to each ready step behind it
                need = need.with_cpus(free.cpus - self._behind(free.cpus - need.cpus_min))
            if not need.fits(free):
                held.append(item)
                continue
            self._start(scheduler, planned, need, key)
            free = free.minus(need)
        for item in held:
            heapq.heappush(self.ready, item)
        return free

    def _at_cap(self, running: int) -> bool:
        """``running`` steps are as many as ``--slots steps=K`` lets run at once."""
        cap = self.runner.slots.get("steps")
        return cap is not None and running >= cap

    def _behind(self, room: int) -> int:
        """The CPUs that the ready steps behind the one starting, in their order, would start
        with beside it, in ``room`` CPUs (each of them at its fewest)."""
        taken = 0
        if self._at_cap(len(self.running) + 1):
            return taken  # no step starts beside it
        for _, _, step_id in sorted(self.ready):
            if step_id in self.skipped:
                continue
            need = fitted(self.needs[step_id], self.most)
            least = need.cpus_min if need.narrowable else need.cpus
            if taken + least <= room:
                taken += least
        return taken

    def _start(self, scheduler: Scheduler, planned: PlannedStep, need: Resources, key: str) -> None:
        workdir = self.runner.workdir
        folder = job_dir(workdir, planned)
        folder.mkdir(parents=True, exist_ok=True)
        job = Job(planned.id, planned.spec.kind, need, folder, step_log(workdir, planned))
        if scheduler.remote or need.gpus:
            write_spec(workdir, self.runner.recipe, planned, need.ranks, need.nodes)
        if not scheduler.remote:
            job.call = functools.partial(self._execute_here, planned, key, need)
        record = read_json(folder / "job.json") if scheduler.remote else None
        if (
            record is not None
            and record.get("scheduler") == scheduler.name
            and scheduler.attach(job, record)
        ):
            job_id = str(record.get("id"))
            log.info("step %s: re-attached to %s", planned.id, scheduler.describe(job_id))
        else:
            if scheduler.remote:
                (folder / "state.json").unlink(missing_ok=True)
            job_id = scheduler.submit(job)
            if scheduler.remote:
                write_json(
                    folder / "job.json",
                    {
                        "scheduler": scheduler.name,
                        "id": job_id,
                        "submitted": time.time(),
                        "driver": f"{socket.gethostname()}:{os.getpid()}",
                        "resources": need.describe(),
                    },
                )
            log.info("step %s: started (%s, %s)", planned.id, scheduler.describe(job_id),
                     need.describe())  # fmt: skip
            if (scheduler.remote or need.gpus) and self.runner.hooks is not None:  # a job: no hooks
                self.runner.hooks.hook.mtcore_step_started(
                    step_id=planned.id, kind=planned.spec.kind, step_hash=planned.hash
                )
        self.running[planned.id] = (need, time.monotonic())
        self.runner.running = list(self.running)
        if self.display is not None:
            work = partial_dir(workdir, planned)
            self.display.started(
                planned.id,
                planned.spec.kind,
                scheduler.describe(job_id),
                lambda: planned.spec.plugin.live(work),
                folder=folder,
            )

    def _execute_here(self, planned: PlannedStep, key: str, need: Resources) -> dict[str, Any]:
        runner = self.runner
        inputs, described = step_inputs(runner.workdir, runner.recipe, self.by_id, planned)
        run = StepRun(
            runner.workdir, runner.recipe, planned, inputs, described, key, need.ranks, need.nodes
        )
        display = self.display
        live = display is not None and display.tty
        executor = self._shared_executor()
        if need.cpus_min:  # its tasks at once: as many as it holds CPUs for
            executor = executor.narrowed(need.cpus // need.cpus_min)
        return execute(
            run,
            executor,
            runner.registry,
            runner.hooks,
            show_progress=live,
            progress=display.sink if live and display is not None else None,
        )

    def _shared_executor(self) -> Executor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = make_executor(self.runner.recipe, self.runner.registry)
            return self._executor

    def _ended(self, ended: Ended) -> None:
        planned = self.by_id[ended.step_id]
        final = step_dir(self.runner.workdir, planned)
        error = ended.error
        if error is None and not (final / "manifest.json").exists():
            state = job_state(job_dir(self.runner.workdir, planned))
            error = StepError(
                f"step {planned.id!r}: its job ended without finishing it (last state "
                f"{state.get('state')!r}{': ' + state['error'] if state.get('error') else ''}); "
                "rerun to resume it"
            )
        if error is not None:
            self.failed[planned.id] = error
            log.error("step %s failed: %s", planned.id, error)
            if self.display is not None:
                self.display.finished(planned.id, "failed")
            if self.runner.keep_going:
                self._skip_descendants(planned.id)
            return
        manifest = ended.manifest or _read_manifest(final)
        if isinstance(manifest.get("content_key"), str):
            self.runner.indexed(manifest["content_key"], final)
        if ended.manifest is None and self.runner.hooks is not None:  # ran as a job elsewhere
            self.runner.hooks.hook.mtcore_step_finished(
                step_id=planned.id, kind=planned.spec.kind, manifest=manifest
            )
        self._finished(planned, "ran", manifest)

    def _finished(self, planned: PlannedStep, status: str, manifest: dict[str, Any]) -> None:
        final = step_dir(self.runner.workdir, planned)
        # the job's record, spec and lock are of no use once the step is complete
        shutil.rmtree(job_dir(self.runner.workdir, planned), ignore_errors=True)
        self.result.results.append(StepResult(planned, status, manifest, final))
        self.done.add(planned.id)
        if self.display is not None:
            seconds = manifest.get("seconds")
            self.display.finished(
                planned.id, status, float(seconds) if isinstance(seconds, int | float) else None
            )
        for child in self.children[planned.id]:
            self.waiting[child].discard(planned.id)
            if not self.waiting[child]:
                self._push(child)

    def _skip_descendants(self, step_id: str) -> None:
        stack = list(self.children[step_id])
        while stack:
            child = stack.pop()
            if child not in self.skipped:
                self.skipped.add(child)
                stack.extend(self.children[child])

    def _raise_failures(self) -> None:
        if not self.failed:
            return
        first = next(iter(self.failed.values()))
        if len(self.failed) == 1 and not self.skipped:
            raise first
        lines = [f"{len(self.failed)} step(s) failed:"]
        lines += [
            f"  {step_id}: {str(error).splitlines()[0]}" for step_id, error in self.failed.items()
        ]
        if self.skipped:
            lines.append(
                f"{len(self.skipped)} step(s) not run because they need a failed one: "
                + ", ".join(sorted(self.skipped, key=self.order.__getitem__))
            )
        not_run = [p.id for p in self.plan if p.id not in self.done and p.id not in self.failed
                   and p.id not in self.skipped]  # fmt: skip
        if not_run and not self.runner.keep_going:
            lines.append(f"{len(not_run)} step(s) not started (--keep-going runs them)")
        raise StepError("\n".join(lines)) from first

    def _eta(self) -> float:
        """Seconds left: the longest remaining chain, or the remaining work spread over the
        CPU slots, whichever is more."""
        now = time.monotonic()
        left: dict[str, float] = {}
        for planned in reversed(self.plan):
            if planned.id in self.done or planned.id in self.skipped:
                left[planned.id] = 0.0
                continue
            own = self.cost[planned.id]
            if planned.id in self.running:
                own = max(0.0, own - (now - self.running[planned.id][1]))
            tail = max((left[c] for c in self.children[planned.id]), default=0.0)
            left[planned.id] = own + tail
        chain = max(left.values(), default=0.0)
        work = sum(
            self.cost[p.id] for p in self.plan if p.id not in self.done and p.id not in self.skipped
        )
        return max(chain, work / max(1, self.slots.cpus))

    def _abort(self) -> None:
        from mtcore.exec import launcher
        from mtcore.exec.process import kill_children

        kill_children()
        launcher.close_all()
        if self._executor is not None:
            self._executor.abort()
            self._executor = None


def _read_manifest(final: Any) -> dict[str, Any]:
    from mtcore.run.cache import read_manifest

    return read_manifest(final)
