"""Experiment tracking through the lifecycle hooks: a run of a recipe in a workdir is an MLflow
run, each step a nested run with its settings, counts, metrics and seconds, each training's
curves logged per update while it trains, each stage score with its signature.

``mtcore run --track`` logs to an MLflow database inside the workdir (``mlflow.db``, SQLite:
embedded, no server; MLflow 3 keeps its old ``./mlruns`` file store in maintenance mode and
refuses it by default), ``--track URI`` to any MLflow tracking URI (``http://host:5000`` for a
tracking server, ``sqlite:///path.db``); ``MLFLOW_TRACKING_URI`` is the default when set. An
experiment it creates on a local store keeps its artifacts in ``WORKDIR/mlartifacts`` (a server
chooses its own); what goes into the store, and under which names, is
:mod:`mtcore.report.mlflow_store`'s. At the run's end it says where it logged (:meth:`summary`).

Resume: the workdir's MLflow run and each step's nested run are found again by tags
(``mtcore.workdir``, ``mtcore.step_dir``), so a resumed ``mtcore run`` continues them. A curve
point is logged only past the last update already logged for that metric, so a training killed
and resumed from its last checkpoint (which replays the updates after it) continues one line,
without gaps or duplicated points. A step found complete in the cache is logged once, tagged
``mtcore.status=cached``, and not again when its nested run already exists."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtcore import __version__
from mtcore.contracts.errors import MtcoreError
from mtcore.contracts.hooks import hookimpl
from mtcore.recipe.paths import finished_dir, work_dir
from mtcore.report.mlflow_store import (
    RAW_TRAINING,
    artifact_location,
    flat_params,
    metric_key,
    owner_only_store,
    redact,
    signature_tag,
    tracking_uri,
)

if TYPE_CHECKING:
    from mtcore.contracts.registry import Registry
    from mtcore.recipe.load import Recipe
    from mtcore.recipe.plan import PlannedStep
    from mtcore.run.results import RunResult

log = logging.getLogger(__name__)
TRACKER = "mtcore.tracking"
"""The name the tracker is registered under in a run's hook manager."""
BATCH = 1000  # MLflow's most metrics per log_batch
POLL_ENV = "MTCORE_TRACKING_POLL"
"""Seconds between two reads of the running trainings' curves (default 15)."""


def _guarded(method: Callable[..., None]) -> Callable[..., None]:
    """A hook that logs: a failure to reach the store is a warning in the run log, never a
    failed step (its output is fine); what was not logged is logged by the next run."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception as exc:
            log.warning("tracking: %s failed (%s: %s); the run goes on", method.__name__,
                        type(exc).__name__, str(exc)[:300])  # fmt: skip

    return call


class MlflowTracker:
    """The tracker plugin: registered on a run's hook manager by ``mtcore run --track`` (on
    :func:`mtcore.report.hooks.make_plugin_manager`'s manager). Curves of running trainings are
    read from their working folders every ``poll_seconds`` (``$MTCORE_TRACKING_POLL``, else 15)
    by a thread of its own."""

    def __init__(
        self,
        uri: str | None = None,
        experiment: str | None = None,
        poll_seconds: float | None = None,
        registry: Registry | None = None,
    ) -> None:
        try:
            import mlflow  # noqa: F401
        except ImportError:
            raise MtcoreError(
                "tracking needs MLflow: pip install 'mlflow>=3' (or run without --track)"
            ) from None
        for name in ("mlflow", "alembic"):  # their INFO lines (creating tables) are not ours
            logging.getLogger(name).setLevel(logging.WARNING)
        self.uri = uri
        self.experiment = experiment
        if poll_seconds is None:
            poll_seconds = float(os.environ.get(POLL_ENV, "15"))
        self.poll_seconds = poll_seconds
        self.registry = registry
        self.lock = threading.RLock()
        self.client: Any = None
        self.parent: str | None = None
        self.children: dict[str, str] = {}  # step dir -> nested run id
        self.finished: set[str] = set()  # step dirs whose nested run is FINISHED
        self.last: dict[tuple[str, str], int] = {}  # (run id, key) -> last logged update
        self.plan: dict[str, PlannedStep] = {}
        self.workdir: Path | None = None
        self.running: dict[str, str] = {}  # step id -> kind, of steps running now
        self.opened: list[tuple[str, str, str]] = []  # (store, experiment, run id) per run
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    # --- hooks --------------------------------------------------------------------------------

    @hookimpl
    def mtcore_run_started(
        self, recipe: Recipe, workdir: Path, plan: list[PlannedStep], label: str | None
    ) -> None:
        uri = tracking_uri(workdir, self.uri)
        try:
            if uri.startswith(("http://", "https://")):
                _reachable(uri)  # MLflow's client would retry for minutes
            owner_only_store(uri)
            self._open(recipe, workdir, plan, label, uri)
        except MtcoreError:
            raise
        except Exception as exc:  # the store cannot be reached: say so before any step runs
            raise MtcoreError(
                f"tracking: MLflow at {redact(uri)} cannot be used ({type(exc).__name__}: "
                f"{redact(str(exc))[:300]}); start the server or run "
                "without --track"
            ) from None
        self._stop.clear()
        self._poller = threading.Thread(target=self._poll, name="mtcore-tracking", daemon=True)
        self._poller.start()

    def _open(
        self, recipe: Recipe, workdir: Path, plan: list[PlannedStep], label: str | None, uri: str
    ) -> None:
        from mlflow import MlflowClient

        with self.lock:
            self.workdir = workdir
            self.plan = {p.id: p for p in plan}
            self.client = MlflowClient(tracking_uri=uri)
            name = self.experiment or recipe.name
            found = self.client.get_experiment_by_name(name)
            if found is None:
                where_to = artifact_location(uri, workdir)
                experiment = self.client.create_experiment(name, artifact_location=where_to)
            else:
                experiment = found.experiment_id
            self.experiment_id = experiment
            where = str(workdir.resolve())
            tags = {
                "mtcore.workdir": where,
                "mtcore.recipe": recipe.name,
                "mtcore.profile": str(recipe.profile),
                "mtcore.label": label or "",
            }
            query = " and ".join(f"tags.`{k}` = '{_quote(v)}'" for k, v in tags.items())
            runs = self.client.search_runs([experiment], filter_string=query, max_results=1)
            if runs:
                parent = str(runs[0].info.run_id)
                self.client.update_run(parent, status="RUNNING")
            else:
                run_name = label or f"{recipe.name}-{recipe.profile}"
                created = self.client.create_run(experiment, tags=tags, run_name=run_name)
                parent = str(created.info.run_id)
                params = {
                    "recipe": recipe.name,
                    "profile": str(recipe.profile),
                    "mtcore": __version__,
                }
                if recipe.ablated:
                    params["ablated"] = ",".join(recipe.ablated)
                self._params(parent, params)
            self.parent = parent
            self.opened.append((redact(uri), name, parent))
            self._find_children()

    @hookimpl
    @_guarded
    def mtcore_step_started(self, step_id: str, kind: str, step_hash: str) -> None:
        planned = self.plan.get(step_id)
        if planned is None or self.parent is None:
            return
        with self.lock:
            run_id = self._child(planned, "running")
            self.client.update_run(run_id, status="RUNNING")
            self.running[step_id] = kind

    @hookimpl
    @_guarded
    def mtcore_step_finished(self, step_id: str, kind: str, manifest: dict[str, Any]) -> None:
        planned = self.plan.get(step_id)
        if planned is None or self.parent is None or self.workdir is None:
            return
        with self.lock:
            self.running.pop(step_id, None)
            run_id = self._child(planned, "ran")
            trained = self._log_curves(run_id, kind, finished_dir(self.workdir, planned.dirname))
            self._log_manifest(run_id, manifest, "ran", trained)
            self.client.set_terminated(run_id, status="FINISHED")
            self.finished.add(planned.dirname)

    @hookimpl
    @_guarded
    def mtcore_run_finished(self, recipe: Recipe, result: RunResult, label: str | None) -> None:
        if self.parent is None:
            return
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=60)
        with self.lock:
            done = set()
            for item in result.results:
                done.add(item.planned.id)
                if item.status != "cached" or item.planned.dirname in self.finished:
                    continue
                run_id = self._child(item.planned, "cached")
                trained = self._log_curves(run_id, item.planned.spec.kind, item.path)
                self._log_manifest(run_id, item.manifest, "cached", trained)
                self.client.set_terminated(run_id, status="FINISHED")
                self.finished.add(item.planned.dirname)
            for step_id, planned in self.plan.items():
                if step_id in done or planned.dirname not in self.children:
                    continue
                if planned.dirname not in self.finished:  # started here, never finished
                    self.client.set_tag(self.children[planned.dirname], "mtcore.status", "failed")
                    self.client.set_terminated(self.children[planned.dirname], status="FAILED")
            self._log_stages(result)
            complete = len(done) == len(self.plan)
            self.client.set_terminated(self.parent, status="FINISHED" if complete else "FAILED")

    # --- MLflow ---------------------------------------------------------------------------------

    def _find_children(self) -> None:
        query = f"tags.`mlflow.parentRunId` = '{self.parent}'"
        token = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id], filter_string=query, max_results=1000, page_token=token
            )
            for run in page:
                folder = run.data.tags.get("mtcore.step_dir")
                if folder:
                    self.children[folder] = run.info.run_id
                    if run.info.status == "FINISHED":
                        self.finished.add(folder)
            token = page.token
            if not token:
                break

    def _child(self, planned: PlannedStep, status: str) -> str:
        """The nested run of ``planned`` (found by its folder's name), created on first use
        with the step's settings as parameters."""
        found = self.children.get(planned.dirname)
        if found is not None:
            return found
        from mtcore.contracts.step import config_dict

        tags = {
            "mlflow.parentRunId": str(self.parent),
            "mtcore.step": planned.id,
            "mtcore.kind": planned.spec.kind,
            "mtcore.step_dir": planned.dirname,
            "mtcore.status": status,
        }
        stage = planned.spec.plugin.stage(planned.id)
        if stage is not None:
            tags["mtcore.stage"], tags["mtcore.direction"] = stage
        run = self.client.create_run(self.experiment_id, tags=tags, run_name=planned.id)
        run_id = str(run.info.run_id)
        self._params(run_id, flat_params(config_dict(planned.spec.plugin.config)))
        self.children[planned.dirname] = run_id
        return run_id

    def _params(self, run_id: str, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[start : start + 100])

    def _metrics(
        self,
        run_id: str,
        points: list[tuple[str, float, int]],
        tags: dict[str, str] | None = None,
    ) -> None:
        """Metric points and tags in as few requests as MLflow allows (one for a step)."""
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        items = [Metric(metric_key(k), float(v), now, int(s)) for k, v, s in points]
        labels = [RunTag(k, v) for k, v in (tags or {}).items()]
        for start in range(0, max(len(items), 1), BATCH):
            chunk = items[start : start + BATCH]
            if chunk or labels:
                self.client.log_batch(run_id, metrics=chunk, tags=labels)
            labels = []

    def _last(self, run_id: str, key: str) -> int:
        """The last update logged for ``key`` (read from the store once per run and key)."""
        if (run_id, key) not in self.last:
            history = self.client.get_metric_history(run_id, metric_key(key))
            self.last[(run_id, key)] = max((m.step for m in history), default=-1)
        return self.last[(run_id, key)]

    def _log_curves(self, run_id: str, kind: str, folder: Path) -> bool:
        """Logs the points of ``folder``'s curves past those logged; whether it has curves."""
        curves = self._curves(kind, folder)
        points = []
        for key, line in curves.items():
            last = self._last(run_id, key)
            fresh = [(key, value, update) for update, value in line if update > last]
            if fresh:
                points += fresh
                self.last[(run_id, key)] = fresh[-1][2]
        if points:
            self._metrics(run_id, points)
        return bool(curves)

    def _curves(self, kind: str, folder: Path) -> dict[str, list[tuple[int, float]]]:
        if self.registry is None:
            from mtcore.contracts.registry import load_registry

            self.registry = load_registry()
        try:
            cls = self.registry.load("steps", kind)
        except MtcoreError:
            return {}
        return cls.curves(folder)

    def _log_manifest(
        self, run_id: str, manifest: dict[str, Any], status: str, trained: bool = False
    ) -> None:
        """A step's counts, numeric metrics, scores (their signatures as tags) and seconds;
        a training's (``trained``: it has curves) without fairseq's raw names
        (:data:`~mtcore.report.mlflow_store.RAW_TRAINING`)."""
        points: list[tuple[str, float, int]] = []
        tags = {"mtcore.status": status, "mtcore.resumed": str(bool(manifest.get("resumed")))}
        for key, value in manifest.get("counts", {}).items():
            if isinstance(value, int | float):
                points.append((f"counts/{key}", value, 0))
        for key, value in manifest.get("metrics", {}).items():
            if isinstance(value, bool) or (trained and RAW_TRAINING.match(key)):
                continue
            if isinstance(value, int | float):
                points.append((key, value, 0))
            elif isinstance(value, dict) and "score" in value:
                points.append((f"score/{key}", value["score"], 0))
                if "signature" in value:
                    tags[signature_tag(key)] = str(value["signature"])[:5000]
        if isinstance(manifest.get("seconds"), int | float):
            points.append(("seconds", manifest["seconds"], 0))
        self._metrics(run_id, points, tags)

    def _log_stages(self, result: RunResult) -> None:
        """The stage scores on the workdir's run: ``<direction>/<metric>`` with the stage's
        index as its step (a line over the stages), and each stage as a key of its own; a
        signature tag per direction and metric (an older mtcore's one per metric is removed)."""
        stages: list[str] = []
        points = []
        signatures: dict[str, str] = {}
        for item in result.results:
            staged = item.planned.spec.plugin.stage(item.planned.id)
            if staged is None:
                continue
            stage, direction = staged
            if stage not in stages:
                stages.append(stage)
            for name, value in item.manifest.get("metrics", {}).items():
                if isinstance(value, dict) and "signature" in value:
                    score = float(value["score"])
                    points.append((f"{direction}/{name}", score, stages.index(stage)))
                    points.append((f"stage/{stage}/{direction}/{name}", score, 0))
                    signatures[signature_tag(name, direction)] = str(value["signature"])[:5000]
                    signatures.setdefault(signature_tag(name), "")
        old = self.client.get_run(str(self.parent)).data.tags
        for key, value in signatures.items():
            if value:
                self.client.set_tag(self.parent, key, value)
            elif key in old:  # one tag for every direction: whichever was logged last
                self.client.delete_tag(self.parent, key)
        if stages:
            self.client.set_tag(self.parent, "mtcore.stages", ", ".join(stages))
        fresh = [p for p in points if p[2] > self._last(str(self.parent), p[0])]
        self._metrics(str(self.parent), fresh)

    def _poll(self) -> None:
        """Logs the curves of running steps from their working folders until the run ends."""
        while not self._stop.wait(self.poll_seconds):
            try:
                self.poll_once()
            except Exception as exc:  # a tracking hiccup must not stop the run
                log.warning("tracking: %s", exc)

    def summary(self) -> list[str]:
        """A line per MLflow run logged to (one, or one per variant of ``--ablate``): where,
        in which experiment, under which run id."""
        return [
            f"tracking: MLflow run {run_id} (experiment {name!r}) at {store}"
            for store, name, run_id in self.opened
        ]

    def poll_once(self) -> None:
        with self.lock:
            if self.workdir is None:
                return
            for step_id, kind in list(self.running.items()):
                planned = self.plan[step_id]
                folder = work_dir(self.workdir, planned.dirname)
                if folder.exists():
                    self._log_curves(self.children[planned.dirname], kind, folder)


def _reachable(uri: str) -> None:
    """A tracking server answers its health check within seconds."""
    import urllib.request

    with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=10) as answer:
        answer.read()


def _quote(text: str) -> str:
    return text.replace("'", "\\'")
