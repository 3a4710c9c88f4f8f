"""A step's context outside a run, for tests that run one step's plugin directly."""

from __future__ import annotations

from pathlib import Path

from mtcore.contracts.registry import Registry, load_registry
from mtcore.contracts.step import Artifact, StepContext
from mtcore_plugins.executors.local import LocalExecutor


def make_ctx(
    work: Path, kind: str, registry: Registry | None = None, workers: int = 1, **inputs: Path
) -> StepContext:
    """The context a ``kind`` step gets in ``work``: ``inputs`` (role -> artifact folder) opened,
    a local executor of ``workers``, ``registry`` (else a fresh one), no progress bars."""
    return StepContext(
        step_id=kind,
        kind=kind,
        step_hash="x",
        work=work,
        inputs={role: Artifact.open(path) for role, path in inputs.items()},
        executor=LocalExecutor(LocalExecutor.Config(workers=workers)),
        registry=registry if registry is not None else load_registry(),
        show_progress=False,
    )
