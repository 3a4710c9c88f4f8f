"""Lifecycle hooks (pluggy). Components are never registered through hooks: only events."""

from __future__ import annotations

from typing import Any

import pluggy

PROJECT = "mtcore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class LifecycleSpec:
    @hookspec
    def mtcore_recipe_loaded(self, recipe: Any) -> None:
        """A recipe was loaded and validated, before planning."""

    @hookspec
    def mtcore_run_started(self, recipe: Any, workdir: Any, plan: Any, label: str | None) -> None:
        """A run holds ``workdir`` and is about to start its ``plan`` (a list of
        ``PlannedStep``, dependencies first); ``label`` as for ``mtcore_run_finished``."""

    @hookspec
    def mtcore_step_started(self, step_id: str, kind: str, step_hash: str) -> None:
        """A step is about to run (not called for a step found complete in the cache)."""

    @hookspec
    def mtcore_step_finished(self, step_id: str, kind: str, manifest: dict[str, Any]) -> None:
        """A step completed and its output was renamed into place."""

    @hookspec
    def mtcore_run_finished(self, recipe: Any, result: Any, label: str | None) -> None:
        """A run ended with every step of its plan done (run or cached) or, with
        ``--keep-going``, failed; ``result`` is the run's ``RunResult``, in plan order, and
        ``label`` names its report files where variants share a workdir. The built-in report
        writer (:class:`mtcore.report.markdown.ReportWriter`) writes ``report.md`` here."""

    @hookspec
    def mtcore_add_commands(self, cli: Any) -> None:
        """Add click commands to the ``mtcore`` command group."""


def lifecycle_manager() -> pluggy.PluginManager:
    """A fresh manager of the lifecycle hooks with no implementation registered: the runner's
    when it is given none (it announces events; what presents a run registers on it)."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(LifecycleSpec)
    return pm
