"""One step's execution, the same in every place it runs: in the driver's process (the local
scheduler), in a Ray actor or in a Slurm job.

A step runs in ``steps/.partial/<id>-<hash>/`` and is renamed into place with its manifest once
it has finished, by whoever ran it: a driver that has died meanwhile finds it complete. Beside
the partial directory, ``<id>-<hash>.job/`` holds what a process elsewhere needs to run it and
what the driver needs to find it again:

- ``spec.json``: the resolved recipe, the step and its plan hash (the job re-plans the recipe
  and refuses to run if the hash differs);
- ``job.json``: the scheduler and the job's id there (a Ray actor's name, a Slurm job id),
  written by the driver when it submits;
- ``state.json``: written by the job (``running``, ``done`` or ``failed`` with the error; a job
  its scheduler stopped to run again later, ``preempted``), with ``requeues``: how many times
  the job was stopped and queued again (a Slurm job signalled before its time limit);
- ``lock``: held (``flock``) while the step runs, so that a second copy waits instead of
  working beside the first.

``python -m mtcore.run.jobs DIR`` runs the job of ``DIR`` (what the Ray and Slurm schedulers call).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtcore import __version__
from mtcore.contracts.errors import MtcoreError, StepError
from mtcore.contracts.kinds import Executor
from mtcore.contracts.registry import Registry
from mtcore.contracts.step import Artifact, StepContext, config_dict
from mtcore.exec.files import replace_file
from mtcore.recipe import paths
from mtcore.recipe.hashing import hash_tree, linked_files
from mtcore.recipe.load import Recipe, build_recipe, split_reference
from mtcore.recipe.plan import PlannedStep, make_plan, step_dir
from mtcore.run.cache import (
    MANIFEST,
    content_key,
    file_stats,
    is_complete,
    links_changed,
    open_lock,
    read_manifest,
    write_manifest,
)

log = logging.getLogger("mtcore")
# what a job elsewhere takes from the driver's environment (the rest is the node's own)
PASSED_ENV = (
    "MTCORE_MIRROR",
    "MTCORE_MIRROR_REPLICAS",
    "MTCORE_LOCK_FILE",
    "MTCORE_WARM_START",
    "MTCORE_DOWNLOADS",
    "MTCORE_TENSORBOARD",
    "MTCORE_INDEX_DIR",
    "OMP_WAIT_POLICY",
)


def partial_dir(workdir: Path, planned: PlannedStep) -> Path:
    return paths.work_dir(workdir, planned.dirname)


def job_dir(workdir: Path, planned: PlannedStep) -> Path:
    return paths.job_dir(workdir, planned.dirname)


def step_log(workdir: Path, planned: PlannedStep) -> Path:
    return paths.log_file(workdir, planned.dirname)


def step_inputs(
    workdir: Path, recipe: Recipe, planned: dict[str, PlannedStep], step: PlannedStep
) -> tuple[dict[str, Artifact], dict[str, Any]]:
    """The step's input artifacts by role, and how the manifest describes them."""
    artifacts: dict[str, Artifact] = {}
    described: dict[str, Any] = {}
    for role, ref in step.spec.inputs.items():
        target, output = split_reference(ref)
        dep = planned[target]
        output = output or recipe.steps[target].plugin.outputs[0]
        artifacts[role] = Artifact.open(step_dir(workdir, dep) / output)
        described[role] = {"step": target, "hash": dep.hash, "output": output}
    return artifacts, described


def input_key(workdir: Path, planned: dict[str, PlannedStep], step: PlannedStep) -> str:
    """The step's content key (:mod:`mtcore.run.cache`), from its inputs' manifests."""
    manifests = {
        role: read_manifest(step_dir(workdir, planned[split_reference(ref)[0]]))
        for role, ref in step.spec.inputs.items()
    }
    return content_key(step.identity, manifests)


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


@dataclass
class StepRun:
    """One step of a run, ready to execute wherever it is placed."""

    workdir: Path
    recipe: Recipe
    planned: PlannedStep
    inputs: dict[str, Artifact]
    described: dict[str, Any]
    key: str
    ranks: int = 1  # the width the scheduler gave it (StepContext.ranks)
    nodes: int = 1
    requeues: int = 0  # times its job was stopped and queued again before this attempt


@contextmanager
def step_logging(path: Path, step_id: str) -> Iterator[logging.Logger]:
    """The step's logger (``mtcore.contracts.step.<id>``), also writing to the step's own log
    file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"mtcore.step.{step_id}")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        handler.close()


@contextmanager
def step_lock(folder: Path) -> Iterator[None]:
    """Held while the step runs: a second copy (another driver's, a job started twice) waits
    here, then finds the step complete."""
    folder.mkdir(parents=True, exist_ok=True)
    with open_lock(folder / "lock") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def execute(
    run: StepRun,
    executor: Executor,
    registry: Registry,
    hooks: Any = None,
    show_progress: bool = False,
    progress: Callable[[str, int | None, str], Any] | None = None,
) -> dict[str, Any]:
    """Runs the step in its partial directory, writes its manifest and renames it into place;
    returns the manifest. A step found complete (a copy that ran elsewhere finished first) is
    not run again: its manifest is returned."""
    planned, workdir = run.planned, run.workdir
    final = step_dir(workdir, planned)
    with step_lock(job_dir(workdir, planned)):
        if is_complete(final) and not links_changed(planned.id, final):
            return read_manifest(final)
        return _execute(run, executor, registry, hooks, show_progress, progress)


def _execute(
    run: StepRun,
    executor: Executor,
    registry: Registry,
    hooks: Any,
    show_progress: bool,
    progress: Callable[[str, int | None, str], Any] | None,
) -> dict[str, Any]:
    planned, workdir = run.planned, run.workdir
    final = step_dir(workdir, planned)
    work = partial_dir(workdir, planned)
    resumed = work.exists()
    work.mkdir(parents=True, exist_ok=True)
    with step_logging(step_log(workdir, planned), planned.id) as step_logger:
        ctx = StepContext(
            step_id=planned.id,
            kind=planned.spec.kind,
            step_hash=planned.hash,
            work=work,
            inputs=run.inputs,
            executor=executor,
            registry=registry,
            log=step_logger,
            show_progress=show_progress,
            progress_sink=progress,
            ranks=run.ranks,
            nodes=run.nodes,
        )
        log.info(
            "step %s (%s): %s%s",
            planned.id,
            planned.spec.kind,
            "resuming in " if resumed else "running in ",
            work,
        )
        step_logger.info("%s on %s (pid %d)", "resumed" if resumed else "started",
                         socket.gethostname(), os.getpid())  # fmt: skip
        if hooks is not None:
            hooks.hook.mtcore_step_started(
                step_id=planned.id, kind=planned.spec.kind, step_hash=planned.hash
            )
        started = time.time()
        run_plugin(planned.spec.plugin, ctx)
        seconds = time.time() - started
        manifest = {
            "id": planned.id,
            "kind": planned.spec.kind,
            "hash": planned.hash,
            "recipe": run.recipe.name,
            "mtcore": __version__,
            "config": config_dict(planned.spec.plugin.config),
            "inputs": run.described,
            "counts": ctx.stats.as_dict(),
            "metrics": ctx.metrics,
            "outputs": (outputs := hash_tree(work, skip=(MANIFEST,))),
            "files": file_stats(work, outputs),
            "linked": linked_files(work),
            "seconds": round(seconds, 3),
            "resumed": resumed,
            "content_key": run.key,
        }
        if run.requeues:
            manifest["requeues"] = run.requeues
        write_manifest(work, manifest)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():  # an incomplete leftover without manifest
            shutil.rmtree(final)
        os.rename(work, final)
        log.info("step %s: done in %.1fs", planned.id, seconds)
        step_logger.info("done in %.1fs", seconds)
    if hooks is not None:
        hooks.hook.mtcore_step_finished(
            step_id=planned.id, kind=planned.spec.kind, manifest=manifest
        )
    return manifest


# --- jobs that run elsewhere ---------------------------------------------------------------


def write_spec(
    workdir: Path, recipe: Recipe, planned: PlannedStep, ranks: int = 1, nodes: int = 1
) -> Path:
    """``spec.json`` for running ``planned`` in another process, at the width it was given;
    returns the job directory."""
    document = {k: v for k, v in recipe.resolved.items() if k != "profiles"}
    document["default_profile"] = None
    folder = job_dir(workdir, planned)
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "workdir": str(workdir.resolve()),
        "cwd": os.getcwd(),
        "document": document,
        "source": str(recipe.path or recipe.name),
        "path": str(recipe.path.resolve()) if recipe.path else None,
        "step": planned.id,
        "hash": planned.hash,
        "env": {k: os.environ[k] for k in PASSED_ENV if k in os.environ},
        "python": sys.executable,
        "ranks": ranks,
        "nodes": nodes,
    }
    write_json(folder / "spec.json", spec)
    return folder


def write_json(path: Path, value: dict[str, Any]) -> None:
    """Written whole or not at all (a reader on another node never sees half a file)."""
    replace_file(path, json.dumps(value, indent=1, ensure_ascii=False) + "\n")


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def job_state(folder: Path) -> dict[str, Any]:
    """What the job last wrote of itself (``{"state": "unknown"}`` before it started)."""
    return read_json(folder / "state.json") or {"state": "unknown"}


def run_job(folder: str | Path) -> str:
    """Runs the job described by ``folder/spec.json`` in this process; returns ``"done"``.
    Writes ``state.json`` as it goes; a failure is recorded there and raised."""
    from mtcore.contracts.registry import load_registry
    from mtcore.exec.process import safe_children, safe_torch_loads

    # a Ray actor or a Slurm task calls this without the CLI's start: the same safe start
    safe_torch_loads()
    safe_children()
    folder = Path(folder)
    spec = read_json(folder / "spec.json")
    if spec is None:
        raise StepError(f"job {folder}: no readable spec.json")
    requeues = requeue_count(folder)
    write_json(folder / "state.json", _state("running", requeues=requeues))
    try:
        os.chdir(spec["cwd"])
        for key, value in spec["env"].items():
            os.environ.setdefault(key, value)
        registry = load_registry()
        path = Path(spec["path"]) if spec["path"] else None
        recipe = build_recipe(spec["document"], registry, None, [], spec["source"], path)
        plan = make_plan(recipe, registry, until=spec["step"])
        by_id = {p.id: p for p in plan}
        planned = by_id[spec["step"]]
        if planned.hash != spec["hash"]:
            raise StepError(
                f"job for step {planned.id!r}: the recipe re-planned here gives hash "
                f"{planned.hash}, the driver's was {spec['hash']} (a plugin version or an input "
                "file differs on this node)"
            )
        workdir = Path(spec["workdir"])
        inputs, described = step_inputs(workdir, recipe, by_id, planned)
        run = StepRun(
            workdir,
            recipe,
            planned,
            inputs,
            described,
            input_key(workdir, by_id, planned),
            ranks=int(spec.get("ranks", 1)),
            nodes=int(spec.get("nodes", 1)),
            requeues=requeues,
        )
        executor = make_executor(recipe, registry)
        try:
            execute(run, executor, registry)
        finally:
            executor.close()
    except BaseException as exc:
        if job_state(folder).get("state") != "preempted":  # stopped to be requeued: not failed
            error = f"{type(exc).__name__}: {exc}"
            write_json(folder / "state.json", _state("failed", error, requeues))
        raise
    write_json(folder / "state.json", _state("done", requeues=requeues))
    return "done"


def run_task(
    folder: str | Path,
    rank: int,
    world: int,
    local_rank: int,
    token: str,
    log: Path,
    leader_address: str = "",
) -> int:
    """One task of a job its scheduler started as ``world`` tasks (a Slurm job of ``nodes x
    tasks``), each a rank of the step (:mod:`mtcore.exec.ranks`): task 0 runs the job
    (:func:`run_job`), every other one follows it and runs its rank of the command the step
    publishes, its output appended to ``log`` (somewhere kept: the job folder goes with the
    finished step). ``leader_address``: task 0's address as the others reach it, where the
    scheduler knows it better than the host's name does (a Ray node's IP). Returns the exit
    status."""
    from mtcore.exec.ranks import ADDR, Task, follow, task_env

    folder = Path(folder)
    os.environ.update(task_env(rank, world, local_rank, token, folder))
    if leader_address:
        os.environ[ADDR] = leader_address
    if rank == 0:
        run_job(folder)
        return 0
    return follow(Task(rank, world, local_rank, token, folder), log)


def requeue_count(folder: Path) -> int:
    """How many times the job of ``folder`` was stopped and queued again."""
    return int(job_state(folder).get("requeues", 0))


def record_requeue(folder: Path, reason: str) -> int:
    """Writes that the job stops now to run again later (``preempted``: a driver waits for it
    instead of failing the step); returns its requeues, this one counted."""
    requeues = requeue_count(folder) + 1
    state = _state("preempted", requeues=requeues)
    state["reason"] = reason
    write_json(folder / "state.json", state)
    return requeues


def _state(state: str, error: str = "", requeues: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {
        "state": state,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
    }
    if error:
        out["error"] = error
    if requeues:
        out["requeues"] = requeues
    return out


def make_executor(recipe: Recipe, registry: Registry) -> Executor:
    spec = recipe.head.executor
    cls = registry.load("executors", spec.name)
    executor = cls.from_dict(spec.settings())
    assert isinstance(executor, Executor)
    return executor


def job_command(folder: Path | str) -> list[str]:
    """The command that runs the job prepared in ``folder`` in a process of its own (a
    scheduler that starts processes, such as ``local`` for a GPU step, runs this)."""
    return [sys.executable, "-m", __name__, str(folder)]


def main(argv: list[str]) -> int:
    from mtcore.exec.process import safe_children, safe_torch_loads, thread_defaults

    thread_defaults()
    safe_torch_loads()
    safe_children()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        run_job(argv[0])
    except MtcoreError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
